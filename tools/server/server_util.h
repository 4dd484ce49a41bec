// Small helpers of the HTTP layer: OpenAI-shaped errors, typed JSON fields, UTF-8, base64.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace cbx::server {

// An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, const std::string& message, std::string param_ = "", std::string code_ = "",
           std::string type_ = "");
};

// OpenAI's error type for a status: invalid_request_error (4xx), server_error (5xx), ...
std::string error_type_for(int status);
std::string error_body(int status, const std::string& message, const std::string& param = "",
                       const std::string& code = "", const std::string& type = "");

// Typed optional fields of a JSON object; absent or null -> nullopt; a wrong type -> ApiError 400
// naming the field, the expected type and the type sent.
std::optional<std::string> string_field(const nlohmann::json& j, const char* name);
std::optional<double> number_field(const nlohmann::json& j, const char* name);
std::optional<int64_t> integer_field(const nlohmann::json& j, const char* name);
std::optional<uint64_t> unsigned_field(const nlohmann::json& j, const char* name);

// Byte offset of the first invalid UTF-8 sequence in s (overlong forms, surrogates and code
// points above U+10FFFF are invalid); nullopt when s is valid.
std::optional<size_t> invalid_utf8_at(const std::string& s);
// Unicode code points of valid UTF-8 s.
size_t utf8_length(const std::string& s);
// True when s holds only Unicode white space (ASCII and the common Unicode spaces) or nothing.
bool is_blank(const std::string& s);

// s for a log line: bytes outside printable ASCII (control characters, newlines, non-UTF-8 bytes
// from a decoded URL) as \xNN, so that a client cannot forge or break log lines.
std::string printable(const std::string& s);

std::string base64_encode(const uint8_t* data, size_t n);

}  // namespace cbx::server
