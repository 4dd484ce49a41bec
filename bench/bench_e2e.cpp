#include "bench_e2e.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "bench.h"
#include "core/error.h"

namespace cbx::bench {

bool parse_e2e_args(int argc, char** argv, const char* bench, const char* usage, E2eArgs& args,
                    const E2eExtraFn& extra) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string flag = "bench " + std::string(bench) + ": " + a;  // names it in errors
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench %s: %s needs a value", bench, a.c_str());
      return argv[++i];
    };
    if (a == "-m" || a == "--model")
      args.model = next();
    else if (a == "--tokens")
      args.tokens = int(int_arg(flag, next(), 1, 100000));
    else if (a == "--threads")
      args.threads = int(int_arg(flag, next(), 0, 1024));
    else if (a == "--kv-type")
      args.kv = next();
    else if (a == "--seed")
      args.seed = u64_arg(flag, next());
    else if (a == "--mb")
      args.mb = int(int_arg(flag, next(), 1, 65536));
    else if (a == "--sample-mb")
      args.sample_mb = int(int_arg(flag, next(), 1, 65536));
    else if (a == "--sample-every")
      args.sample_every = int(int_arg(flag, next(), 1, 100000));
    else if (a == "--help" || a == "-h") {
      std::puts(usage);
      return false;
    } else if (!extra || !extra(a, next)) {
      fail("bench %s: unknown option '%s'\n%s", bench, a.c_str(), usage);
    }
  }
  CBX_CHECK(!args.model.empty(), "%s", usage);
  CBX_CHECK(args.kv == "f16" || args.kv == "f32", "bench %s: --kv-type must be f16 or f32, got '%s'", bench,
            args.kv.c_str());
  return true;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

}  // namespace cbx::bench
