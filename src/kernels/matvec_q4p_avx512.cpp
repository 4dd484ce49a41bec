// AVX-512 VNNI dot for planar pair weights (q4p / q8p, kernels/matvec_q4p.h) against
// Q8Lane activation rows. Per 16-block group: 8 64-byte quant vectors (q4p: 4 loads split
// into low and high nibbles; q8p: 8 loads of w + 128), 8 dpbusd per activation row leave
// the 16 block sums in the 16 lanes (no shuffles), 16 scales in one 32-byte load. The
// float arithmetic after the exact integer block sums is that of the GGUF-layout Q4_0 /
// Q8_0 kernel (matmul_q_avx512.cpp), in the same order, so both give identical results.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_avx512_q.h"
#include "kernels/matvec_q4p.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cbx {
namespace {

static_assert(prefetch_hint(PrefetchLevel::L1) == _MM_HINT_T0 && prefetch_hint(PrefetchLevel::L2) == _MM_HINT_T1);

// x, which the compiler may no longer fold into the instructions that use it as a memory
// operand: a vector used twice (a q4p chunk's two nibble halves; an activation chunk against
// the two rows of a pair) is then loaded once instead of once a use. GCC otherwise re-reads it
// for every use, and with weights in cache those loads, not the arithmetic, bound the dot.
// From DRAM the decode is bound by the stream read instead, so this matters where the
// weights (or a slice of them) are cache-resident and where several rows share one read.
inline __m512i in_register(__m512i x) {
  __asm__("" : "+v"(x));
  return x;
}

// Q4_0 in q4p: 16 quant bytes a block, the -8 offset (shift 3 of the activation sums);
// a group's 4 64-byte chunks give v[s] = low nibbles of chunk s (elements 4s .. 4s+3 of
// every block, one block a lane) and v[4 + s] = its high nibbles (16+4s .. 16+4s+3) left
// in place, i.e. 16x their value (kHighShift: their sums are shifted down once, exactly,
// instead of every chunk being shifted: one op a chunk less, +2-7% in L2).
struct Q4p {
  static constexpr int kQb = 16;
  static constexpr int kShift = 3;
  static constexpr int kHighShift = 4;
  static void unpack16(const uint8_t* g, __m512i* v) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const __m512i hi4 = _mm512_set1_epi8(static_cast<char>(0xf0));
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512i x = in_register(_mm512_loadu_si512(g + 64 * s));
      v[s] = _mm512_and_si512(x, lo4);
      v[4 + s] = _mm512_and_si512(x, hi4);
    }
  }
  // One block (16 bytes at p, in order) as 32 unsigned bytes in element order.
  static __m256i block(const uint8_t* p) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4));
  }
};
// Q8_0 in q8p: 32 quant bytes a block stored as w + 128, the -128 offset (shift 7); v[s] =
// chunk s (elements 4s .. 4s+3 of every block).
struct Q8p {
  static constexpr int kQb = 32;
  static constexpr int kShift = 7;
  static constexpr int kHighShift = 0;
  static void unpack16(const uint8_t* g, __m512i* v) {
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) v[s] = _mm512_loadu_si512(g + 64 * s);
  }
  static __m256i block(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
};

// The 8 Q8Lane activation chunks of one 16-block group (chunk t: elements 4t .. 4t+3 of
// every block). kHold: in registers (shared by the rows of a pair); otherwise left to the
// compiler, which folds each into its dpbusd as a memory operand (dot_rows holds them for
// one pair against one activation row only: with two rows' chunks next to a pair's unpacked
// weights the 32 vector registers spill, measured slower for N = 2).
template <bool kHold>
inline void load_act16(const int8_t* q, __m512i* a) {
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    a[t] = _mm512_loadu_si512(q + 64 * t);
    if (kHold) a[t] = in_register(a[t]);
  }
}

// The 16 integer block sums (lane b = block b) of an unpacked group v (v[t] against
// activation chunk a[t]; v[4 ..] scaled by 2^kHighShift) plus init. Four chains of two
// dpbusd, two over v[0 .. 3] and two over v[4 .. 7] (exact integers: any order gives the
// same sums; the high ones, < 2^21 a lane, shift down exactly); the offset correction enters
// as the first chain's start, not as a subtraction at the end. Four short chains instead of
// two long ones keep more dpbusd in flight: each chain waits on its previous result.
template <int kHighShift>
inline __m512i block_sums16(const __m512i* v, const __m512i* a, __m512i init) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i z0 = _mm512_dpbusd_epi32(init, v[0], a[0]);
  __m512i z1 = _mm512_dpbusd_epi32(zero, v[1], a[1]);
  __m512i z2 = _mm512_dpbusd_epi32(zero, v[4], a[4]);
  __m512i z3 = _mm512_dpbusd_epi32(zero, v[5], a[5]);
  z0 = _mm512_dpbusd_epi32(z0, v[2], a[2]);
  z1 = _mm512_dpbusd_epi32(z1, v[3], a[3]);
  z2 = _mm512_dpbusd_epi32(z2, v[6], a[6]);
  z3 = _mm512_dpbusd_epi32(z3, v[7], a[7]);
  __m512i high = _mm512_add_epi32(z2, z3);
  if (kHighShift) high = _mm512_srai_epi32(high, kHighShift);
  return _mm512_add_epi32(_mm512_add_epi32(z0, z1), high);
}

inline int32_t hsum256_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Blocks [b, nb) (past the full groups, in block order: quants F::kQb bytes a block at q,
// scales at dw) of one row against one activation row, one block at a time.
template <class F>
inline float dot_tail(const uint8_t* quants, const uint16_t* dw, const int8_t* qs, const float* dx, const int32_t* sx,
                      int64_t b, int64_t nb) {
  float tail = 0.f;
  for (int64_t t = b; t < nb; ++t) {
    const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), F::block(quants + (t - b) * F::kQb),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + t * 32)));
    const int32_t s = hsum256_epi32(d) - (sx[t] << F::kShift);
    uint16_t h;
    std::memcpy(&h, dw + (t - b), 2);
    tail += _cvtsh_ss(h) * dx[t] * float(s);
  }
  return tail;
}

// R rows of the pair at `pair` (R = 2: both; R = 1: row i0 only) against N activation
// rows (stride as): each 16-block group of a weight row is loaded and unpacked once for
// all N rows, and every (row, activation row) pair accumulates in the N = 1 order, so
// results do not depend on N or R. Results go to y[n * ldy + r] (straight from the
// reductions: through a local array the compiler copied two floats with one 8-byte load
// of two 4-byte stores, a failed store forward on every pair, ~25% of the time from L3).
// Prefetch (hint kHint, stream_prefetch_level()) pf
// bytes ahead of each group: the pair's groups follow each other, so the weights are one
// sequential stream.
template <class F, int kHint, int R, int N>
inline void dot_rows(const uint8_t* pair, int i0, const uint8_t* act, size_t as, int64_t k, int64_t pf, float* y,
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
  constexpr int64_t kGroup = 2 * 16 * (F::kQb + 2);
  for (const uint8_t* g = pair; b + 16 <= nb; b += 16, g += kGroup) {
#pragma GCC unroll 17
    for (int64_t l = 0; l < kGroup; l += 64) __builtin_prefetch(reinterpret_cast<const char*>(g + pf + l), 0, kHint);
    // Per activation row, shared by the R weight rows: the offset correction and the scales.
    __m512i neg_corr[N];
    __m512 dxb[N];
    constexpr bool kHold = R * N <= 2;  // one pair against one activation row: the decode
    __m512i a[N][8];
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) {
      neg_corr[n] =
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(sx[n] + b), F::kShift));
      dxb[n] = _mm512_loadu_ps(dx[n] + b);
      load_act16<kHold>(qs[n] + b * 32, a[n]);
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      __m512i v[8];
      F::unpack16(g + planar_group_quants(F::kQb, 0, i0 + r), v);
      const __m512 dw = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + planar_group_scales(F::kQb, 0, i0 + r))));
#pragma GCC unroll 4
      for (int n = 0; n < N; ++n) {
        const __m512i s = block_sums16<F::kHighShift>(v, a[n], neg_corr[n]);
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dxb[n]), acc[r][n]);
      }
    }
  }
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const uint16_t* dw = reinterpret_cast<const uint16_t*>(pair + planar_rest_scales(F::kQb, nb, i0 + r));
      y[n * ldy + r] = _mm512_reduce_add_ps(acc[r][n]) +
                       dot_tail<F>(pair + planar_rest_quants(F::kQb, nb, i0 + r), dw, qs[n], dx[n], sx[n], b, nb);
    }
}

// Rows [m, m + R) (R = 2: a whole pair; R = 1: one row) against activation rows [n0, n0 + N).
template <class F, int kHint, int R, int N>
inline void dot_block(const uint8_t* wb, size_t ws, int64_t m, const uint8_t* act, size_t as, int64_t n0, int64_t k,
                      int64_t pf, float* y, int64_t ldy) {
  dot_rows<F, kHint, R, N>(wb + (m & ~int64_t(1)) * ws, R == 2 ? 0 : int(m & 1), act + n0 * as, as, k, pf,
                           y + n0 * ldy + m, ldy);
}

template <class F, int kHint, int R>
inline void dot_all_rows(const uint8_t* wb, size_t ws, int64_t m, const uint8_t* act, size_t as, int64_t n_rows,
                         int64_t k, int64_t pf, float* y, int64_t ldy) {
  int64_t n = 0;
  for (; n + 4 <= n_rows; n += 4) dot_block<F, kHint, R, 4>(wb, ws, m, act, as, n, k, pf, y, ldy);
  switch (n_rows - n) {
    case 3:
      dot_block<F, kHint, R, 3>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    case 2:
      dot_block<F, kHint, R, 2>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    case 1:
      dot_block<F, kHint, R, 1>(wb, ws, m, act, as, n, k, pf, y, ldy);
      break;
    default:
      break;
  }
}

template <class F, int kHint>
void dot_planar(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
                float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  // 9 KB ahead in the stream (512 q4p blocks): far enough that a line asked for arrives
  // before the kernel reaches it at DRAM latency, near enough to stay in L2 with the other
  // threads' streams (the distance was chosen with bench t3; docs/benchmarks.md). q8p keeps
  // the distance in bytes.
  const int64_t pf = 512 * 18;
  planar_walk<kHint>(
      wb, ws, m0, m1, pf, [&](int64_t m) { dot_all_rows<F, kHint, 1>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy); },
      [&](int64_t m) { dot_all_rows<F, kHint, 2>(wb, ws, m, ab, as, n_rows, k, pf, y, ldy); });
}

// f32 row -> Q8Lane: the Q8 row (to_q8_avx512), then its full groups interleaved.
void to_q8_lane_avx512(const float* x, int64_t k, void* dst) {
  to_q8_avx512(x, k, dst);
  q8_to_lane_in_place(dst, k);
}

}  // namespace

const DotKernel& planar_dot_avx512(DType t, PrefetchLevel level) {
  constexpr int kL1 = prefetch_hint(PrefetchLevel::L1), kL2 = prefetch_hint(PrefetchLevel::L2);
  static const DotKernel q4_l1{ActFormat::Q8Lane, to_q8_lane_avx512, dot_planar<Q4p, kL1>};
  static const DotKernel q4_l2{ActFormat::Q8Lane, to_q8_lane_avx512, dot_planar<Q4p, kL2>};
  static const DotKernel q8_l1{ActFormat::Q8Lane, to_q8_lane_avx512, dot_planar<Q8p, kL1>};
  static const DotKernel q8_l2{ActFormat::Q8Lane, to_q8_lane_avx512, dot_planar<Q8p, kL2>};
  const bool l1 = level == PrefetchLevel::L1;
  if (t == DType::Q8_0) return l1 ? q8_l1 : q8_l2;
  return l1 ? q4_l1 : q4_l2;
}

const DotKernel& planar_dot_avx512(DType t) { return planar_dot_avx512(t, stream_prefetch_level()); }

}  // namespace cbx
