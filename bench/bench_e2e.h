// Pieces the end-to-end benches (turbo, mtl) share: their common options, the sentence, the
// clock and the peak RSS reading.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace cbx::bench {

// The sentence both benches prefill T3 with.
inline constexpr const char* kE2eText =
    "The quick brown fox jumps over the lazy dog, and then it runs back home before the rain starts.";

struct E2eArgs {
  std::string model, kv = "f16";
  int threads = 0, tokens = 0, mb = 1024;
  int sample_mb = 256, sample_every = 20;  // StreamSampler buffer; decode steps between samples
  uint64_t seed = 1;
};

// Option `a` not known to parse_e2e_args: consume it (next() returns its value) and return
// true, or return false for an unknown option.
using E2eExtraFn = std::function<bool(const std::string& a, const std::function<const char*()>& next)>;

// Parses -m/--model, --tokens, --threads, --kv-type f16|f32, --seed, --mb, --sample-mb,
// --sample-every and --help (prints `usage`, returns false: the bench should exit 0). Throws
// cbx::Error naming the bench on bad input.
bool parse_e2e_args(int argc, char** argv, const char* bench, const char* usage, E2eArgs& args,
                    const E2eExtraFn& extra = nullptr);

double now_ms();         // steady clock
double process_cpu_s();  // user + system CPU time of this process, all threads
double peak_rss_mb();    // VmHWM of this process

}  // namespace cbx::bench
