// Instruction-set detection, done once. CBX_FORCE_ISA=generic|avx2|avx512 forces a
// path (at most what the CPU has), so every kernel can be exercised on one machine.
#pragma once

namespace cbx {

enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

Isa detected_isa();  // best the CPU (and OS) supports
// detected_isa(), or CBX_FORCE_ISA when set. A forced ISA the CPU lacks is clamped
// to detected_isa() with a warning on stderr.
Isa active_isa();
// True when CBX_FORCE_ISA asks for more than the CPU has (tests skip then).
bool forced_isa_unavailable();
const char* isa_name(Isa isa);
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_bf16();
bool cpu_is_amd();  // vendor string "AuthenticAMD"
int cpu_family();   // display family of CPUID leaf 1 (0x19 Zen 3/4, 0x1a Zen 5), 0 if unknown

// The cache level the decode's streaming dot kernels (weights read once per token) prefetch
// into: L2 (prefetcht1) or L1 (prefetcht0). CBX_STREAM_PREFETCH=l1|l2 forces one; otherwise
// L1 on AMD family 1Ah (Zen 5) and later, L2 elsewhere. Measured (docs/benchmarks.md): on
// Zen 5 the q4p dot on two threads streams 54-63 GB/s with L2 prefetches and 75-80 with L1
// (a plain read ~80); on Zen 4 the L2 choice was measured best.
enum class PrefetchLevel : int { L1 = 0, L2 = 1 };
PrefetchLevel stream_prefetch_level();
// The prefetch hint for a level: the _MM_HINT_T0 / _MM_HINT_T1 values, which are also
// __builtin_prefetch's locality argument for them (3 -> prefetcht0, 2 -> prefetcht1; the
// kernels pass it there, as GCC's _mm_prefetch wants its own enum type and clang's a macro).
constexpr int prefetch_hint(PrefetchLevel l) { return l == PrefetchLevel::L1 ? 3 : 2; }

}  // namespace cbx
