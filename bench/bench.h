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

// Seconds for timing: the steady wall clock, or (cpu) process CPU seconds divided by
// `threads`, an estimate of the unloaded wall time on a machine shared with other work (a
// descheduled thread accrues no CPU time; the pool's workers spin only briefly).
double clock_seconds(bool cpu, int threads);

// Median of v (mean of the middle two for an even count; 0 when empty).
double median(std::vector<double> v);

struct RegisterBench {
  RegisterBench(const char* name, const char* summary, BenchFn fn) { benches().push_back({name, summary, fn}); }
};

}  // namespace cbx::bench
