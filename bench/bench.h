// chatterbox-bench: benchmark programs register themselves as subcommands.
#pragma once
#include <cstdint>
#include <string>
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

// Strict option values: all of v a decimal number in [lo, hi], else an error that names the
// flag (with its bench, e.g. "bench t3: --steps"), the range and what was given (atoi would
// take "10x" as 10 and "x" as 0).
long long int_arg(const std::string& flag, const char* v, long long lo, long long hi);
uint64_t u64_arg(const std::string& flag, const char* v);  // a seed: any unsigned 64-bit value
double double_arg(const std::string& flag, const char* v, double lo, double hi);
bool cpu_clock_arg(const std::string& flag, const char* v);  // --clock wall|cpu: whether cpu

struct RegisterBench {
  RegisterBench(const char* name, const char* summary, BenchFn fn) { benches().push_back({name, summary, fn}); }
};

}  // namespace cbx::bench
