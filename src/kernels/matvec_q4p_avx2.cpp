// AVX2 dot for planar pair weights (q4p / q8p, kernels/matvec_q4p.h) against Q8Lane
// activation rows, for CPUs without AVX-512 (no VNNI: vpmaddubsw + vpmaddwd). A 16-block
// group is two halves of 8 blocks: half h of 64-byte chunk s is 32 bytes, 4 of each of
// blocks 8h .. 8h+7, and meets the same 32 bytes of activation chunk s, so every product
// pair lands in its block's 32-bit lane without shuffles. q4p: the 8 nibble vectors of a
// half (4 chunks, low and high) are summed as int16 (each at most 8 * 2 * 15 * 127 = 30480)
// before one vpmaddwd; q8p: w + 128 -> w, then |w| * sign(x, w) per chunk. The integer
// block sums are exact; the float arithmetic is that of the GGUF-layout AVX2 kernel
// (kernels/matmul_avx2_q.h), so both give identical results.
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul_avx2_q.h"
#include "kernels/matvec_q4p.h"

namespace cbx {
namespace {

// Q4_0 in q4p: 16 quant bytes a block, the -8 offset (shift 3 of the activation sums).
struct Q4p {
  static constexpr int kQb = 16;
  static constexpr int kShift = 3;
  // Integer sums of blocks 8h .. 8h+7 of the group whose quants start at g, against the
  // activation chunks at q (Q8Lane group).
  static __m256i half_sums(const uint8_t* g, const int8_t* q, int h) {
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 64 * s + 32 * h));
      const __m256i lo = _mm256_and_si256(x, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo, load(q + 64 * s + 32 * h)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi, load(q + 64 * (4 + s) + 32 * h)));
    }
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  }
  // One remaining block (16 bytes at p, element order) against its 32 activations.
  static int32_t block_sum(const uint8_t* p, const int8_t* x) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    return hsum256_epi32(
        dot32_u4(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4)), load(x)));
  }
  static __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
};

// Q8_0 in q8p: 32 quant bytes a block stored as w + 128; the sums are signed directly.
struct Q8p {
  static constexpr int kQb = 32;
  static constexpr int kShift = -1;  // no offset correction
  static __m256i half_sums(const uint8_t* g, const int8_t* q, int h) {
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    __m256i z0 = _mm256_setzero_si256(), z1 = z0;
#pragma GCC unroll 4
    for (int s = 0; s < 8; s += 2) {
      z0 = _mm256_add_epi32(z0, dot32_s8(_mm256_xor_si256(load(g + 64 * s + 32 * h), flip), load(q + 64 * s + 32 * h)));
      z1 = _mm256_add_epi32(
          z1, dot32_s8(_mm256_xor_si256(load(g + 64 * (s + 1) + 32 * h), flip), load(q + 64 * (s + 1) + 32 * h)));
    }
    return _mm256_add_epi32(z0, z1);
  }
  static int32_t block_sum(const uint8_t* p, const int8_t* x) {
    return hsum256_epi32(dot32_s8(_mm256_xor_si256(load(p), _mm256_set1_epi8(char(0x80))), load(x)));
  }
  static __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
};

// R rows of the pair at `pair` (R = 2: both; R = 1: row i0 only) against N activation rows
// (stride as); each weight half is read once for all N rows, and every (row, activation
// row) pair accumulates in the one-row order. Prefetch (hint kHint) pf bytes ahead of each
// group: a pair's groups follow each other, so the weights are one sequential stream.
template <class F, int kHint, int R, int N>
inline void dot_rows(const uint8_t* pair, int i0, const uint8_t* act, size_t as, int64_t k, int64_t pf, float* y,
                     int64_t ldy) {
  const int64_t nb = k / 32, full = nb / 16 * 16;
  const int8_t* qs[N];
  const float* dx[N];
  const int32_t* sx[N];
#pragma GCC unroll 2
  for (int n = 0; n < N; ++n) {
    qs[n] = q8_act_qs(act + n * as);
    dx[n] = q8_act_d(act + n * as, k);
    sx[n] = q8_act_sum(act + n * as, k);
  }
  // Every loop over acc unrolled (constant trip counts), so the accumulators stay in registers.
  __m256 acc[R][N];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int n = 0; n < N; ++n) acc[r][n] = _mm256_setzero_ps();
  constexpr int64_t kGroup = 2 * 16 * (F::kQb + 2);
  const uint8_t* g = pair;
  for (int64_t b = 0; b < full; b += 16, g += kGroup) {
#pragma GCC unroll 17
    for (int64_t l = 0; l < kGroup; l += 64) __builtin_prefetch(reinterpret_cast<const char*>(g + pf + l), 0, kHint);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const uint8_t* gq = g + planar_group_quants(F::kQb, 0, i0 + r);
      const uint8_t* gs = g + planar_group_scales(F::kQb, 0, i0 + r);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gs + 16 * h)));
#pragma GCC unroll 2
        for (int n = 0; n < N; ++n) {
          __m256i isum = F::half_sums(gq, qs[n] + b * 32, h);
          if constexpr (F::kShift >= 0)
            isum = _mm256_sub_epi32(
                isum,
                _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx[n] + b + 8 * h)), F::kShift));
          acc[r][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_loadu_ps(dx[n] + b + 8 * h)),
                                      acc[r][n]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const uint8_t* quants = pair + planar_rest_quants(F::kQb, nb, i0 + r);
      const uint8_t* scales = pair + planar_rest_scales(F::kQb, nb, i0 + r);
      float s = hsum256(acc[r][n]);
      for (int64_t t = full; t < nb; ++t) {
        int32_t isum = F::block_sum(quants + (t - full) * F::kQb, qs[n] + t * 32);
        if constexpr (F::kShift >= 0) isum -= sx[n][t] << F::kShift;
        uint16_t d;
        std::memcpy(&d, scales + (t - full) * 2, 2);
        s += block_term(d, dx[n][t], isum);
      }
      y[n * ldy + r] = s;
    }
}

template <class F, int kHint, int R>
inline void dot_all_rows(const uint8_t* wb, size_t ws, int64_t m, const uint8_t* act, size_t as, int64_t n_rows,
                         int64_t k, int64_t pf, float* y, int64_t ldy) {
  const uint8_t* pair = wb + (m & ~int64_t(1)) * ws;
  const int i0 = R == 2 ? 0 : int(m & 1);
  int64_t n = 0;
  for (; n + 2 <= n_rows; n += 2) dot_rows<F, kHint, R, 2>(pair, i0, act + n * as, as, k, pf, y + n * ldy + m, ldy);
  if (n < n_rows) dot_rows<F, kHint, R, 1>(pair, i0, act + n * as, as, k, pf, y + n * ldy + m, ldy);
}

template <class F, int kHint>
void dot_planar(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
                float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t pf = 512 * 18;  // as the AVX-512 kernel (matvec_q4p_avx512.cpp)
  planar_walk<kHint>(
      wb, ws, m0, m1, pf, [&](int64_t m) { dot_all_rows<F, kHint, 1>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy); },
      [&](int64_t m) { dot_all_rows<F, kHint, 2>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy); });
}

// f32 row -> Q8Lane: the Q8 row (to_q8_avx2), then its full groups interleaved.
void to_q8_lane_avx2(const float* x, int64_t k, void* dst) {
  to_q8_avx2(x, k, dst);
  q8_to_lane_in_place(dst, k);
}

}  // namespace

const DotKernel& planar_dot_avx2(DType t, PrefetchLevel level) {
  constexpr int kL1 = prefetch_hint(PrefetchLevel::L1), kL2 = prefetch_hint(PrefetchLevel::L2);
  static const DotKernel q4_l1{ActFormat::Q8Lane, to_q8_lane_avx2, dot_planar<Q4p, kL1>};
  static const DotKernel q4_l2{ActFormat::Q8Lane, to_q8_lane_avx2, dot_planar<Q4p, kL2>};
  static const DotKernel q8_l1{ActFormat::Q8Lane, to_q8_lane_avx2, dot_planar<Q8p, kL1>};
  static const DotKernel q8_l2{ActFormat::Q8Lane, to_q8_lane_avx2, dot_planar<Q8p, kL2>};
  const bool l1 = level == PrefetchLevel::L1;
  if (t == DType::Q8_0) return l1 ? q8_l1 : q8_l2;
  return l1 ? q4_l1 : q4_l2;
}

const DotKernel& planar_dot_avx2(DType t) { return planar_dot_avx2(t, stream_prefetch_level()); }

}  // namespace cbx
