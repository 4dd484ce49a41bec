// GGUF metadata values: accessors and structural equality (shared by reader and writer).
#include "core/gguf.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace cbx {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_floating(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

}  // namespace

int64_t GgufValue::as_int() const {
  if (is_unsigned(type)) {
    const uint64_t* u = std::get_if<uint64_t>(&v);
    CBX_CHECK(u, "gguf: malformed %s value", gguf_type_name(type));
    CBX_CHECK(*u <= uint64_t(std::numeric_limits<int64_t>::max()), "gguf: %s value %llu overflows int64",
              gguf_type_name(type), (unsigned long long)*u);
    return int64_t(*u);
  }
  if (is_signed(type)) {
    const int64_t* i = std::get_if<int64_t>(&v);
    CBX_CHECK(i, "gguf: malformed %s value", gguf_type_name(type));
    return *i;
  }
  fail("gguf: expected an integer value, got %s", gguf_type_name(type));
}

double GgufValue::as_float() const {
  if (is_floating(type)) {
    const double* d = std::get_if<double>(&v);
    CBX_CHECK(d, "gguf: malformed %s value", gguf_type_name(type));
    return *d;
  }
  if (is_unsigned(type)) {
    const uint64_t* u = std::get_if<uint64_t>(&v);
    CBX_CHECK(u, "gguf: malformed %s value", gguf_type_name(type));
    return double(*u);
  }
  if (is_signed(type)) return double(as_int());
  fail("gguf: expected a numeric value, got %s", gguf_type_name(type));
}

bool GgufValue::as_bool() const {
  const bool* b = std::get_if<bool>(&v);
  CBX_CHECK(type == GgufType::BOOL && b, "gguf: expected a bool value, got %s", gguf_type_name(type));
  return *b;
}

const std::string& GgufValue::as_string() const {
  const std::string* s = std::get_if<std::string>(&v);
  CBX_CHECK(type == GgufType::STRING && s, "gguf: expected a string value, got %s", gguf_type_name(type));
  return *s;
}

const GgufArray& GgufValue::as_array() const {
  const std::shared_ptr<GgufArray>* a = std::get_if<std::shared_ptr<GgufArray>>(&v);
  CBX_CHECK(type == GgufType::ARRAY && a && *a, "gguf: expected an array value, got %s", gguf_type_name(type));
  return **a;
}

std::vector<int64_t> GgufValue::as_int_array() const {
  const GgufArray& a = as_array();
  CBX_CHECK(is_unsigned(a.type) || is_signed(a.type), "gguf: expected an integer array, got an array of %s",
            gguf_type_name(a.type));
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const GgufValue& x : a.items) out.push_back(x.as_int());
  return out;
}

std::vector<float> GgufValue::as_float_array() const {
  const GgufArray& a = as_array();
  CBX_CHECK(is_unsigned(a.type) || is_signed(a.type) || is_floating(a.type),
            "gguf: expected a numeric array, got an array of %s", gguf_type_name(a.type));
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const GgufValue& x : a.items) out.push_back(float(x.as_float()));
  return out;
}

std::vector<std::string> GgufValue::as_string_array() const {
  const GgufArray& a = as_array();
  CBX_CHECK(a.type == GgufType::STRING, "gguf: expected a string array, got an array of %s", gguf_type_name(a.type));
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const GgufValue& x : a.items) out.push_back(x.as_string());
  return out;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  if (const double* x = std::get_if<double>(&a.v)) {
    double y = std::get<double>(b.v);
    return (std::isnan(*x) && std::isnan(y)) || *x == y;
  }
  if (const auto* x = std::get_if<std::shared_ptr<GgufArray>>(&a.v)) {
    const auto& y = std::get<std::shared_ptr<GgufArray>>(b.v);
    if (!*x || !y) return !*x && !y;
    if ((*x)->type != y->type || (*x)->items.size() != y->items.size()) return false;
    for (size_t i = 0; i < y->items.size(); ++i)
      if (!same_value((*x)->items[i], y->items[i])) return false;
    return true;
  }
  return a.v == b.v;
}

}  // namespace cbx
