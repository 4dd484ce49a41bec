// The library's messages (warnings about ignored debug settings, missing optional components,
// failed internal assertions). They go to the sink the embedder installs (cbx_log_set in the C
// API, set_log_sink here) and nowhere else: with no sink the library writes nothing to stderr
// or stdout. The CLI and the bench install a sink that prints to stderr.
#pragma once

namespace cbx {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

// message: one line, no trailing newline, valid during the call only.
using LogSink = void (*)(LogLevel level, const char* message, void* user_data);

// Process-wide. Messages reach the sink one at a time (a mutex serialises them, from whichever
// thread logs); set_log_sink waits for a message in flight. A sink must not call set_log_sink
// or log. nullptr: messages are dropped.
void set_log_sink(LogSink sink, void* user_data);

// printf-style; a no-op without a sink.
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A sink that writes each message and a newline to stderr (for the command-line tools).
void log_to_stderr(LogLevel level, const char* message, void* user_data);

}  // namespace cbx
