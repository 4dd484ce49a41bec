#include "core/cpu.h"

#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CBX_HAVE_CPUID 1
#else
#define CBX_HAVE_CPUID 0
#endif

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/debug_env.h"
#include "core/log.h"
#include "core/x86_kernels.h"

namespace cbx {
namespace {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
};

#if CBX_HAVE_CPUID
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}
#endif

// CPUID leaves 1 and 7 plus the OS's register-state support (XCR0). Off x86 nothing is set:
// there are no per-ISA kernels to choose between.
CpuFeatures probe() {
  CpuFeatures f;
#if CBX_HAVE_CPUID
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  bool avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  uint64_t xcr0 = xgetbv0();
  bool ymm_os = (xcr0 & 0x6) == 0x6;
  bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_os && (b & (1u << 5));
  f.avx512f = zmm_os && (b & (1u << 16));
  f.avx512dq = zmm_os && (b & (1u << 17));
  f.avx512bw = zmm_os && (b & (1u << 30));
  f.avx512vl = zmm_os && (b & (1u << 31));
  f.avx512vnni = zmm_os && (c & (1u << 11));
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = zmm_os && (a1 & (1u << 5));
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = probe();
  return f;
}

// CBX_DEBUG_FORCE_ISA (core/debug_env.h); -1 when unset.
int parse_forced() { return debug_env().force_isa; }

}  // namespace

Isa detected_isa() {
#if !CBX_X86_KERNELS
  return Isa::Generic;  // built without the AVX2 / AVX-512 kernels (not x86-64, or CBX_X86_KERNELS=OFF)
#else
  const CpuFeatures& f = features();
  // The AVX-512 kernels use F/BW/VL/DQ + VNNI + BF16 (Zen 4, Sapphire Rapids and later).
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx512bf16 && f.fma && f.f16c)
    return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Generic;
#endif
}

bool forced_isa_unavailable() {
  int forced = parse_forced();
  return forced > int(detected_isa());
}

Isa active_isa() {
  static const Isa isa = [] {
    int forced = parse_forced();
    Isa det = detected_isa();
    if (forced < 0) return det;
    if (forced > int(det)) {
      log(LogLevel::Warn, "chatterbox: CBX_DEBUG_FORCE_ISA=%s not supported by this CPU, using %s",
          isa_name(Isa(forced)), isa_name(det));
      return det;
    }
    return Isa(forced);
  }();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic:
      return "generic";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

// Only where kernels could use them.
bool cpu_has_avx512_vnni() { return CBX_X86_KERNELS && features().avx512vnni; }
bool cpu_has_avx512_bf16() { return CBX_X86_KERNELS && features().avx512bf16; }

namespace {

PrefetchLevel probe_prefetch_level() {
  if (const int forced = debug_env().stream_prefetch; forced >= 0) return PrefetchLevel(forced);
  return cpu_is_amd() && cpu_family() >= 0x1a ? PrefetchLevel::L1 : PrefetchLevel::L2;
}

}  // namespace

bool cpu_is_amd() {
  static const bool amd = [] {
#if !CBX_HAVE_CPUID
    return false;
#else
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    return std::strcmp(vendor, "AuthenticAMD") == 0;
#endif
  }();
  return amd;
}

int cpu_family() {
#if !CBX_HAVE_CPUID
  return 0;
#else
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  unsigned family = (a >> 8) & 0xf;
  if (family == 0xf) family += (a >> 20) & 0xff;
  return int(family);
#endif
}

PrefetchLevel stream_prefetch_level() {
  static const PrefetchLevel level = probe_prefetch_level();
  return level;
}

// ---- available_cpus ----

namespace {

// The whole of s (surrounding whitespace allowed) as a decimal integer.
std::optional<int64_t> parse_i64(std::string s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return std::nullopt;
  s = s.substr(b, e - b + 1);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// ceil(quota / period) CPUs, at least 1; nullopt unless both are positive.
std::optional<int> quota_cpus(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  const int64_t n = quota / period + (quota % period != 0 ? 1 : 0);
  return int(std::clamp<int64_t>(n, 1, INT_MAX));
}

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tightest limit of `read_one(dir)` over `base + path` and its parents up to `base`.
template <typename ReadOne>
std::optional<int> walk_up(const std::string& base, std::string path, ReadOne&& read_one) {
  std::optional<int> best;
  while (true) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::string dir = path.empty() || path == "/" ? base : base + path;
    if (const std::optional<int> n = read_one(dir)) best = best ? std::min(*best, *n) : *n;
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  return best;
}

int affinity_cpus() {
  for (int n = 1024; n <= (1 << 16); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(size_t(n));
    if (!set) break;
    const size_t size = CPU_ALLOC_SIZE(size_t(n));
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return std::max(1, count);
    if (errno != EINVAL) break;  // EINVAL: the mask is too small for the kernel's CPU count
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::optional<int> parse_cgroup_v2_cpu_max(const std::string& contents) {
  std::istringstream in(contents);
  std::string quota, period;
  if (!(in >> quota) || quota == "max") return std::nullopt;
  const std::optional<int64_t> q = parse_i64(quota);
  std::optional<int64_t> p = int64_t(100000);  // the kernel's default period, should the field be missing
  if (in >> period) p = parse_i64(period);
  if (!q || !p) return std::nullopt;
  return quota_cpus(*q, *p);
}

std::optional<int> parse_cgroup_v1_cpu_quota(const std::string& quota, const std::string& period) {
  const std::optional<int64_t> q = parse_i64(quota), p = parse_i64(period);
  if (!q || !p) return std::nullopt;
  return quota_cpus(*q, *p);
}

std::optional<int> cgroup_cpu_limit(const std::string& root, const std::string& proc_self_cgroup) {
  std::optional<int> best;
  auto keep = [&](std::optional<int> n) {
    if (n) best = best ? std::min(*best, *n) : *n;
  };
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t c1 = line.find(':'), c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {  // cgroup v2
      keep(walk_up(root, path, [](const std::string& dir) -> std::optional<int> {
        const std::optional<std::string> s = read_small_file(dir + "/cpu.max");
        return s ? parse_cgroup_v2_cpu_max(*s) : std::nullopt;
      }));
      continue;
    }
    bool cpu = false;  // v1: is "cpu" among the comma-separated controllers?
    for (size_t b = 0; b <= controllers.size();) {
      const size_t e = std::min(controllers.find(',', b), controllers.size());
      if (controllers.compare(b, e - b, "cpu") == 0) cpu = true;
      b = e + 1;
    }
    if (!cpu) continue;
    auto read_v1 = [](const std::string& dir) -> std::optional<int> {
      const std::optional<std::string> q = read_small_file(dir + "/cpu.cfs_quota_us");
      const std::optional<std::string> p = read_small_file(dir + "/cpu.cfs_period_us");
      return q && p ? parse_cgroup_v1_cpu_quota(*q, *p) : std::nullopt;
    };
    keep(walk_up(root + "/" + controllers, path, read_v1));
    if (controllers != "cpu") keep(walk_up(root + "/cpu", path, read_v1));
  }
  return best;
}

int available_cpus() {
  static const int n = [] {
    int cpus = affinity_cpus();
    if (const std::optional<std::string> self = read_small_file("/proc/self/cgroup"))
      if (const std::optional<int> quota = cgroup_cpu_limit("/sys/fs/cgroup", *self)) cpus = std::min(cpus, *quota);
    return std::max(1, cpus);
  }();
  return n;
}

}  // namespace cbx
