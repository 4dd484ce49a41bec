#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>

#include "bench.h"
#include "core/log.h"

namespace cbx::bench {
std::vector<Bench>& benches() {
  static std::vector<Bench> list;
  return list;
}

double clock_seconds(bool cpu, int threads) {
  if (cpu) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double(t.tv_sec) + double(t.tv_nsec) * 1e-9) / threads;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace cbx::bench

int main(int argc, char** argv) {
  cbx::set_log_sink(cbx::log_to_stderr, nullptr);  // the library's warnings, on stderr
  auto& list = cbx::bench::benches();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fprintf(argc < 2 ? stderr : stdout, "usage: chatterbox-bench BENCH [options]\n\nbenches:\n");
    for (const auto& b : list) std::fprintf(argc < 2 ? stderr : stdout, "  %-10s %s\n", b.name, b.summary);
    return argc < 2 ? 1 : 0;
  }
  for (const auto& b : list) {
    if (!std::strcmp(b.name, argv[1])) {
      try {
        return b.fn(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "chatterbox-bench %s: error: %s\n", b.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "chatterbox-bench: unknown bench '%s'\n", argv[1]);
  return 1;
}
