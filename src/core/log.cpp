#include "core/log.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace cbx {
namespace {

std::mutex g_mutex;
LogSink g_sink = nullptr;
void* g_user_data = nullptr;

}  // namespace

void set_log_sink(LogSink sink, void* user_data) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sink = sink;
  g_user_data = user_data;
}

void log(LogLevel level, const char* fmt, ...) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_sink) return;
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string message(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(message.data(), message.size() + 1, fmt, args);
  va_end(args);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  g_sink(level, message.c_str(), g_user_data);
}

void assert_failed(const char* file, int line, const char* cond) {
  log(LogLevel::Error, "%s:%d: assertion failed: %s", file, line, cond);
  std::abort();
}

void log_to_stderr(LogLevel, const char* message, void*) { std::fprintf(stderr, "%s\n", message); }

}  // namespace cbx
