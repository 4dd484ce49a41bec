// Instruction-set detection, done once. The debugging switch CBX_DEBUG_FORCE_ISA=generic|avx2|avx512
// (core/debug_env.h) forces a path (at most what the CPU has), so every kernel can be exercised
// on one machine.
#pragma once
#include <optional>
#include <string>

namespace cbx {

enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

Isa detected_isa();  // best the CPU (and OS) supports
// detected_isa(), or CBX_DEBUG_FORCE_ISA when set. A forced ISA the CPU lacks is clamped
// to detected_isa() with a warning (core/log.h).
Isa active_isa();
// True when CBX_DEBUG_FORCE_ISA asks for more than the CPU has (tests skip then).
bool forced_isa_unavailable();
const char* isa_name(Isa isa);
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_bf16();
bool cpu_is_amd();  // vendor string "AuthenticAMD"
int cpu_family();   // display family of CPUID leaf 1 (0x19 Zen 3/4, 0x1a Zen 5), 0 if unknown

// The cache level the decode's streaming dot kernels (weights read once per token) prefetch
// into: L2 (prefetcht1) or L1 (prefetcht0). CBX_DEBUG_STREAM_PREFETCH=l1|l2 forces one; otherwise
// L1 on AMD family 1Ah (Zen 5) and later, L2 elsewhere: on Zen 5 the q4p dot streams close to a
// plain read only with L1 prefetches, while on Zen 4 L2 is the better choice (docs/benchmarks.md).
enum class PrefetchLevel : int { L1 = 0, L2 = 1 };
PrefetchLevel stream_prefetch_level();
// The prefetch hint for a level: the _MM_HINT_T0 / _MM_HINT_T1 values, which are also
// __builtin_prefetch's locality argument for them (3 -> prefetcht0, 2 -> prefetcht1; the
// kernels pass it there, as GCC's _mm_prefetch wants its own enum type and clang's a macro).
constexpr int prefetch_hint(PrefetchLevel l) { return l == PrefetchLevel::L1 ? 3 : 2; }
// On every function or lambda whose only effect is a prefetch. GCC finds such a function to be
// const (a prefetch writes nothing) and, unless it inlined the function before that analysis,
// deletes the calls as dead code: the prefetch silently vanishes from the caller's loop (it did
// from the split-KV attention kernels). Forced inlining keeps it in the loop.
#define CBX_ALWAYS_INLINE __attribute__((always_inline))

// ---- How many CPUs this process may use ----
// The default thread count. std::thread::hardware_concurrency() counts the machine's CPUs;
// a process pinned with taskset, or a container with a CPU quota, gets fewer, and running
// more threads than that makes every pool barrier wait on a descheduled thread.

// CPUs this process may run on: the sched_getaffinity mask's count, further limited by the
// cgroup CPU quota (cgroup_cpu_limit("/sys/fs/cgroup", /proc/self/cgroup)); at least 1.
// Computed once.
int available_cpus();

// The CPU limit a cgroup quota sets, quota / period rounded up (at least 1); nullopt when
// there is none ("max", -1, no or unreadable files).
//   cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD".
std::optional<int> parse_cgroup_v2_cpu_max(const std::string& contents);
//   cgroup v1 cpu.cfs_quota_us ("-1" = no limit) and cpu.cfs_period_us.
std::optional<int> parse_cgroup_v1_cpu_quota(const std::string& quota, const std::string& period);
// The tightest quota on the way from this process's cgroup up to the hierarchy's root, under
// `root` (normally /sys/fs/cgroup). proc_self_cgroup: the contents of /proc/self/cgroup, lines
// "ID:CONTROLLERS:PATH" ("0::PATH" for v2). v2: ROOT/PATH/cpu.max and each parent; v1 (the
// line whose controllers include "cpu"): ROOT/CONTROLLERS/PATH/cpu.cfs_{quota,period}_us (or
// ROOT/cpu/...) and each parent. Directories that do not exist are skipped (inside a container
// the process's own cgroup is usually mounted as the root). nullopt when nothing limits.
std::optional<int> cgroup_cpu_limit(const std::string& root, const std::string& proc_self_cgroup);

}  // namespace cbx
