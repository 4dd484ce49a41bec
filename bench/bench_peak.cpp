// chatterbox-bench peak [--reps R]
//
// The multiply-accumulate peak of one core for the three instructions the compute stages could
// run on: vfmadd231ps (f32: 16 MACs), vdpbf16ps (bf16 pairs: 32 MACs) and vpdpbusd (u8 x s8
// quads: 64 MACs), each as 16 independent zmm accumulator chains in a loop that does nothing
// else. One line per instruction (zmm instructions per ns, MACs per ns) and the ratios measured
// in the same run: int8_over_bf16 says what lower-precision (int8) numerics could at most gain
// over the bf16 GEMMs and convs where they run at this peak (docs/benchmarks.md). Median of R
// (default 5) timings of each. Instructions the CPU lacks are reported as missing.
#if defined(__x86_64__)
#include <immintrin.h>
#define CBX_BENCH_X86 1
#else
#define CBX_BENCH_X86 0  // the three instructions are x86's: all reported missing
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"
#include "core/cpu.h"
#include "core/error.h"
#include "stream_read.h"

// GCC 12 reports the undefined start value inside the _mm512_reduce_* intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cbx::bench {
namespace {

constexpr long kIters = 20000000;  // x 16 instructions: ~0.1 s each at ~3.5 GHz

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

#if CBX_BENCH_X86
// Each returns a value derived from every accumulator, so no chain is optimized away; the
// empty asm keeps the operand in a register the compiler may not treat as a constant.
__attribute__((target("avx512f,avx512bf16"), noinline)) float chains_bf16(long n) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  __m512i x = _mm512_set1_epi32(0x3f803f80);
  const __m512i y = _mm512_set1_epi32(0x3f003f00);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)x, (__m512bh)y);
    __asm__ volatile("" : "+v"(x));
  }
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_ps(a[i]);
  return s;
}

__attribute__((target("avx512f,avx512vnni"), noinline)) float chains_int8(long n) {
  __m512i a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_epi32(i);
  // x = 0 keeps the int32 sums where they start (no overflow; the timing does not depend on values).
  __m512i x = _mm512_setzero_si512();
  const __m512i y = _mm512_set1_epi8(5);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
    __asm__ volatile("" : "+v"(x));
  }
  long s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_epi32(a[i]);
  return float(s);
}
#endif  // CBX_BENCH_X86

struct Op {
  const char* name;
  int macs;  // per zmm instruction
  float (*fn)(long);
  bool available;
};

int run_peak(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = int(int_arg("bench peak: --reps", argv[++i], 1, 1000));
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "chatterbox-bench peak: unknown option '%s'\n", a.c_str());
      std::fprintf(help ? stdout : stderr, "usage: chatterbox-bench peak [--reps R]  (see bench/bench_peak.cpp)\n");
      return help ? 0 : 1;
    }
  }
#if CBX_BENCH_X86
  const bool avx512 = detected_isa() == Isa::Avx512;
  const Op ops[] = {{"vfmadd231ps", 16, fma_chains_avx512, avx512},
                    {"vdpbf16ps", 32, chains_bf16, avx512 && cpu_has_avx512_bf16()},
                    {"vpdpbusd", 64, chains_int8, avx512 && cpu_has_avx512_vnni()}};
#else
  const Op ops[] = {
      {"vfmadd231ps", 16, nullptr, false}, {"vdpbf16ps", 32, nullptr, false}, {"vpdpbusd", 64, nullptr, false}};
#endif
  double mac_per_ns[3] = {0, 0, 0};
  float sink = 0.f;
  for (int o = 0; o < 3; ++o) {
    if (!ops[o].available) {
      std::printf("peak op=%s missing\n", ops[o].name);
      continue;
    }
    sink += ops[o].fn(kIters / 20);  // warm-up (clock ramp)
    std::vector<double> ns;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now_s();
      sink += ops[o].fn(kIters);
      ns.push_back((now_s() - t0) * 1e9);
    }
    const double instr_per_ns = 16.0 * double(kIters) / median(ns);
    mac_per_ns[o] = instr_per_ns * ops[o].macs;
    std::printf("peak op=%s threads=1 zmm_per_ns=%.2f macs_per_ns=%.1f\n", ops[o].name, instr_per_ns, mac_per_ns[o]);
  }
  if (mac_per_ns[1] > 0 && mac_per_ns[0] > 0) std::printf("peak bf16_over_f32=%.2f\n", mac_per_ns[1] / mac_per_ns[0]);
  if (mac_per_ns[2] > 0 && mac_per_ns[1] > 0) std::printf("peak int8_over_bf16=%.2f\n", mac_per_ns[2] / mac_per_ns[1]);
  if (sink == 1.2345f) std::printf(" \n");  // keeps the results alive
  return 0;
}

RegisterBench reg("peak", "one core's MAC peak for f32 FMA, vdpbf16ps and vpdpbusd, and their ratios", run_peak);

}  // namespace
}  // namespace cbx::bench
