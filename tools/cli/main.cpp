// chatterbox: the command-line front end. Each subcommand lives in its own cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "command.h"
#include "core/output_file.h"

namespace cbx::cli {
std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}
}  // namespace cbx::cli

static void usage(FILE* out) {
  auto cmds = cbx::cli::commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(out, "usage: chatterbox COMMAND [options]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'chatterbox COMMAND --help' for a command's options.\n");
}

int main(int argc, char** argv) {
  // A killed command leaves no half-written output (core/output_file.h).
  cbx::install_output_cleanup_handlers();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  for (const auto& c : cbx::cli::commands()) {
    if (!std::strcmp(c.name, argv[1])) {
      try {
        return c.fn(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "chatterbox %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "chatterbox: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 1;
}
