#include "server_util.h"

#include <cmath>

namespace cbx::server {

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_, std::string type_)
    : std::runtime_error(message),
      status(status_),
      type(std::move(type_)),
      param(std::move(param_)),
      code(std::move(code_)) {
  if (type.empty()) type = error_type_for(status);
}

std::string error_type_for(int status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& code,
                       const std::string& type) {
  nlohmann::json e = {{"message", message},
                      {"type", type.empty() ? error_type_for(status) : type},
                      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  // Messages quote what the client sent (a voice name, a form field), which need not be UTF-8:
  // such bytes become U+FFFD instead of failing the dump (a 500 for a 4xx).
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {
const nlohmann::json* field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}
[[noreturn]] void wrong_type(const char* name, const char* expected, const nlohmann::json& v) {
  throw ApiError(400,
                 std::string("'") + name + "' must be " + expected + ", got " + v.type_name() +
                     (v.is_primitive() ? " " + v.dump() : ""),
                 name, "invalid_type");
}
}  // namespace

std::optional<std::string> string_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

std::optional<double> number_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  return v->get<double>();
}

std::optional<int64_t> integer_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json* v = field(j, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      wrong_type(name, "an integer in int64 range", *v);
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    // Range first: converting a double outside int64's range is undefined behaviour.
    const double d = v->get<double>();
    if (d > -9.2e18 && d < 9.2e18 && d == std::trunc(d)) return int64_t(d);
  }
  wrong_type(name, "an integer", *v);
}

std::optional<uint64_t> unsigned_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json* v = field(j, name);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) return uint64_t(v->get<int64_t>());
  wrong_type(name, "an integer from 0 to 18446744073709551615", *v);
}

std::optional<size_t> invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::nullopt;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_blank(const std::string& s) {
  // ASCII white space, NBSP (C2 A0), U+2000..U+200B (E2 80 80..8B), U+2028/9, U+202F, U+205F,
  // U+3000 (E3 80 80), U+FEFF (EF BB BF).
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned char c = p[i];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      i += 1;
    } else if (c == 0xC2 && i + 1 < s.size() && (p[i + 1] == 0xA0 || p[i + 1] == 0x85)) {
      i += 2;
    } else if (c == 0xE2 && i + 2 < s.size() && p[i + 1] == 0x80 &&
               (p[i + 2] <= 0x8B || p[i + 2] == 0xA8 || p[i + 2] == 0xA9 || p[i + 2] == 0xAF)) {
      i += 3;
    } else if (c == 0xE2 && i + 2 < s.size() && p[i + 1] == 0x81 && p[i + 2] == 0x9F) {
      i += 3;
    } else if (c == 0xE3 && i + 2 < s.size() && p[i + 1] == 0x80 && p[i + 2] == 0x80) {
      i += 3;
    } else if (c == 0xEF && i + 2 < s.size() && p[i + 1] == 0xBB && p[i + 2] == 0xBF) {
      i += 3;
    } else {
      return false;
    }
  }
  return true;
}

std::string base64_encode(const uint8_t* data, size_t n) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    const uint32_t v = (uint32_t(data[i]) << 16) | (uint32_t(data[i + 1]) << 8) | data[i + 2];
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += t[v & 63];
  }
  if (i + 1 == n) {
    const uint32_t v = uint32_t(data[i]) << 16;
    out += t[v >> 18], out += t[(v >> 12) & 63], out += "==";
  } else if (i + 2 == n) {
    const uint32_t v = (uint32_t(data[i]) << 16) | (uint32_t(data[i + 1]) << 8);
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += '=';
  }
  return out;
}

std::string printable(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace cbx::server
