// Helpers shared by the AVX2 quantized dot kernels (matmul_avx2.cpp: GGUF-layout Q4_0 /
// Q8_0; matvec_q4p_avx2.cpp: planar q4p / q8p). Only AVX2 translation units may include this:
// its inline functions have one definition program-wide, and a copy compiled with AVX-512
// enabled could be the one the linker keeps for the AVX2 callers too.
// Both kernels compute a weight row against a Q8 activation row in one order, so they give
// identical results:
//   - every block's integer sum exactly (Q4_0: sum of nibble * x minus 8 * sum(x));
//   - over the full groups of 16 blocks (planar_group_*), 8 blocks at a time in block order:
//     acc[j] = fma(float(isum[b + j]), d_w[b + j] * d_x[b + j], acc[j]), 8 float lanes;
//   - the result is hsum256(acc) plus the remaining blocks' terms added one by one in block
//     order, each d_w * d_x * float(isum) (block_term).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace cbx {

// f32 row -> Q8 activation row (kernels/matmul.h), matmul_avx2.cpp.
void to_q8_avx2(const float* x, int64_t k, void* dst);

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum256_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Lane j = the sum of v[j]'s 8 lanes (exact integers).
inline __m256i sums8_epi32(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// 32 unsigned nibble weights (element order) against 32 int8 activations: 8 int32 partial
// sums (pairs at most 2 * 15 * 127).
inline __m256i dot32_u4(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}
// 32 signed int8 weights against 32 int8 activations: |w| * sign(x, w), pairs at most
// 2 * 128 * 127, no int16 saturation.
inline __m256i dot32_s8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

// One remaining block's contribution (f16 scale bits d).
inline float block_term(uint16_t d, float dx, int32_t isum) { return _cvtsh_ss(d) * dx * float(isum); }

}  // namespace cbx
