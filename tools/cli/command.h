// Subcommands of the `chatterbox` CLI register themselves (one file per command), so
// adding a command never edits a shared table. Also the conventions every command shares:
// the warning form and the progress line of the long commands.
#pragma once
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/synth_options.h"

namespace cbx::cli {

using CommandFn = int (*)(int argc, char** argv);  // argv[0] is the command name

struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
  bool has_subcommands;  // `voice create`, `debug ve`: errors name the subcommand too
};

std::vector<Command>& commands();

struct RegisterCommand {
  RegisterCommand(const char* name, const char* summary, CommandFn fn, bool has_subcommands = false) {
    commands().push_back({name, summary, fn, has_subcommands});
  }
};

// Messages on stderr have one prefix, "chatterbox CMD: ", like the errors main.cpp prints
// ("chatterbox CMD: error: MSG"); warnings read "chatterbox CMD: warning: MSG". cmd is the
// command as typed ("convert", "voice create").
inline void warn(const char* cmd, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void warn(const char* cmd, const char* fmt, ...) {
  std::fprintf(stderr, "chatterbox %s: warning: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

// Whether a long command shows its progress line: on when stderr is a terminal, off with
// -q / --quiet. The environment variable CBX_PROGRESS=1 forces it on (tests, logs that want it),
// CBX_PROGRESS=0 off; --quiet wins over both.
inline bool progress_wanted(bool quiet) {
  if (quiet) return false;
  if (const char* e = std::getenv("CBX_PROGRESS"); e && *e) return std::strcmp(e, "0") != 0;
  return isatty(STDERR_FILENO) == 1;
}

// One progress line on stderr, "CMD: TEXT", each update overwriting the last (carriage return,
// padded with spaces over a longer previous text); finish() ends it with a newline. Call
// finish() before printing anything else on stderr (a warning), or the text would mix.
class ProgressLine {
 public:
  ProgressLine(std::string cmd, bool on) : cmd_(std::move(cmd)), on_(on) {}
  ~ProgressLine() { finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool on() const { return on_; }
  void update(const std::string& text) {
    if (!on_) return;
    const std::string line = cmd_ + ": " + text;
    const size_t pad = line.size() < width_ ? width_ - line.size() : 0;
    std::fprintf(stderr, "\r%s%*s", line.c_str(), int(pad), "");
    if (pad) std::fprintf(stderr, "\r%s", line.c_str());  // cursor back after the text
    std::fflush(stderr);
    width_ = line.size();
  }
  // "stage done/total (item)", or "stage item" without a count.
  void update(const char* stage, long long done, long long total, const std::string& item) {
    if (!on_) return;
    char buf[64];
    if (total > 0) {
      std::snprintf(buf, sizeof buf, "%s %lld/%lld", stage, done, total);
      update(std::string(buf) + (item.empty() ? "" : " (" + item + ")"));
    } else {
      update(std::string(stage) + " " + item);
    }
  }
  void finish() {
    if (width_) std::fputc('\n', stderr);
    width_ = 0;
  }

 private:
  std::string cmd_;
  bool on_;
  size_t width_ = 0;  // length of the text on the line now; 0: no line open
};

// A strict integer flag value in [lo, hi]; InvalidArgumentError naming the flag otherwise
// ("--threads must be 1 .. 1024, got 0"). Text that is not an integer fails in parse_int.
inline int64_t int_flag(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  const int64_t v = cbx::parse_int(flag, text);
  if (v < lo || v > hi)
    throw cbx::InvalidArgumentError(flag + " must be " + std::to_string(lo) + " .. " + std::to_string(hi) + ", got " +
                                    text);
  return v;
}

}  // namespace cbx::cli
