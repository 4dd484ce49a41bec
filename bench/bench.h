// chatterbox-bench: benchmark programs register themselves as subcommands.
#pragma once
#include <vector>

namespace cbx::bench {

using BenchFn = int (*)(int argc, char** argv);  // argv[0] is the bench name

struct Bench {
  const char* name;
  const char* summary;
  BenchFn fn;
};

std::vector<Bench>& benches();

struct RegisterBench {
  RegisterBench(const char* name, const char* summary, BenchFn fn) {
    benches().push_back({name, summary, fn});
  }
};

}  // namespace cbx::bench
