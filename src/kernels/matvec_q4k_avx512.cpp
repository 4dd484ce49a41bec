// AVX-512 VNNI Q4_K x Q8 dot (kernels/matvec_q4k.h). One zmm of 64 quant bytes holds two
// 64-weight chunks: its low nibbles are sub-blocks 2c and 2c + 2 (bytes 0..31, 32..63), its
// high nibbles sub-blocks 2c + 1 and 2c + 3. vpdpbusd of those unsigned nibbles against the
// matching activation halves (two 32-byte loads joined) leaves 8 int32 lanes per
// sub-block; the lanes are scaled by their sub-block's (d sc_j) da_j (a permute of the 8
// scales) into one float accumulator per chunk pair and nibble half.
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/matvec_q4k.h"

namespace cbx {
namespace {

// Activation bytes x + o0 .. +32 in the low half, x + o1 .. +32 in the high half.
inline __m512i join(const int8_t* x, int o0, int o1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + o0))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + o1)), 1);
}

}  // namespace

void dot_q4_k_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy) {
  const int64_t nsb = k / kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  // Lanes 0..7 take scale j0, 8..15 scale j1, for (j0, j1) = (0, 2), (1, 3), (4, 6), (5, 7).
  const __m512i i02 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i i13 = _mm512_add_epi32(i02, _mm512_set1_epi32(1));
  const __m512i i46 = _mm512_add_epi32(i02, _mm512_set1_epi32(4));
  const __m512i i57 = _mm512_add_epi32(i02, _mm512_set1_epi32(5));
  for (int64_t m = m0; m < m1; ++m) {
    auto* row = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* da = q8_act_d(a, k);
      const int32_t* asum = q8_act_sum(a, k);
      __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      __m256 accm = _mm256_setzero_ps();
      for (int64_t b = 0; b < nsb; ++b) {
        const BlockQ4_K& blk = row[b];
        __builtin_prefetch(reinterpret_cast<const char*>(&blk) + 4 * sizeof(BlockQ4_K), 0, 3);
        __builtin_prefetch(reinterpret_cast<const char*>(&blk) + 4 * sizeof(BlockQ4_K) + 64, 0, 3);
        __builtin_prefetch(reinterpret_cast<const char*>(&blk) + 4 * sizeof(BlockQ4_K) + 128, 0, 3);
        uint64_t scb, mnb;
        q4_k_scale_bytes(blk.scales, &scb, &mnb);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk.d)), dmin = _mm256_set1_ps(_cvtsh_ss(blk.dmin));
        const __m256 dj = _mm256_loadu_ps(da + b * 8);
        const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(scb))));
        const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mnb))));
        const __m512 s = _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_mul_ps(d, scf), dj));
        const __m256 sm = _mm256_mul_ps(_mm256_mul_ps(dmin, mnf), dj);
        accm = _mm256_fmadd_ps(sm, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(asum + b * 8))),
                               accm);
        const int8_t* x = qs + b * kQK_K;
        const __m512i q0 = _mm512_loadu_si512(blk.qs), q1 = _mm512_loadu_si512(blk.qs + 64);
        const __m512i z = _mm512_setzero_si512();
        const __m512i p0 = _mm512_dpbusd_epi32(z, _mm512_and_si512(q0, m4), join(x, 0, 64));
        const __m512i p1 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4), join(x, 32, 96));
        const __m512i p2 = _mm512_dpbusd_epi32(z, _mm512_and_si512(q1, m4), join(x, 128, 192));
        const __m512i p3 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4), join(x, 160, 224));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(i02, s), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(i13, s), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p2), _mm512_permutexvar_ps(i46, s), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p3), _mm512_permutexvar_ps(i57, s), acc3);
      }
      const __m512 t = _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3));
      __m128 r = _mm_add_ps(_mm256_castps256_ps128(accm), _mm256_extractf128_ps(accm, 1));
      r = _mm_add_ps(r, _mm_movehl_ps(r, r));
      r = _mm_add_ss(r, _mm_movehdup_ps(r));
      y[n * ldy + m] = _mm512_reduce_add_ps(t) - _mm_cvtss_f32(r);
    }
  }
}

}  // namespace cbx
