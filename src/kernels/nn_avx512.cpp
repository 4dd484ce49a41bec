// AVX-512 nn kernels: 16-lane wrapper for the shared templates in nn_simd_*.h.
// GCC 12 avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/nn.h"
#include "kernels/nn_simd_attn_multi.h"

namespace cbx {
namespace {

struct V16 {
  using R = __m512;
  static constexpr int W = 16;
  static constexpr int kAttnNV = 4;  // attention register tile: 4 queries x 4 vectors
  static __mmask16 mk(int64_t n) { return __mmask16((1u << n) - 1u); }  // n in [0, 16]
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mk(n), p); }
  static void store_n(float* p, R v, int64_t n) { _mm512_mask_storeu_ps(p, mk(n), v); }
  static R keep_n(R v, int64_t n) { return _mm512_maskz_mov_ps(mk(n), v); }
  static R load_h(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static R load_h_n(const uint16_t* p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk(n), p)); }
  // f32 -> f16, round to nearest even (vcvtps2ph ignores MXCSR.FTZ; DAZ is never set here).
  static void store_h(uint16_t* p, R v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void store_h_n(uint16_t* p, R v, int64_t n) {
    _mm256_mask_storeu_epi16(p, mk(n), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R abs(R a) { return _mm512_abs_ps(a); }
  static R and_(R a, R b) { return _mm512_and_ps(a, b); }
  static R or_(R a, R b) { return _mm512_or_ps(a, b); }
  static R xor_(R a, R b) { return _mm512_xor_ps(a, b); }
  // a < b ? x : y   /   a > b ? x : y
  static R sel_lt(R a, R b, R x, R y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
  static R sel_gt(R a, R b, R x, R y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x); }
  static R round(R x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static R pow2i(R n) {
    __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(i, 23));
  }
  // Sign bit set where the integral n is odd.
  static R odd_sign(R n) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtps_epi32(n), 31)); }
  // x = m * 2^e with m in [1, 2) (x normal, > 0).
  static R frexp1(R x, R& e) {
    __m512i i = _mm512_castps_si512(x);
    e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(i, 23), _mm512_set1_epi32(127)));
    __m512i m = _mm512_or_si512(_mm512_and_si512(i, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f800000));
    return _mm512_castsi512_ps(m);
  }
  static float reduce_add(R v) { return _mm512_reduce_add_ps(v); }
  // Lane j of the result = sum of the 16 lanes of v[j] (a transpose-add: 45 shuffles and
  // adds for 16 sums instead of 16 horizontal reductions).
  static R sum_lanes_t(const R* v) {
    R b[8], c[4], e[2];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: {v2i 0+2, v2i+1 0+2, v2i 1+3, v2i+1 1+3}
      b[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {  // per 128-bit lane: partial sums of v4i .. v4i+3
      const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
      c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; ++i)  // lanes {c2i.0+1, c2i.2+3, c2i+1.0+1, c2i+1.2+3}
      e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e[0], e[1], 0x88), _mm512_shuffle_f32x4(e[0], e[1], 0xdd));
  }
  static float reduce_max(R v) { return _mm512_reduce_max_ps(v); }
};

constexpr NnKernels kAvx512 = nn_simd::make_table<V16>(Isa::Avx512);

}  // namespace

const NnKernels& nn_kernels_avx512() { return kAvx512; }

}  // namespace cbx
