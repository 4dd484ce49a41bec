// AVX2 Q4_K x Q8 dot (kernels/matvec_q4k.h): vpmaddubsw of the unsigned nibbles against
// the signed activations (at most 2 * 15 * 127 per pair: no int16 saturation), vpmaddwd
// to 8 int32 lanes per sub-block, then each sub-block's lanes scaled by (d sc_j) da_j in
// float. Four accumulators (one per 64-weight chunk) keep the FMA chains short.
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/matvec_q4k.h"

namespace cbx {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

void dot_q4_k_avx2(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                   int64_t k, float* y, int64_t ldy) {
  const int64_t nsb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t m = m0; m < m1; ++m) {
    auto* row = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* da = q8_act_d(a, k);
      const int32_t* asum = q8_act_sum(a, k);
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      __m256 accm = _mm256_setzero_ps();
      for (int64_t b = 0; b < nsb; ++b) {
        const BlockQ4_K& blk = row[b];
        __builtin_prefetch(reinterpret_cast<const char*>(&blk) + 4 * sizeof(BlockQ4_K), 0, 3);
        uint64_t scb, mnb;
        q4_k_scale_bytes(blk.scales, &scb, &mnb);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk.d)), dmin = _mm256_set1_ps(_cvtsh_ss(blk.dmin));
        const __m256 dj = _mm256_loadu_ps(da + b * 8);
        const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(scb))));
        const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mnb))));
        const __m256 s = _mm256_mul_ps(_mm256_mul_ps(d, scf), dj);
        const __m256 sm = _mm256_mul_ps(_mm256_mul_ps(dmin, mnf), dj);
        accm = _mm256_fmadd_ps(
            sm, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(asum + b * 8))), accm);
        const int8_t* x = qs + b * kQK_K;
        for (int c = 0; c < 4; ++c) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
          const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c));
          const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c + 32));
          const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), ones);
          const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), ones);
          const __m256 sl = _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(2 * c));
          const __m256 sh = _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(2 * c + 1));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pl), sl, acc[c]);
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ph), sh, acc[c]);
        }
      }
      const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
      y[n * ldy + m] = hsum256(t) - hsum256(accm);
    }
  }
}

}  // namespace cbx
