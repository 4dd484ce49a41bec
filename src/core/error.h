// Errors inside the C++ core: exceptions carrying the function and the offending name/value.
// The C API (include/chatterbox.h) catches them and turns them into status codes.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace cbx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style message builder: fail("gguf: tensor '%s' offset %llu past end", name, off)
template <typename... Args>
[[noreturn]] inline void fail(const char* fmt, Args... args) {
  if constexpr (sizeof...(Args) == 0) {
    throw Error(fmt);
  } else {
    int n = std::snprintf(nullptr, 0, fmt, args...);
    std::string s(n > 0 ? size_t(n) : 0, '\0');
    std::snprintf(s.data(), s.size() + 1, fmt, args...);
    throw Error(s);
  }
}

// Checks that hold for any input (validation): throw with a message.
#define CBX_CHECK(cond, ...)               \
  do {                                     \
    if (!(cond)) ::cbx::fail(__VA_ARGS__); \
  } while (0)

// Internal invariants (programming errors): log the location (core/log.h), then abort.
[[noreturn]] void assert_failed(const char* file, int line, const char* cond);
#define CBX_ASSERT(cond)                                          \
  do {                                                            \
    if (!(cond)) ::cbx::assert_failed(__FILE__, __LINE__, #cond); \
  } while (0)

}  // namespace cbx
