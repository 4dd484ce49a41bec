// AVX-512 VNNI quantized dots: Q8_0 / Q4_0 weights against Q8 activation rows.
//
// vpdpbusd multiplies unsigned by signed bytes. Q4_0 nibbles q are already unsigned and
// sum (q - 8) * x = sum q * x - 8 * sum x; Q8_0 weights are made unsigned by flipping the
// sign bit (w + 128) and sum w * x = sum (w + 128) * x - 128 * sum x. The activation
// block sums are precomputed, so both corrections are one shift and subtract per block.
//
// 16 blocks (512 weights) are handled at once: 8 vpdpbusd give 2 blocks per zmm, a
// transpose-and-add tree turns them into one vector of 16 block sums, the 16 weight
// scales are gathered (f16, stride = block size) and one FMA applies d_w * d_x. With
// several activation rows (up to 4 at a time) each group is loaded, unpacked and its
// scales gathered once for all of them (results unchanged): the unpacking is then paid once
// per weight group instead of once per row, which is what a CFG pair's decode (2 rows)
// spends beyond the memory read.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx512_q.h"

// GCC 12 reports the undefined start value inside _mm512_reduce_*_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cbx {
namespace {

struct Q8W {
  static constexpr int kBytes = 34;
  static constexpr int kShift = 7;
  // Blocks at p and p + 34 -> 64 unsigned bytes (w + 128).
  static __m512i build2(const uint8_t* p) {
    __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
    v = _mm512_inserti64x4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2)), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80)));
  }
  static __m256i build1(const uint8_t* p) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)), _mm256_set1_epi8(char(0x80)));
  }
};

struct Q4W {
  static constexpr int kBytes = 18;
  static constexpr int kShift = 3;
  static __m256i build1(const uint8_t* p) {
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4));
  }
};

inline int32_t hsum256_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The 16 block sums (int32, block order) of one 16-block group from z[8]: z[j] holds the
// dpbusd of blocks 2j and 2j + 1 (4 dwords each) of the group.
inline __m512i tree8(const __m512i* z) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[4], z[5]), _mm512_unpackhi_epi32(z[4], z[5]));
  const __m512i t3 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[6], z[7]), _mm512_unpackhi_epi32(z[6], z[7]));
  const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t2, t3), _mm512_unpackhi_epi64(t2, t3));
  const __m512i s = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  // The tree leaves block sums in the order 0 2 4 6 1 3 5 7 8 10 12 14 9 11 13 15.
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), s);
}

// The same from z[4] where lane L of z[g] holds block 4g + L (Q4_0 against Q8Nib: one zmm
// holds the low or high nibbles of 4 blocks, so a 2-step tree suffices).
inline __m512i tree4(const __m512i* z) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  // u dword 4L + g is block 4g + L.
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), u);
}

// One 16-block group of one weight row, unpacked once to unsigned bytes: v[j] multiplies
// the activation bytes q + 64 j (Q8_0: blocks 2j, 2j + 1; Q4_0 against Q8Nib: v[2g] the
// low and v[2g + 1] the high nibbles of blocks 4g .. 4g + 3).
template <typename W>
inline void unpack16(const uint8_t* p, __m512i* v) {
  if constexpr (std::is_same_v<W, Q4W>) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const uint8_t* b = p + 4 * g * Q4W::kBytes + 2;
      __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + Q4W::kBytes)), 1);
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * Q4W::kBytes)), 2);
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 3 * Q4W::kBytes)), 3);
      v[2 * g] = _mm512_and_si512(x, lo4);
      v[2 * g + 1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), lo4);
    }
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) v[j] = W::build2(p + 2 * j * W::kBytes);
  }
}

// The 16 block sums of an unpacked group v against the activation bytes q of the group.
template <typename W>
inline __m512i block_sums16(const __m512i* v, const int8_t* q) {
  const __m512i zero = _mm512_setzero_si512();
  if constexpr (std::is_same_v<W, Q4W>) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g)
      z[g] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, v[2 * g], _mm512_loadu_si512(q + 128 * g)), v[2 * g + 1],
                                 _mm512_loadu_si512(q + 128 * g + 64));
    return tree4(z);
  } else {
    __m512i z[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) z[j] = _mm512_dpbusd_epi32(zero, v[j], _mm512_loadu_si512(q + 64 * j));
    return tree8(z);
  }
}

// d_w of the 16 blocks at p (f16 at stride kBytes), gathered and widened.
template <typename W>
inline __m512 block_scales16(const uint8_t* p) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(W::kBytes));
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(idx, p, 1)));
}

template <typename W>
inline float dot_tail(const uint8_t* wr, const int8_t* qs, const float* dx, const int32_t* sx, int64_t b0, int64_t nb) {
  float tail = 0.f;
  for (int64_t b = b0; b < nb; ++b) {
    const uint8_t* p = wr + b * W::kBytes;
    __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W::build1(p),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + b * 32)));
    int32_t s = hsum256_epi32(d) - (sx[b] << W::kShift);
    uint16_t h = uint16_t(p[0] | (p[1] << 8));
    tail += _cvtsh_ss(h) * dx[b] * float(s);
  }
  return tail;
}

// R weight rows (stride ws) against N activation rows (stride as): each 16-block group of
// a weight row is loaded, unpacked and its scales gathered once for all N rows (a CFG
// decode step has N = 2). Every (weight row, activation row) pair accumulates in the same
// order as with N = 1, so the result does not depend on N. A software prefetch (locality
// kHint = prefetch_hint(level)) runs pf bytes ahead in each weight row (the rows are
// streams the hardware prefetcher follows too late); two rows at a time, not one (less
// loop overhead per weight) or four (more streams at once). Results go to y[n * ldy + r]
// straight from the reductions
// (through a local array the compiler copied two floats with one 8-byte load of two 4-byte
// stores: a failed store forward on every row pair).
template <typename W, int kHint, int R, int N>
inline void dot_rows(const uint8_t* wr, size_t ws, const uint8_t* act, size_t as, int64_t k, int64_t pf, float* y,
                     int64_t ldy) {
  const int64_t nb = k / 32;
  const int8_t* qs[N];
  const float* dx[N];
  const int32_t* sx[N];
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
    qs[n] = q8_act_qs(act + n * as);
    dx[n] = q8_act_d(act + n * as, k);
    sx[n] = q8_act_sum(act + n * as, k);
  }
  __m512 acc[R][N];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = wr + r * ws + b * W::kBytes;
#pragma GCC unroll 8
      for (int l = 0; l < 16 * W::kBytes; l += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(p + pf + l), 0, kHint);
      __m512i v[8];
      unpack16<W>(p, v);
      const __m512 dw = block_scales16<W>(p);
#pragma GCC unroll 4
      for (int n = 0; n < N; ++n) {
        const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(sx[n] + b), W::kShift);
        const __m512i s = _mm512_sub_epi32(block_sums16<W>(v, qs[n] + b * 32), corr);
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_loadu_ps(dx[n] + b)), acc[r][n]);
      }
    }
  }
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      y[n * ldy + r] = _mm512_reduce_add_ps(acc[r][n]) + dot_tail<W>(wr + r * ws, qs[n], dx[n], sx[n], b, nb);
}

// Weight rows [m, m + R) against activation rows [n0, n0 + N).
template <typename W, int kHint, int R, int N>
inline void dot_block(const uint8_t* wb, size_t ws, int64_t m, const uint8_t* act, size_t as, int64_t n0, int64_t k,
                      int64_t pf, float* y, int64_t ldy) {
  dot_rows<W, kHint, R, N>(wb + m * ws, ws, act + n0 * as, as, k, pf, y + n0 * ldy + m, ldy);
}

// Activation rows in groups of up to 4 (the dot path serves N < matmul_gemm_min_rows()).
template <typename W, int kHint, int R>
inline void dot_all_rows(const uint8_t* wb, size_t ws, int64_t m, const uint8_t* act, size_t as, int64_t n_rows,
                         int64_t k, int64_t pf, float* y, int64_t ldy) {
  int64_t n = 0;
  for (; n + 4 <= n_rows; n += 4) dot_block<W, kHint, R, 4>(wb, ws, m, act, as, n, k, pf, y, ldy);
  switch (n_rows - n) {
    case 3:
      dot_block<W, kHint, R, 3>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    case 2:
      dot_block<W, kHint, R, 2>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    case 1:
      dot_block<W, kHint, R, 1>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    default:
      break;
  }
}

template <typename W, int kHint>
void dot_q(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
           float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  // At least 128 blocks ahead and a whole number of row pairs, so that with short rows
  // one row of a pair never prefetches the other one's data.
  const int64_t step = 2 * int64_t(ws), want = 128 * W::kBytes;
  const int64_t pf = step > 0 ? (want + step - 1) / step * step : want;
  int64_t m = m0;
  for (; m + 2 <= m1; m += 2) dot_all_rows<W, kHint, 2>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy);
  for (; m < m1; ++m) dot_all_rows<W, kHint, 1>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy);
}

}  // namespace

void to_q8_avx512(const float* x, int64_t k, void* dst) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + k);
  auto* sum = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst) + k + k / 8);
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    // Same arithmetic as the generic quantizer: inv = 127 / amax, nearest-even rounding.
    const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * 32), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    d[b] = amax / 127.f;
  }
}

void to_q8_nib_avx512(const float* x, int64_t k, void* dst) {
  to_q8_avx512(x, k, dst);
  auto* qs = static_cast<int8_t*>(dst);
  alignas(64) int8_t tmp[128];
  for (int64_t g = 0; g + 4 <= (k / 32 / 16) * 16; g += 4) {
    int8_t* q = qs + g * 32;
    for (int j = 0; j < 4; ++j) {
      std::memcpy(tmp + 16 * j, q + 32 * j, 16);
      std::memcpy(tmp + 64 + 16 * j, q + 32 * j + 16, 16);
    }
    std::memcpy(q, tmp, 128);
  }
}

void dot_q8_0_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy) {
  if (stream_prefetch_level() == PrefetchLevel::L1)
    dot_q<Q8W, prefetch_hint(PrefetchLevel::L1)>(w, ws, m0, m1, act, as, n_rows, k, y, ldy);
  else
    dot_q<Q8W, prefetch_hint(PrefetchLevel::L2)>(w, ws, m0, m1, act, as, n_rows, k, y, ldy);
}

void dot_q4_0_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy) {
  if (stream_prefetch_level() == PrefetchLevel::L1)
    dot_q<Q4W, prefetch_hint(PrefetchLevel::L1)>(w, ws, m0, m1, act, as, n_rows, k, y, ldy);
  else
    dot_q<Q4W, prefetch_hint(PrefetchLevel::L2)>(w, ws, m0, m1, act, as, n_rows, k, y, ldy);
}

void dequant_row_avx512(DType t, const uint8_t* row, int64_t k0, int64_t len, float* out) {
  if (t != DType::Q8_0 && t != DType::Q4_0) {  // Q4_K (and any other block type): whole blocks, scalar
    const TypeTraits& tr = type_traits(t);
    CBX_ASSERT(k0 % tr.block_size == 0 && len % tr.block_size == 0);
    tr.to_float(row + size_t(k0 / tr.block_size) * tr.block_bytes, out, len);
  } else if (t == DType::Q8_0) {
    auto* b = reinterpret_cast<const BlockQ8_0*>(row) + k0 / 32;
    for (int64_t i = 0; i < len / 32; ++i) {
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
      const __m128i* q = reinterpret_cast<const __m128i*>(b[i].qs);
      _mm512_storeu_ps(out + i * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)))));
      _mm512_storeu_ps(out + i * 32 + 16,
                       _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)))));
    }
  } else {
    auto* b = reinterpret_cast<const BlockQ4_0*>(row) + k0 / 32;
    const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < len / 32; ++i) {
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, lo4), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), eight);
      _mm512_storeu_ps(out + i * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
      _mm512_storeu_ps(out + i * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
    }
  }
}

}  // namespace cbx
