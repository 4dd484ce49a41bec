#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>

#include "bench.h"
#include "core/error.h"
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

namespace {
// strto* skip leading white space (and strtoull negates "-5"): a value must start with its
// sign or first digit.
bool starts_number(const char* v) { return *v == '-' || *v == '+' || *v == '.' || (*v >= '0' && *v <= '9'); }
}  // namespace

long long int_arg(const std::string& flag, const char* v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  CBX_CHECK(starts_number(v) && errno == 0 && end != v && *end == '\0' && x >= lo && x <= hi,
            "%s must be an integer in [%lld, %lld], got '%s'", flag.c_str(), lo, hi, v);
  return x;
}

uint64_t u64_arg(const std::string& flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  CBX_CHECK(v[0] >= '0' && v[0] <= '9' && errno == 0 && end != v && *end == '\0',
            "%s must be an unsigned 64-bit integer, got '%s'", flag.c_str(), v);
  return uint64_t(x);
}

double double_arg(const std::string& flag, const char* v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  CBX_CHECK(starts_number(v) && end != v && *end == '\0' && std::isfinite(x) && x >= lo && x <= hi,
            "%s must be a number in [%g, %g], got '%s'", flag.c_str(), lo, hi, v);
  return x;
}

bool cpu_clock_arg(const std::string& flag, const char* v) {
  const std::string s = v;
  CBX_CHECK(s == "wall" || s == "cpu", "%s must be wall or cpu, got '%s'", flag.c_str(), v);
  return s == "cpu";
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
