#include "core/cpu.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cbx {
namespace {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
};

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures probe() {
  CpuFeatures f;
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
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = probe();
  return f;
}

// Returns -1 when the variable is unset.
int parse_forced() {
  const char* s = std::getenv("CBX_FORCE_ISA");
  if (!s || !*s) return -1;
  if (!std::strcmp(s, "generic")) return int(Isa::Generic);
  if (!std::strcmp(s, "avx2")) return int(Isa::Avx2);
  if (!std::strcmp(s, "avx512")) return int(Isa::Avx512);
  std::fprintf(stderr, "chatterbox: ignoring CBX_FORCE_ISA=%s (expected generic|avx2|avx512)\n", s);
  return -1;
}

}  // namespace

Isa detected_isa() {
  const CpuFeatures& f = features();
  // The AVX-512 kernels use F/BW/VL/DQ + VNNI + BF16 (Zen 4, Sapphire Rapids and later).
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx512bf16 &&
      f.fma && f.f16c)
    return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Generic;
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
      std::fprintf(stderr, "chatterbox: CBX_FORCE_ISA=%s not supported by this CPU, using %s\n",
                   isa_name(Isa(forced)), isa_name(det));
      return det;
    }
    return Isa(forced);
  }();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool cpu_has_avx512_vnni() { return features().avx512vnni; }
bool cpu_has_avx512_bf16() { return features().avx512bf16; }

namespace {

PrefetchLevel probe_prefetch_level() {
  if (const char* s = std::getenv("CBX_STREAM_PREFETCH"); s && *s) {
    if (!std::strcmp(s, "l1")) return PrefetchLevel::L1;
    if (!std::strcmp(s, "l2")) return PrefetchLevel::L2;
    std::fprintf(stderr, "chatterbox: ignoring CBX_STREAM_PREFETCH=%s (expected l1|l2)\n", s);
  }
  return cpu_is_amd() && cpu_family() >= 0x1a ? PrefetchLevel::L1 : PrefetchLevel::L2;
}

}  // namespace

bool cpu_is_amd() {
  static const bool amd = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    return std::strcmp(vendor, "AuthenticAMD") == 0;
  }();
  return amd;
}

int cpu_family() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  unsigned family = (a >> 8) & 0xf;
  if (family == 0xf) family += (a >> 20) & 0xff;
  return int(family);
}

PrefetchLevel stream_prefetch_level() {
  static const PrefetchLevel level = probe_prefetch_level();
  return level;
}

}  // namespace cbx
