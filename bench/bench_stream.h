// chatterbox-bench turbo --stream / mtl --stream (bench/bench_stream.cpp): streamed against
// non-streamed synthesis in the same run.
#pragma once
#include <functional>
#include <string>

#include "bench_e2e.h"
#include "pipeline/stream_synth.h"

namespace cbx::bench {

struct StreamBenchArgs {
  bool on = false;
  int reps = 3;
  StreamSchedule sched;  // the given fields over the variant's default_stream_schedule
  unsigned given = 0;    // bits: 1 first, 2 chunk, 4 context, 8 prompt
};

// The stream options both benches take (--stream, --reps, --first, --chunk, --context,
// --prompt): consumes `a` and returns true (a value that is not a whole number in range
// throws, naming the option), or returns false for another option. The schedule's own rules
// are check_stream_schedule's (pipeline/stream_synth.h).
bool parse_stream_arg(const std::string& a, const std::function<const char*()>& next, StreamBenchArgs& sa);

int run_turbo_stream(const E2eArgs& args, const StreamBenchArgs& sa);
int run_mtl_stream(const E2eArgs& args, const StreamBenchArgs& sa, const std::string& lang);

}  // namespace cbx::bench
