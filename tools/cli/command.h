// Subcommands of the `chatterbox` CLI register themselves (one file per command), so
// adding a command never edits a shared table.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace cbx::cli {

using CommandFn = int (*)(int argc, char** argv);  // argv[0] is the command name

struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
};

std::vector<Command>& commands();

struct RegisterCommand {
  RegisterCommand(const char* name, const char* summary, CommandFn fn) {
    commands().push_back({name, summary, fn});
  }
};

}  // namespace cbx::cli
