// AVX-512 VNNI Q4_K x Q8 dot (kernels/matvec_q4k.h). One zmm of 64 quant bytes holds two
// 64-weight chunks: its low nibbles are sub-blocks 2c and 2c + 2 (bytes 0..31, 32..63), its
// high nibbles sub-blocks 2c + 1 and 2c + 3. vpdpbusd of those unsigned nibbles against the
// matching activation halves (two 32-byte loads joined) leaves 8 int32 lanes per
// sub-block; the lanes are scaled by their sub-block's (d sc_j) da_j (a permute of the 8
// scales) into two float accumulators.
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/matvec_q4k.h"

// GCC 12 reports the undefined upper half inside _mm512_castsi256_si512 as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cbx {
namespace {

// Activation bytes x + o0 .. +32 in the low half, x + o1 .. +32 in the high half.
inline __m512i join(const int8_t* x, int o0, int o1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + o0))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + o1)), 1);
}

// The 8 sub-block scales and mins of a block as floats (kquant_scales in 32-bit lanes: w0,
// w1, w2 = the three 4-byte words of the field). Reads 16 bytes from the field on (the
// last 4 are quants of the same block, unused).
inline void scales_f32(const uint8_t* b, __m256* sc, __m256* mn) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));  // [sc 0..3, m 0..3]
  const __m128i w2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
  const __m128i low4 = _mm_and_si128(_mm_srlv_epi32(w2, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi32(0x0f0f0f0f));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi32(0x30303030));
  const __m128i q = _mm_unpacklo_epi32(lo, _mm_or_si128(low4, top2));  // [sc 0..3, sc 4..7, m 0..3, m 4..7]
  *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
  *mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)));
}

struct Act {
  const int8_t* qs;
  const float* d;
  const int32_t* sum;
};

// Rows r[0 .. R) against one activation row: y[i] = dot(row r[i], act).
template <int R>
inline void rows_dot(const BlockQ4_K* const* r, const Act& a, int64_t nsb, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  // Lanes 0..7 take scale j0, 8..15 scale j1, for (j0, j1) = (0, 2), (1, 3), (4, 6), (5, 7).
  const __m512i i02 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i i13 = _mm512_add_epi32(i02, _mm512_set1_epi32(1));
  const __m512i i46 = _mm512_add_epi32(i02, _mm512_set1_epi32(4));
  const __m512i i57 = _mm512_add_epi32(i02, _mm512_set1_epi32(5));
  __m512 acc[R][2];
  __m256 accm[R];
  for (int i = 0; i < R; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    accm[i] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nsb; ++b) {
    const int8_t* x = a.qs + b * kQK_K;
    const __m512i x0 = join(x, 0, 64), x1 = join(x, 32, 96), x2 = join(x, 128, 192), x3 = join(x, 160, 224);
    const __m256 dj = _mm256_loadu_ps(a.d + b * 8);
    const __m256 asum = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.sum + b * 8)));
    for (int i = 0; i < R; ++i) {
      const BlockQ4_K& blk = r[i][b];
      const char* pf = reinterpret_cast<const char*>(&blk) + 4 * sizeof(BlockQ4_K);
      __builtin_prefetch(pf, 0, 3);
      __builtin_prefetch(pf + 64, 0, 3);
      __builtin_prefetch(pf + 128, 0, 3);
      uint32_t dd;
      __builtin_memcpy(&dd, &blk, 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd)));  // [d, dmin, 0, 0]
      __m256 scf, mnf;
      scales_f32(blk.scales, &scf, &mnf);
      const __m512 s = _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_mul_ps(_mm256_broadcastss_ps(dm), scf), dj));
      const __m256 sm = _mm256_mul_ps(_mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), mnf), dj);
      accm[i] = _mm256_fmadd_ps(sm, asum, accm[i]);
      const __m512i q0 = _mm512_loadu_si512(blk.qs), q1 = _mm512_loadu_si512(blk.qs + 64);
      const __m512i z = _mm512_setzero_si512();
      const __m512i p0 = _mm512_dpbusd_epi32(z, _mm512_and_si512(q0, m4), x0);
      const __m512i p1 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4), x1);
      const __m512i p2 = _mm512_dpbusd_epi32(z, _mm512_and_si512(q1, m4), x2);
      const __m512i p3 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4), x3);
      acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(i02, s), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(i13, s), acc[i][1]);
      acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p2), _mm512_permutexvar_ps(i46, s), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p3), _mm512_permutexvar_ps(i57, s), acc[i][1]);
    }
  }
  for (int i = 0; i < R; ++i) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(accm[i]), _mm256_extractf128_ps(accm[i], 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    y[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1])) - _mm_cvtss_f32(m);
  }
}

}  // namespace

// One weight row at a time: rows_dot<2> (two rows sharing the activation loads) was slower.
void dot_q4_k_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy) {
  const int64_t nsb = k / kQK_K;
  auto row = [&](int64_t m) { return reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + m * ws); };
  // Weight rows outermost: with several activation rows (a CFG pair) each weight row is
  // streamed from memory once and re-read from L1.
  for (int64_t m = m0; m < m1; ++m) {
    const BlockQ4_K* r[1] = {row(m)};
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* an = static_cast<const uint8_t*>(act) + n * as;
      const Act a{q8_act_qs(an), q8_act_d(an, k), q8_act_sum(an, k)};
      rows_dot<1>(r, a, nsb, y + n * ldy + m);
    }
  }
}

}  // namespace cbx
