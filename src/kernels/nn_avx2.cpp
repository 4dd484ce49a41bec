// AVX2 + FMA + F16C nn kernels: 8-lane wrapper for the shared templates in nn_simd_*.h.
#include <immintrin.h>

#include <cstring>

#include "kernels/nn.h"
#include "kernels/nn_simd_attn_multi.h"

namespace cbx {
namespace {

struct V8 {
  using R = __m256;
  static constexpr int W = 8;
  static constexpr int kAttnNV = 2;  // attention register tile: 4 queries x 2 vectors
  static __m256i mk(int64_t n) {     // lanes < n all-ones
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, mk(n)); }
  static void store_n(float* p, R v, int64_t n) { _mm256_maskstore_ps(p, mk(n), v); }
  static R keep_n(R v, int64_t n) { return _mm256_and_ps(v, _mm256_castsi256_ps(mk(n))); }
  static R load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static R load_h_n(const uint16_t* p, int64_t n) {
    uint16_t tmp[8] = {};
    std::memcpy(tmp, p, size_t(n) * 2);
    return load_h(tmp);
  }
  // f32 -> f16, round to nearest even (vcvtps2ph ignores MXCSR.FTZ; DAZ is never set here).
  static void store_h(uint16_t* p, R v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void store_h_n(uint16_t* p, R v, int64_t n) {
    uint16_t tmp[8];
    store_h(tmp, v);
    std::memcpy(p, tmp, size_t(n) * 2);
  }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R abs(R a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  static R and_(R a, R b) { return _mm256_and_ps(a, b); }
  static R or_(R a, R b) { return _mm256_or_ps(a, b); }
  static R xor_(R a, R b) { return _mm256_xor_ps(a, b); }
  static R sel_lt(R a, R b, R x, R y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static R sel_gt(R a, R b, R x, R y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
  static R round(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R pow2i(R n) {
    __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(i, 23));
  }
  static R odd_sign(R n) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtps_epi32(n), 31)); }
  static R frexp1(R x, R& e) {
    __m256i i = _mm256_castps_si256(x);
    e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(i, 23), _mm256_set1_epi32(127)));
    __m256i m = _mm256_or_si256(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000));
    return _mm256_castsi256_ps(m);
  }
  static float reduce_add(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Lane j of the result = sum of the 8 lanes of v[j] (a transpose-add).
  static R sum_lanes_t(const R* v) {
    R b[4], c[2];
    for (int i = 0; i < 4; ++i)  // per 128-bit lane: {v2i 0+2, v2i+1 0+2, v2i 1+3, v2i+1 1+3}
      b[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 2; ++i)  // per 128-bit lane: partial sums of v4i .. v4i+3
      c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                           _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], 0xee));
    return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20), _mm256_permute2f128_ps(c[0], c[1], 0x31));
  }
  static float reduce_max(R v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

constexpr NnKernels kAvx2 = nn_simd::make_table<V8>(Isa::Avx2);

}  // namespace

const NnKernels& nn_kernels_avx2() { return kAvx2; }

}  // namespace cbx
