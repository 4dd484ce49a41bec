// chatterbox: the command-line front end. Each subcommand lives in its own cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "command.h"
#include "core/debug_env.h"
#include "core/log.h"
#include "core/output_file.h"
#include "core/version.h"

namespace cbx::cli {
std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}
}  // namespace cbx::cli

namespace {

void usage(FILE* out) {
  auto cmds = cbx::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  int width = 0;
  for (const auto& c : cmds) width = std::max(width, int(std::strlen(c.name)));
  std::fprintf(out, "usage: chatterbox COMMAND [options]\n       chatterbox --version\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-*s  %s\n", width, c.name, c.summary);
  std::fprintf(out, "\nRun 'chatterbox COMMAND --help' for a command's options.\n");
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Prints "chatterbox CMD: error: MSG". CMD is the command as typed, with its subcommand for
// commands that have them ("voice create"). Messages thrown by the commands often start with
// their own "CMD: " ("voice create: ", "debug ve: " for debug-ve); that repeat is dropped so the
// line has one prefix. Messages from the library start with the file or component at fault and
// are kept whole.
void print_error(const cbx::cli::Command& c, int argc, char** argv, const char* what) {
  std::string msg = what, label = c.name;
  auto strip = [&](const std::string& p) {
    if (!starts_with(msg, p + ": ")) return false;
    msg.erase(0, p.size() + 2);
    return true;
  };
  if (!strip(label)) {  // "voice: unknown subcommand" keeps the bare command
    if (c.has_subcommands && argc > 2 && argv[2][0] != '-') label += std::string(" ") + argv[2];
    std::string spaced = c.name;
    std::replace(spaced.begin(), spaced.end(), '-', ' ');
    if (!strip(label)) strip(spaced);
  }
  std::fprintf(stderr, "chatterbox %s: error: %s\n", label.c_str(), msg.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // The library writes its warnings nowhere on its own; the CLI shows them on stderr.
  cbx::set_log_sink(cbx::log_to_stderr, nullptr);
  // A killed command leaves no half-written output (core/output_file.h).
  cbx::install_output_cleanup_handlers();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("chatterbox.cpp %s\n", cbx::version_line());
    return 0;
  }
  for (const auto& c : cbx::cli::commands()) {
    if (!std::strcmp(c.name, argv[1])) {
      try {
        // A bad CBX_DEBUG_* value (core/debug_env.h) stops every command with one message
        // before it does anything (loading a model through the library would report it too).
        cbx::check_debug_env();
        return c.fn(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        print_error(c, argc, argv, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "chatterbox: error: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 1;
}
