// Int8 GEMM (kernels/matmul_int8.h) on AVX-512 VNNI: 14 activation rows x 32 weight channels per
// tile, 28 int32 accumulators; per group of 4 k, two weight loads and one vpdpbusd per row and
// half-tile with the row's 4 u8 broadcast. vpdpbusd does 64 u8 x s8 products per instruction, twice
// vdpbf16ps's 32, at the same instruction rate on AMD Zen 4 / 5.
#include <immintrin.h>

// GCC 12 reports the intrinsics' own `_mm512_undefined_*` self-initialisation (`__Y = __Y`) as
// "may be used uninitialized" where it inlines them into this file's loops; nothing here reads
// an uninitialised value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstring>

#include "core/cpu.h"
#include "kernels/matmul_int8.h"

namespace cbx {
namespace {

constexpr int kNr = 14;

// Rows past `rows` are zero (d_x 0); k past K quantizes to 0 (u8 128), against zero weights.
void pack_x(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  const int64_t kq = (k + 3) / 4 * 4;
  auto* p = static_cast<uint8_t*>(dst);
  auto* dx = reinterpret_cast<float*>(p + kq * kNr);
  if (rows < kNr) std::memset(p, 0, size_t(int8_panel_k(k)) * kNr);
  const __m512 sign = _mm512_set1_ps(-0.f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
  for (int i = 0; i < rows; ++i) {
    const auto* r = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + i * xs);
    __m512 m = _mm512_setzero_ps();
    for (int64_t j = 0; j < k; j += 16) {
      const __mmask16 mk = k - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - j)) - 1);
      m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_maskz_loadu_ps(mk, r + j)));
    }
    const float amax = _mm512_reduce_max_ps(m);
    dx[i] = amax / 127.f;
    const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    for (int64_t j = 0; j < kq; j += 16) {
      const int64_t left = k - j;
      const __mmask16 mk = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : 0;
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, r + j), inv));  // half to even
      q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), off);
      alignas(16) uint32_t g[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(g), _mm512_cvtepi32_epi8(q));
      const int ng = int(std::min<int64_t>(4, (kq - j) / 4));
      for (int t = 0; t < ng; ++t) std::memcpy(p + ((j / 4 + t) * kNr + i) * 4, &g[t], 4);
    }
  }
}

void tile(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const int64_t kq = kc - kInt8Trailer;
  const auto* x = static_cast<const uint8_t*>(xp);
  const auto* w = static_cast<const uint8_t*>(wp);
  const uint8_t* tr = w + kq * kInt8Mr;  // d_w[32], corr[32]
  // The sums start at -corr (exact: int32 arithmetic wraps modulo 2^32 either way).
  const __m512i k0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(tr + 128));
  const __m512i k1 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(tr + 192));
  __m512i c[kNr][2];
#pragma GCC unroll 14
  for (int i = 0; i < kNr; ++i) {
    c[i][0] = k0;
    c[i][1] = k1;
  }
  for (int64_t g = 0; g < kq / 4; ++g) {
    const __m512i w0 = _mm512_loadu_si512(w + g * 128), w1 = _mm512_loadu_si512(w + g * 128 + 64);
    const int32_t* xg = reinterpret_cast<const int32_t*>(x + g * kNr * 4);
#pragma GCC unroll 14
    for (int i = 0; i < kNr; ++i) {
      const __m512i a = _mm512_set1_epi32(xg[i]);
      c[i][0] = _mm512_dpbusd_epi32(c[i][0], a, w0);
      c[i][1] = _mm512_dpbusd_epi32(c[i][1], a, w1);
    }
  }
  // The sums go through memory so the float epilogue adds no register pressure to the loop.
  alignas(64) int32_t s[kNr][32];
#pragma GCC unroll 14
  for (int i = 0; i < kNr; ++i) {
    _mm512_store_si512(s[i], c[i][0]);
    _mm512_store_si512(s[i] + 16, c[i][1]);
  }
  const auto* dx = reinterpret_cast<const float*>(x + kq * kNr);
  const __m512 dw0 = _mm512_loadu_ps(tr), dw1 = _mm512_loadu_ps(tr + 64);
  const __mmask16 m0 = mcols >= 16 ? __mmask16(0xffff) : __mmask16((1u << mcols) - 1);
  const __mmask16 m1 = mcols >= 32 ? __mmask16(0xffff) : mcols > 16 ? __mmask16((1u << (mcols - 16)) - 1) : 0;
  for (int i = 0; i < nrows; ++i) {
    const __m512 d = _mm512_set1_ps(dx[i]);
    __m512 v0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[i])), d), dw0);
    __m512 v1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[i] + 16)), d), dw1);
    float* o = y + i * ldy;
    if (acc) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), v1);
    }
    _mm512_mask_storeu_ps(o, m0, v0);
    _mm512_mask_storeu_ps(o + 16, m1, v1);
  }
}

}  // namespace

const GemmKernel* matmul_int8_gemm_avx512() {
  static const GemmKernel g{kNr, kInt8Mr, 1, 1, pack_x, nullptr, tile};
  static const bool on = cpu_has_avx512_vnni();
  return on ? &g : nullptr;
}

}  // namespace cbx
