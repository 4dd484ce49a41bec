// Helpers of the fused bf16 attention kernels (kernels/attention_amx.h has the layouts and
// the data flow): AMX tiles (attention_amx_avx512.cpp) and vdpbf16ps
// (attention_vdpbf16_avx512.cpp) share the k / v packers, the q block load and the softmax
// row. Only AVX-512 translation units include this.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/attention_amx.h"

// GCC 12 reports the undefined start value inside the _mm512_reduce_* / mask intrinsics as
// maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cbx {

// kp / vp of one head (layouts in kernels/attention_amx.h); defined in attention_amx_avx512.cpp.
void attention_bf16_pack_k(const float* k, int64_t k_rs, int64_t Tk, int64_t D, uint16_t* kp);
void attention_bf16_pack_v(const float* v, int64_t v_rs, int64_t Tk, int64_t D, uint16_t* vp);

namespace attn_bf16 {

constexpr int kQb = int(kAttnAmxQueryBlock);

// Lanes [0, n) of 16 (n may be <= 0 or >= 16).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Interleaves the 16 values of a (even rows) and b (odd rows) as bf16 pairs: a0 b0 a1 b1 ...
inline __m512i pair_bf16(__m512 a, __m512 b) {
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// f32 row [n] -> bf16 [n] (n % 32 == 0).
inline void row_bf16(const float* x, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
}

inline __m512 exp2_poly(__m512 t) {
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.05517132207751274f), f, _mm512_set1_ps(0.24261054396629333f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6932609677314758f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9999281167984009f));
  return _mm512_scalef_ps(p, n);
}

// Row of Tk scores (f32) -> probabilities (bf16, in place over the row's first half, zero in
// [Tk, round_up(Tk, 32))); returns 1 / sum. Loads of [j, j + 32) happen before the 64-byte
// store at byte 2 j, which only covers scores < j + 16 already read (the store trails the loads).
inline float softmax_row_bf16(float* s, int64_t Tk, float scale) {
  const int64_t full16 = Tk / 16 * 16, full32 = Tk / 32 * 32;
  __m512 mx = _mm512_set1_ps(-INFINITY), mx1 = mx;
  int64_t j = 0;
  for (; j + 32 <= full16; j += 32) {
    mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
    mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(s + j + 16));
  }
  for (; j < Tk; j += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, lanes(Tk - j), s + j));
  const float c = scale * 1.4426950408889634f;  // log2(e)
  const __m512 vc = _mm512_set1_ps(c), vmc = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(mx, mx1)) * c);
  __m512 sum = _mm512_setzero_ps(), sum1 = sum;
  auto* p = reinterpret_cast<uint16_t*>(s);
  for (j = 0; j < full32; j += 32) {
    const __m512 pa = exp2_poly(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vc, vmc));
    const __m512 pb = exp2_poly(_mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16), vc, vmc));
    sum = _mm512_add_ps(sum, pa);
    sum1 = _mm512_add_ps(sum1, pb);
    _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(pb, pa));
  }
  if (j < Tk) {
    const __mmask16 m0 = lanes(Tk - j), m1 = lanes(Tk - j - 16);
    const __m512 a = _mm512_maskz_loadu_ps(m0, s + j), b = _mm512_maskz_loadu_ps(m1, s + j + 16);
    const __m512 pa = _mm512_maskz_mov_ps(m0, exp2_poly(_mm512_fmsub_ps(a, vc, vmc)));
    const __m512 pb = _mm512_maskz_mov_ps(m1, exp2_poly(_mm512_fmsub_ps(b, vc, vmc)));
    sum = _mm512_add_ps(sum, pa);
    sum1 = _mm512_add_ps(sum1, pb);
    _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(pb, pa));
  }
  return 1.f / _mm512_reduce_add_ps(_mm512_add_ps(sum, sum1));
}

// Query row q of head h: its scores s (scaled q k^T, unscaled in s) -> probabilities, with the
// head's additive bias row when it has one (s = scale s + bias, one f32 fma, then scale 1).
inline float softmax_row_head(const AttnAmxHead& h, int64_t q, float* s, int64_t Tk, float scale) {
  if (h.bias == nullptr) return softmax_row_bf16(s, Tk, scale);
  const float* b = h.bias + q * h.bias_rs;
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < Tk; j += 16) {
    const __mmask16 m = lanes(Tk - j);
    _mm512_mask_storeu_ps(s + j, m,
                          _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, s + j), vs, _mm512_maskz_loadu_ps(m, b + j)));
  }
  return softmax_row_bf16(s, Tk, 1.f);
}

inline uint8_t* align64(void* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

// Block it's q rows -> qb (bf16, zero rows past Tq); returns the number of valid rows.
template <int ND>
inline int load_q(const AttnAmxHead& h, int64_t q0, uint16_t* qb) {
  constexpr int64_t D = ND * 32;
  const int nq = int(h.Tq - q0 < kQb ? h.Tq - q0 : kQb);
  for (int r = 0; r < kQb; ++r) {
    if (r < nq)
      row_bf16(h.q + (q0 + r) * h.q_rs, D, qb + r * D);
    else
      std::memset(qb + r * D, 0, D * 2);
  }
  return nq;
}

// f(std::integral_constant<int, ND>{}) for head dim D = 32 ND, ND 1..4 (the front end checks D).
template <class F>
inline void with_head_dim(int64_t D, F&& f) {
  switch (D) {
    case 32:
      return f(std::integral_constant<int, 1>{});
    case 64:
      return f(std::integral_constant<int, 2>{});
    case 96:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});  // 128
  }
}

}  // namespace attn_bf16
}  // namespace cbx
