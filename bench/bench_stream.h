// chatterbox-bench turbo --stream (bench/bench_stream.cpp): streamed against non-streamed.
#pragma once
#include "bench_e2e.h"
#include "pipeline/stream_synth.h"

namespace cbx::bench {

struct StreamBenchArgs {
  bool on = false;
  int reps = 3;
  StreamSchedule sched;
};

int run_turbo_stream(const E2eArgs& args, const StreamBenchArgs& sa);

}  // namespace cbx::bench
