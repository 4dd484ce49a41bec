// AVX-512 (F/BW/VL/DQ + VNNI + BF16) matmul kernels.
//   dot path: F32 / F16 (F16C) weights with f32 activations; BF16 weights with bf16
//   activations (vdpbf16ps); Q8_0 / Q4_0 weights with Q8 activations (vpdpbusd).
//   GEMM path: 14 x 32 register tile (28 zmm accumulators); f32 FMA for every weight type
//   except BF16, which keeps bf16 panels and uses vdpbf16ps, or AMX tiles (see
//   matmul_amx_avx512.cpp) when the CPU and OS allow them.
#include <immintrin.h>

#include <cstring>
#include <initializer_list>

#include "core/cpu.h"
#include "kernels/matmul.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_avx512_q.h"
#include "kernels/matvec_q4k.h"

// GCC 12 reports the undefined start value inside _mm512_reduce_*_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cbx {
namespace {

// ---- activation conversion ----

void to_bf16_avx512(const float* x, int64_t k, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(p + i, (__m512i)v);
  }
  for (; i < k; i += 16) {
    __mmask16 mk = k - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - i)) - 1);
    __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
    _mm256_mask_storeu_epi16(p + i, mk, (__m256i)v);
  }
}

// ---- dot path, float weights ----

inline __mmask16 tail_mask16(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }
inline __mmask32 tail_mask32(int64_t left) { return left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1); }

// Software prefetch (DRAM streams on decode; locality kHint = prefetch_hint(level)). The
// distance is at least 2 KB and a whole number of row groups, so that with short rows a row
// never prefetches the row the next lane of its own group is reading (which wastes the
// prefetch on short f16 rows).
int64_t prefetch_distance(size_t ws, int rows, int64_t min_bytes) {
  const int64_t step = int64_t(ws) * rows;
  return step <= 0 ? min_bytes : (min_bytes + step - 1) / step * step;
}

struct LoadF32 {
  static __m512 load(const uint8_t* r, int64_t i, __mmask16 mk) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(r) + i);
  }
  template <int kHint>
  CBX_ALWAYS_INLINE static void prefetch(const uint8_t* r, int64_t i, int64_t dist) {
    __builtin_prefetch(reinterpret_cast<const char*>(r + i * 4 + dist), 0, kHint);
  }
};
struct LoadF16 {
  static __m512 load(const uint8_t* r, int64_t i, __mmask16 mk) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(r) + i));
  }
  template <int kHint>
  CBX_ALWAYS_INLINE static void prefetch(const uint8_t* r, int64_t i, int64_t dist) {
    if ((i & 31) == 0) __builtin_prefetch(reinterpret_cast<const char*>(r + i * 2 + dist), 0, kHint);
  }
};

// Four weight rows at a time share each activation load.
template <typename L, int kHint>
void dot_float(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
               float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t pf = prefetch_distance(ws, 4, 2048);
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) {
    const uint8_t* r0 = wb + m * ws;
    const uint8_t *r1 = r0 + ws, *r2 = r1 + ws, *r3 = r2 + ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n * as);
      __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
      int64_t i = 0;
      for (; i + 16 <= k; i += 16) {
        __m512 av = _mm512_loadu_ps(a + i);
        L::template prefetch<kHint>(r0, i, pf);
        L::template prefetch<kHint>(r1, i, pf);
        L::template prefetch<kHint>(r2, i, pf);
        L::template prefetch<kHint>(r3, i, pf);
        c0 = _mm512_fmadd_ps(L::load(r0, i, 0xffff), av, c0);
        c1 = _mm512_fmadd_ps(L::load(r1, i, 0xffff), av, c1);
        c2 = _mm512_fmadd_ps(L::load(r2, i, 0xffff), av, c2);
        c3 = _mm512_fmadd_ps(L::load(r3, i, 0xffff), av, c3);
      }
      if (i < k) {
        __mmask16 mk = tail_mask16(k - i);
        __m512 av = _mm512_maskz_loadu_ps(mk, a + i);
        c0 = _mm512_fmadd_ps(L::load(r0, i, mk), av, c0);
        c1 = _mm512_fmadd_ps(L::load(r1, i, mk), av, c1);
        c2 = _mm512_fmadd_ps(L::load(r2, i, mk), av, c2);
        c3 = _mm512_fmadd_ps(L::load(r3, i, mk), av, c3);
      }
      float* yr = y + n * ldy + m;
      yr[0] = _mm512_reduce_add_ps(c0);
      yr[1] = _mm512_reduce_add_ps(c1);
      yr[2] = _mm512_reduce_add_ps(c2);
      yr[3] = _mm512_reduce_add_ps(c3);
    }
  }
  for (; m < m1; ++m) {
    const uint8_t* r0 = wb + m * ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n * as);
      __m512 c0 = _mm512_setzero_ps();
      for (int64_t i = 0; i < k; i += 16) {
        __mmask16 mk = tail_mask16(k - i);
        c0 = _mm512_fmadd_ps(L::load(r0, i, mk), _mm512_maskz_loadu_ps(mk, a + i), c0);
      }
      y[n * ldy + m] = _mm512_reduce_add_ps(c0);
    }
  }
}

// BF16 weights . BF16 activations: vdpbf16ps, 32 products per instruction.
template <int kHint>
void dot_bf16(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
              float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto ld = [](const uint8_t* r, int64_t i, __mmask32 mk) {
    return (__m512bh)_mm512_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(r) + i);
  };
  const int64_t pf = prefetch_distance(ws, 4, 2048);
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) {
    const uint8_t* r0 = wb + m * ws;
    const uint8_t *r1 = r0 + ws, *r2 = r1 + ws, *r3 = r2 + ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const uint8_t* a = static_cast<const uint8_t*>(act) + n * as;
      __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
      for (int64_t i = 0; i < k; i += 32) {
        __mmask32 mk = tail_mask32(k - i);
        __m512bh av = ld(a, i, mk);
        for (const uint8_t* r : {r0, r1, r2, r3})
          __builtin_prefetch(reinterpret_cast<const char*>(r + i * 2 + pf), 0, kHint);
        c0 = _mm512_dpbf16_ps(c0, ld(r0, i, mk), av);
        c1 = _mm512_dpbf16_ps(c1, ld(r1, i, mk), av);
        c2 = _mm512_dpbf16_ps(c2, ld(r2, i, mk), av);
        c3 = _mm512_dpbf16_ps(c3, ld(r3, i, mk), av);
      }
      float* yr = y + n * ldy + m;
      yr[0] = _mm512_reduce_add_ps(c0);
      yr[1] = _mm512_reduce_add_ps(c1);
      yr[2] = _mm512_reduce_add_ps(c2);
      yr[3] = _mm512_reduce_add_ps(c3);
    }
  }
  for (; m < m1; ++m) {
    const uint8_t* r0 = wb + m * ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const uint8_t* a = static_cast<const uint8_t*>(act) + n * as;
      __m512 c0 = _mm512_setzero_ps();
      for (int64_t i = 0; i < k; i += 32) {
        __mmask32 mk = tail_mask32(k - i);
        c0 = _mm512_dpbf16_ps(c0, ld(r0, i, mk), ld(a, i, mk));
      }
      y[n * ldy + m] = _mm512_reduce_add_ps(c0);
    }
  }
}

// ---- GEMM path: 14 activation rows x 32 weight rows (28 accumulators + 2 weight vectors + broadcast) ----

constexpr int kNr = 14;
constexpr int kMr = 32;

// 16 x 16 transpose of 32-bit elements: r[j] lane c -> r[c] lane j.
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int q = 0; q < 4; ++q) {
    t[4 * q + 0] = _mm512_unpacklo_ps(r[4 * q], r[4 * q + 1]);
    t[4 * q + 1] = _mm512_unpackhi_ps(r[4 * q], r[4 * q + 1]);
    t[4 * q + 2] = _mm512_unpacklo_ps(r[4 * q + 2], r[4 * q + 3]);
    t[4 * q + 3] = _mm512_unpackhi_ps(r[4 * q + 2], r[4 * q + 3]);
  }
  // After this, lane L of r[4q + j] holds column 4L + j of rows 4q .. 4q + 3.
#pragma GCC unroll 8
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    r[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // 4 x 4 transpose of 128-bit lanes across the row groups, for each j.
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xee);
    const __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44),
                 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xee);
    t[j] = _mm512_shuffle_f32x4(a, c, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(a, c, 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(b, d, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) r[c] = t[c];
}

// dst[c * ld + j] = rows[j][c] for c < len, j < 16 (32-bit elements; a null row reads
// as zeros); only the lanes in store_mask are written.
void transpose_rows(const float* const (&rows)[16], int64_t len, float* dst, int64_t ld, __mmask16 store_mask) {
  for (int64_t i = 0; i < len; i += 16) {
    const __mmask16 lm = tail_mask16(len - i);
    __m512 r[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) r[j] = rows[j] ? _mm512_maskz_loadu_ps(lm, rows[j] + i) : _mm512_setzero_ps();
    transpose16(r);
    const int n = len - i < 16 ? int(len - i) : 16;
    for (int c = 0; c < n; ++c) _mm512_mask_storeu_ps(dst + (i + c) * ld, store_mask, r[c]);
  }
}

// x rows -> [k][14].
void pack_x_f32(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  const float* r[16] = {};
  for (int j = 0; j < rows && j < kNr; ++j)
    r[j] = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + j * xs);
  transpose_rows(r, k, static_cast<float*>(dst), kNr, __mmask16((1u << kNr) - 1));
}

// x rows -> bf16 pairs [k/2][14][2] (k padded with a zero to even).
void pack_x_bf16(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  constexpr int64_t kChunk = 256;
  alignas(64) uint16_t buf[kNr][kChunk];
  const float* r[16] = {};
  for (int64_t i0 = 0; i0 < k; i0 += kChunk) {
    const int64_t len = k - i0 < kChunk ? k - i0 : kChunk;
    for (int j = 0; j < rows && j < kNr; ++j) {
      const float* xr = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + j * xs);
      to_bf16_avx512(xr + i0, len, buf[j]);
      if (len & 1) buf[j][len] = 0;
      r[j] = reinterpret_cast<const float*>(buf[j]);
    }
    transpose_rows(r, (len + 1) / 2, static_cast<float*>(dst) + (i0 / 2) * kNr, kNr, __mmask16((1u << kNr) - 1));
  }
}

// Widens 32 (or fewer) weight rows of [k0, k0 + kc) to f32, transposed to [kc][32].
template <DType T>
void pack_w_f32(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  constexpr int64_t kChunk = 256;
  alignas(64) float buf[T == DType::F32 ? 1 : 16][kChunk];
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
    const int64_t len = kc - c0 < kChunk ? kc - c0 : kChunk;
    for (int h = 0; h < 2; ++h) {
      const float* r[16] = {};
      for (int j = 0; j < 16 && h * 16 + j < rows; ++j) {
        const uint8_t* src = static_cast<const uint8_t*>(w) + (h * 16 + j) * ws;
        if constexpr (T == DType::F32) {
          r[j] = reinterpret_cast<const float*>(src) + k0 + c0;
        } else if constexpr (T == DType::F16) {
          const uint16_t* hp = reinterpret_cast<const uint16_t*>(src) + k0 + c0;
          for (int64_t i = 0; i < len; i += 16)
            _mm512_store_ps(buf[j] + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask16(len - i), hp + i)));
          r[j] = buf[j];
        } else {
          dequant_row_avx512(T, src, k0 + c0, len, buf[j]);
          r[j] = buf[j];
        }
      }
      transpose_rows(r, len, static_cast<float*>(dst) + c0 * kMr + h * 16, kMr, 0xffff);
    }
  }
}

}  // namespace

// bf16 weight rows -> pairs [pad_pairs][32][2] for columns [k0, k0 + kc); pairs past kc
// are zero (pad_pairs >= (kc + 1) / 2).
void pack_w_bf16_pairs(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst, int64_t pad_pairs) {
  const int64_t full = kc / 2;
  auto* p = static_cast<uint32_t*>(dst);
  for (int h = 0; h < 2; ++h) {
    const float* r[16] = {};
    for (int j = 0; j < 16 && h * 16 + j < rows; ++j)
      r[j] = reinterpret_cast<const float*>(
          reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + (h * 16 + j) * ws) + k0);
    transpose_rows(r, full, reinterpret_cast<float*>(p) + h * 16, kMr, 0xffff);
  }
  for (int64_t i = full; i < pad_pairs; ++i)
    for (int r = 0; r < kMr; ++r) p[i * kMr + r] = 0;
  if (kc & 1)  // the odd last column pairs with a zero
    for (int r = 0; r < rows; ++r)
      p[full * kMr + r] = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + r * ws)[k0 + kc - 1];
}

namespace {

void pack_w_bf16(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  pack_w_bf16_pairs(w, ws, rows, k0, kc, dst, (kc + 1) / 2);
}

inline void store_tile(__m512 (&c)[kNr][2], float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const __mmask16 mk0 = tail_mask16(mcols), mk1 = mcols > 16 ? tail_mask16(mcols - 16) : 0;
#pragma GCC unroll 14
  for (int r = 0; r < kNr; ++r) {
    if (r >= nrows) break;
    float* yr = y + r * ldy;
    __m512 v0 = c[r][0], v1 = c[r][1];
    if (acc) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(mk0, yr));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(mk1, yr + 16));
    }
    _mm512_mask_storeu_ps(yr, mk0, v0);
    _mm512_mask_storeu_ps(yr + 16, mk1, v1);
  }
}

void tile_f32(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const float* a = static_cast<const float*>(xp);
  const float* b = static_cast<const float*>(wp);
  __m512 c[kNr][2];
#pragma GCC unroll 14
  for (int r = 0; r < kNr; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kc; ++i) {
    const __m512 b0 = _mm512_load_ps(b + i * kMr), b1 = _mm512_load_ps(b + i * kMr + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + i * kMr + 8 * kMr), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int r = 0; r < kNr; ++r) {
      const __m512 av = _mm512_set1_ps(a[i * kNr + r]);
      c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
    }
  }
  store_tile(c, y, ldy, nrows, mcols, acc);
}

void tile_bf16(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const int32_t* a = static_cast<const int32_t*>(xp);
  const uint16_t* b = static_cast<const uint16_t*>(wp);
  // With acc the sums continue from y (as an AMX tile does), so a GEMM split into k blocks
  // gives the bits of one pass over k (ops/matmul_packed.cpp relies on it).
  __m512 c[kNr][2];
  const __mmask16 mk0 = tail_mask16(mcols), mk1 = mcols > 16 ? tail_mask16(mcols - 16) : 0;
#pragma GCC unroll 14
  for (int r = 0; r < kNr; ++r) {
    const bool load = acc && r < nrows;
    c[r][0] = load ? _mm512_maskz_loadu_ps(mk0, y + r * ldy) : _mm512_setzero_ps();
    c[r][1] = load ? _mm512_maskz_loadu_ps(mk1, y + r * ldy + 16) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < kc / 2; ++i) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + i * 2 * kMr);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + i * 2 * kMr + 32);
#pragma GCC unroll 14
    for (int r = 0; r < kNr; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(a[i * kNr + r]);
      c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
    }
  }
  store_tile(c, y, ldy, nrows, mcols, false);
}

constexpr GemmKernel gemm_f32(void (*pack_w)(const void*, size_t, int, int64_t, int64_t, void*)) {
  return GemmKernel{kNr, kMr, 1, 4, pack_x_f32, pack_w, tile_f32};
}

MatmulKernels make_table(bool amx) {
  MatmulKernels t{};
  t.isa = Isa::Avx512;
  t.to_q8 = to_q8_avx512;
  t.to_bf16 = to_bf16_avx512;
  constexpr int kL1 = prefetch_hint(PrefetchLevel::L1), kL2 = prefetch_hint(PrefetchLevel::L2);
  const bool l1 = stream_prefetch_level() == PrefetchLevel::L1;
  t.dot[kWF32] = {ActFormat::F32, nullptr, l1 ? dot_float<LoadF32, kL1> : dot_float<LoadF32, kL2>};
  t.dot[kWF16] = {ActFormat::F32, nullptr, l1 ? dot_float<LoadF16, kL1> : dot_float<LoadF16, kL2>};
  t.dot[kWBF16] = {ActFormat::BF16, to_bf16_avx512, l1 ? dot_bf16<kL1> : dot_bf16<kL2>};
  t.dot[kWQ8_0] = {ActFormat::Q8, to_q8_avx512, dot_q8_0_avx512};
  t.dot[kWQ4_0] = {ActFormat::Q8Nib, to_q8_nib_avx512, dot_q4_0_avx512};
  t.dot[kWQ4_K] = {ActFormat::Q8, to_q8_avx512, dot_q4_k_avx512};
  t.gemm[kWF32] = gemm_f32(pack_w_f32<DType::F32>);
  t.gemm[kWF16] = gemm_f32(pack_w_f32<DType::F16>);
  t.gemm[kWQ8_0] = gemm_f32(pack_w_f32<DType::Q8_0>);
  t.gemm[kWQ4_0] = gemm_f32(pack_w_f32<DType::Q4_0>);
  t.gemm[kWQ4_K] = gemm_f32(pack_w_f32<DType::Q4_K>);
  t.gemm[kWBF16] = amx ? amx_bf16_gemm_kernel() : vdp_bf16_pairs_kernel();
  return t;
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels t = make_table(amx_bf16_usable());
  return t;
}

const MatmulKernels& matmul_kernels_avx512_no_amx() {
  static const MatmulKernels t = make_table(false);
  return t;
}

GemmKernel vdp_bf16_pairs_kernel() { return GemmKernel{kNr, kMr, 2, 2, pack_x_bf16, pack_w_bf16, tile_bf16}; }

const Bf16Gemm* matmul_bf16_gemm_avx512(const MatmulKernels& table) {
  if (&table != &matmul_kernels_avx512()) return nullptr;
  if (const Bf16Gemm* amx = amx_bf16_gemm()) return amx;
  return vdp_bf16_gemm();
}

}  // namespace cbx
