// AVX-512 VNNI dot on q4kp rows (kernels/matvec_q4k.h) against Q8Lane activations: per group
// of 16 sub-blocks, 8 vpdpbusd leave each sub-block's integer sum in its own lane; one
// conversion and two FMAs with the 16 (d sc_j) da_j and (dmin m_j) da_j factors finish it.
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/matmul_avx512_q.h"
#include "kernels/matvec_q4k.h"
#include "kernels/matvec_q4p.h"

// GCC 12 reports the undefined start value inside the zmm reductions and zero-extensions
// (_mm512_reduce_add_ps, _mm512_zextps128_ps512) as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cbx {
namespace {

// R q4kp rows (rows[i]) against one Q8Lane activation row: y[i].
template <int R>
inline void rows_q4kp(const uint8_t* const* rows, const int8_t* qs, const float* da, const int32_t* asum, int64_t ng,
                      float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i lo8 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);  // lanes 8..15: block 1
  const __m512i hi8 = _mm512_add_epi32(lo8, _mm512_set1_epi32(2));
  __m512 acc[R], accm[R];
  for (int i = 0; i < R; ++i) acc[i] = accm[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const int8_t* x = qs + g * 512;
    __m512i xv[8];
    for (int t = 0; t < 8; ++t) xv[t] = _mm512_loadu_si512(x + 64 * t);
    const __m512 dj = _mm512_loadu_ps(da + g * 16);
    const __m512 as = _mm512_cvtepi32_ps(_mm512_loadu_si512(asum + g * 16));
    for (int i = 0; i < R; ++i) {
      const uint8_t* grp = rows[i] + size_t(g) * kQ4kpGroupBytes;
      for (int l = 0; l < 5; ++l) __builtin_prefetch(grp + 4 * kQ4kpGroupBytes + 64 * l, 0, 3);
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i q = _mm512_loadu_si512(grp + 40 + 64 * c);
        isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(q, m4), xv[c]);
        isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4), xv[c + 4]);
      }
      uint64_t dd;
      __builtin_memcpy(&dd, grp + 32, 8);
      const __m512 dm = _mm512_zextps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(dd))));  // d0 d1 dmin0 dmin1
      const __m512 scf =
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp))));
      const __m512 mnf =
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 16))));
      const __m512 s = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(lo8, dm), scf), dj);
      const __m512 sm = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(hi8, dm), mnf), dj);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[i]);
      accm[i] = _mm512_fmadd_ps(as, sm, accm[i]);
    }
  }
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(accm[i]);
}

// One weight row at a time: two rows sharing the activation loads (rows_q4kp<2>) cost more CPU
// per decode step than they saved in loads. Weight rows outermost:
// with several activation rows (a CFG pair, a row prefill) each row is streamed once.
void dot_q4kp_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy) {
  const int64_t ng = k / 512;
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* rows[1] = {static_cast<const uint8_t*>(w) + size_t(m) * ws};
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      rows_q4kp<1>(rows, q8_act_qs(a), q8_act_d(a, k), q8_act_sum(a, k), ng, y + n * ldy + m);
    }
  }
}

void to_q8_lane_q4kp(const float* x, int64_t k, void* dst) {
  to_q8_avx512(x, k, dst);
  q8_to_lane_in_place(dst, k);
}

}  // namespace

const DotKernel& q4kp_dot_avx512() {
  static const DotKernel d{ActFormat::Q8Lane, to_q8_lane_q4kp, dot_q4kp_avx512};
  return d;
}

}  // namespace cbx
