// AVX-512 (F/BW/VL/DQ + VNNI + BF16) matmul kernels.
//   dot path: F32 / F16 (F16C) weights with f32 activations; BF16 weights with bf16
//   activations (vdpbf16ps); Q8_0 / Q4_0 weights with Q8 activations (vpdpbusd).
//   GEMM path: 12 x 32 register tile (24 zmm accumulators); f32 FMA for every weight type
//   except BF16, which keeps bf16 panels and uses vdpbf16ps (or AMX tiles, see
//   matmul_amx_avx512.cpp, when the CPU and OS allow them).
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"
#include "kernels/matmul_avx512_q.h"

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

inline __mmask16 tail_mask16(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}
inline __mmask32 tail_mask32(int64_t left) {
  return left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1);
}

struct LoadF32 {
  static __m512 load(const uint8_t* r, int64_t i, __mmask16 mk) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(r) + i);
  }
};
struct LoadF16 {
  static __m512 load(const uint8_t* r, int64_t i, __mmask16 mk) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(r) + i));
  }
};

// Four weight rows at a time share each activation load.
template <typename L>
void dot_float(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as,
               int64_t n_rows, int64_t k, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
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
void dot_bf16(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as,
              int64_t n_rows, int64_t k, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto ld = [](const uint8_t* r, int64_t i, __mmask32 mk) {
    return (__m512bh)_mm512_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(r) + i);
  };
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

// ---- GEMM path: 12 activation rows x 32 weight rows ----

constexpr int kNr = 12;
constexpr int kMr = 32;

void pack_x_f32(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  auto* p = static_cast<float*>(dst);
  const float* r[kNr];
  for (int j = 0; j < kNr; ++j)
    r[j] = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + (j < rows ? j : 0) * xs);
  if (rows == kNr) {
    for (int64_t i = 0; i < k; ++i)
      for (int j = 0; j < kNr; ++j) p[i * kNr + j] = r[j][i];
  } else {
    for (int64_t i = 0; i < k; ++i)
      for (int j = 0; j < kNr; ++j) p[i * kNr + j] = j < rows ? r[j][i] : 0.f;
  }
}

// x rows -> bf16 pairs [k/2][12][2].
void pack_x_bf16(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  const int64_t kp = (k + 1) & ~int64_t(1);
  alignas(64) uint16_t buf[kNr][64];
  for (int64_t i0 = 0; i0 < kp; i0 += 64) {
    const int64_t len = kp - i0 < 64 ? kp - i0 : 64;
    for (int j = 0; j < kNr; ++j) {
      if (j < rows) {
        const float* xr = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + j * xs);
        const int64_t valid = k - i0 < 64 ? k - i0 : 64;
        std::memset(buf[j], 0, sizeof buf[j]);
        to_bf16_avx512(xr + i0, valid, buf[j]);
      } else {
        std::memset(buf[j], 0, sizeof buf[j]);
      }
    }
    auto* out = reinterpret_cast<uint32_t*>(p + i0 * kNr);
    for (int64_t i = 0; i < len / 2; ++i)
      for (int j = 0; j < kNr; ++j) std::memcpy(&out[i * kNr + j], &buf[j][2 * i], 4);
  }
}

// Widens 32 (or fewer) weight rows of [k0, k0 + kc) to f32, transposed to [kc][32].
template <DType T>
void pack_w_f32(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  auto* p = static_cast<float*>(dst);
  alignas(64) float buf[512];
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) {
      for (int64_t i = 0; i < kc; ++i) p[i * kMr + r] = 0.f;
      continue;
    }
    const uint8_t* src = static_cast<const uint8_t*>(w) + r * ws;
    for (int64_t c = 0; c < kc; c += 512) {
      const int64_t len = kc - c < 512 ? kc - c : 512;
      const float* row;
      if constexpr (T == DType::F32) {
        row = reinterpret_cast<const float*>(src) + k0 + c;
      } else if constexpr (T == DType::F16) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src) + k0 + c;
        for (int64_t i = 0; i < len; i += 16)
          _mm512_store_ps(buf + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask16(len - i), h + i)));
        row = buf;
      } else {
        dequant_row_avx512(T, src, k0 + c, len, buf);
        row = buf;
      }
      for (int64_t i = 0; i < len; ++i) p[(c + i) * kMr + r] = row[i];
    }
  }
}

// bf16 weight rows -> pairs [kc/2][32][2].
void pack_w_bf16(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  auto* p = static_cast<uint32_t*>(dst);
  const int64_t pairs = (kc + 1) / 2;
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) {
      for (int64_t i = 0; i < pairs; ++i) p[i * kMr + r] = 0;
      continue;
    }
    const uint16_t* src = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + r * ws) + k0;
    for (int64_t i = 0; i < kc / 2; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 2 * i, 4);
      p[i * kMr + r] = v;
    }
    if (kc & 1) p[(kc / 2) * kMr + r] = src[kc - 1];
  }
}

inline void store_tile(__m512 (&c)[kNr][2], float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const __mmask16 mk0 = tail_mask16(mcols), mk1 = mcols > 16 ? tail_mask16(mcols - 16) : 0;
#pragma GCC unroll 12
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

void tile_f32(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols,
              bool acc) {
  const float* a = static_cast<const float*>(xp);
  const float* b = static_cast<const float*>(wp);
  __m512 c[kNr][2];
#pragma GCC unroll 12
  for (int r = 0; r < kNr; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kc; ++i) {
    const __m512 b0 = _mm512_load_ps(b + i * kMr), b1 = _mm512_load_ps(b + i * kMr + 16);
    _mm_prefetch(reinterpret_cast<const char*>(b + i * kMr + 8 * kMr), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int r = 0; r < kNr; ++r) {
      const __m512 av = _mm512_set1_ps(a[i * kNr + r]);
      c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
    }
  }
  store_tile(c, y, ldy, nrows, mcols, acc);
}

void tile_bf16(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols,
               bool acc) {
  const int32_t* a = static_cast<const int32_t*>(xp);
  const uint16_t* b = static_cast<const uint16_t*>(wp);
  __m512 c[kNr][2];
#pragma GCC unroll 12
  for (int r = 0; r < kNr; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kc / 2; ++i) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + i * 2 * kMr);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + i * 2 * kMr + 32);
#pragma GCC unroll 12
    for (int r = 0; r < kNr; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(a[i * kNr + r]);
      c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
    }
  }
  store_tile(c, y, ldy, nrows, mcols, acc);
}

constexpr GemmKernel gemm_f32(void (*pack_w)(const void*, size_t, int, int64_t, int64_t, void*)) {
  return GemmKernel{kNr, kMr, 1, 4, pack_x_f32, pack_w, tile_f32};
}

MatmulKernels make_table() {
  MatmulKernels t{};
  t.isa = Isa::Avx512;
  t.to_q8 = to_q8_avx512;
  t.to_bf16 = to_bf16_avx512;
  t.dot[kWF32] = {ActFormat::F32, dot_float<LoadF32>};
  t.dot[kWF16] = {ActFormat::F32, dot_float<LoadF16>};
  t.dot[kWBF16] = {ActFormat::BF16, dot_bf16};
  t.dot[kWQ8_0] = {ActFormat::Q8, dot_q8_0_avx512};
  t.dot[kWQ4_0] = {ActFormat::Q8, dot_q4_0_avx512};
  t.gemm[kWF32] = gemm_f32(pack_w_f32<DType::F32>);
  t.gemm[kWF16] = gemm_f32(pack_w_f32<DType::F16>);
  t.gemm[kWQ8_0] = gemm_f32(pack_w_f32<DType::Q8_0>);
  t.gemm[kWQ4_0] = gemm_f32(pack_w_f32<DType::Q4_0>);
  t.gemm[kWBF16] = GemmKernel{kNr, kMr, 2, 2, pack_x_bf16, pack_w_bf16, tile_bf16};
  return t;
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels t = make_table();
  return t;
}

}  // namespace cbx
