// bf16 panel packers shared by the AVX-512 bf16 GEMMs (AMX tiles: matmul_amx_avx512.cpp;
// vdpbf16ps: matmul_vdpbf16_avx512.cpp). Both read their weights from the same w panel
// layout, [kcp / 2][32 rows][2 bf16] with kcp = kc rounded up to 32 (zero padded), and the
// same stride-1 conv1d layouts (kernels/matmul.h, Bf16Gemm::Conv).
#include "kernels/bf16_pack_avx512.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul_avx512_q.h"
#include "kernels/nn.h"

// GCC 12 reports the undefined start value inside _mm512_cvtph_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cbx {
namespace {

// Elements [k0, k0 + kc) of one weight row of type T -> f32.
template <DType T>
const float* widen_row(const uint8_t* row, int64_t k0, int64_t kc, float* buf) {
  if constexpr (T == DType::F32) {
    return reinterpret_cast<const float*>(row) + k0;
  } else if constexpr (T == DType::F16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(row) + k0;
    for (int64_t i = 0; i < kc; i += 16) {
      const __mmask16 mk = kc - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (kc - i)) - 1);
      _mm512_storeu_ps(buf + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, h + i)));
    }
    return buf;
  } else {
    dequant_row_avx512(T, row, k0, kc, buf);
    return buf;
  }
}

// f32 [n] -> bf16 [n_pad] (round to nearest even), zero past n.
void round_row_bf16(const float* x, int64_t n, int64_t n_pad, uint16_t* dst) {
  for (int64_t i = 0; i < n_pad; i += 32) {
    const int64_t left = n - i;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : 0;
    const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left > 16 ? __mmask16((1u << (left - 16)) - 1) : 0;
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + i + 16), _mm512_maskz_loadu_ps(m0, x + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
}

}  // namespace

// Weight rows of type T -> bf16 rows -> the pair layout of pack_w_bf16_pairs.
template <DType T>
void pack_w_bf16_widen(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  alignas(64) float f[kBf16PackMaxKc];
  alignas(64) uint16_t b[32][kBf16PackMaxKc];
  const int64_t kcp = (kc + 31) / 32 * 32;
  for (int j = 0; j < rows; ++j)
    round_row_bf16(widen_row<T>(static_cast<const uint8_t*>(w) + j * ws, k0, kc, f), kc, kcp, b[j]);
  pack_w_bf16_pairs(b, sizeof(b[0]), rows, 0, kcp, dst, kcp / 2);
}

// k-major f32 B, columns [0, cols), rows [k0, k0 + kc) -> [kcp / 2][32][2] bf16: for each
// row pair, 32 columns of both rows rounded by one vcvtne2ps2bf16 and interleaved.
void pack_bt_bf16(const float* b, const int64_t* off, int64_t b_rs, int cols, int64_t k0, int64_t kc, void* dst) {
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xffff) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : 0;
  auto* p = static_cast<uint16_t*>(dst);
  const int64_t pairs = (kc + 31) / 32 * 16;
  for (int64_t i = 0; i < pairs; ++i, p += 2 * 32) {
    const int64_t r0 = 2 * i, r1 = r0 + 1;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
    if (r0 < kc) {
      const float* s = b + (off ? off[k0 + r0] : (k0 + r0) * b_rs);
      a0 = _mm512_maskz_loadu_ps(m0, s);
      a1 = _mm512_maskz_loadu_ps(m1, s + 16);
    }
    if (r1 < kc) {
      const float* s = b + (off ? off[k0 + r1] : (k0 + r1) * b_rs);
      c0 = _mm512_maskz_loadu_ps(m0, s);
      c1 = _mm512_maskz_loadu_ps(m1, s + 16);
    }
    // Lanes 0..15: row r0, lanes 16..31: row r1; the permutation interleaves them by column.
    _mm512_storeu_si512(p, _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(c0, a0)));
    _mm512_storeu_si512(p + 32, _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(c1, a1)));
  }
}

void conv_pack_x_bf16(const float* x, int64_t xs, int64_t cin, int64_t T, int64_t pl, int64_t cols, int64_t p0,
                      int64_t p1, const float* snake_alpha, uint16_t* xp) {
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  // With Snake, each chunk of kChunk padded columns first has its valid input positions
  // activated into a buffer (L1) that then stands in for the input rows.
  constexpr int64_t kChunk = 512;
  alignas(64) float act[2][kChunk];
  void (*snake)(const float*, float*, int64_t, float) = snake_alpha ? nn_kernels_avx512().snake : nullptr;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t c0 = 2 * p, c1 = c0 + 1;
    const float* r0 = c0 < cin ? x + c0 * xs : nullptr;
    const float* r1 = c1 < cin ? x + c1 * xs : nullptr;
    uint16_t* dst = xp + p * cols * 2;
    if (p + 1 < p1) {  // the next pair's input rows while this one is worked on (T1)
      const int64_t v0 = std::max<int64_t>(-pl, 0), v1 = std::min<int64_t>(cols - pl, T);
      for (int64_t c = 2 * p + 2; c < std::min<int64_t>(2 * p + 4, cin); ++c)
        for (int64_t i = v0; i < v1; i += 16) _mm_prefetch(reinterpret_cast<const char*>(x + c * xs + i), _MM_HINT_T1);
    }
    for (int64_t j0 = 0; j0 < cols; j0 += kChunk) {
      const int64_t j1 = cols - j0 < kChunk ? cols : j0 + kChunk;
      // Input positions [j0 - pl, j1 - pl), the valid ones [v0, v1) (possibly none).
      const int64_t v0 = std::max<int64_t>(j0 - pl, 0), v1 = std::min<int64_t>(j1 - pl, T);
      const float* s0 = r0;
      const float* s1 = r1;
      int64_t base = 0;  // input position of s0[0] / s1[0]
      if (snake && v1 > v0) {
        base = v0;
        if (r0) snake(r0 + v0, act[0], v1 - v0, snake_alpha[c0]);
        if (r1) snake(r1 + v0, act[1], v1 - v0, snake_alpha[c1]);
        s0 = r0 ? act[0] : nullptr;
        s1 = r1 ? act[1] : nullptr;
      }
      for (int64_t j = j0; j < j1; j += 16) {
        // Input positions j - pl .. j - pl + 15, the valid ones in [0, T).
        const int64_t s = j - pl;
        uint32_t valid = 0;
        for (int l = 0; l < 16; ++l) valid |= uint32_t(s + l >= 0 && s + l < T) << l;
        const __mmask16 m = __mmask16(valid);
        const int64_t n = j1 - j < 16 ? j1 - j : 16;
        __m512 a = _mm512_setzero_ps(), b = a;
        if (m) {
          // The masked lanes' addresses are not accessed; offset the base so that lane l
          // reads position s + l (s - base may be negative only for masked-off lanes).
          const int64_t off = s - base;
          if (s0) a = _mm512_maskz_loadu_ps(m, s0 + off);
          if (s1) b = _mm512_maskz_loadu_ps(m, s1 + off);
        }
        // [a0..a15 | b0..b15] -> a0 b0 a1 b1 ...
        const __m512i v = _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        _mm512_mask_storeu_epi16(dst + 2 * j, n == 16 ? __mmask32(0xffffffffu) : __mmask32((1u << (2 * n)) - 1), v);
      }
    }
  }
}

void conv_pack_w_bf16(const float* w, int64_t cout, int64_t cin, int64_t K, int64_t cout_pad, int64_t kk, int64_t b,
                      uint16_t* wp) {
  const int64_t n_blocks = (cin + 31) / 32;
  uint16_t* dst = wp + (kk * n_blocks + b) * cout_pad * 32;
  alignas(64) float row[32];
  for (int64_t o = 0; o < cout_pad; ++o) {
    for (int i = 0; i < 32; ++i) {
      const int64_t c = b * 32 + i;
      row[i] = o < cout && c < cin ? w[(o * cin + c) * K + kk] : 0.f;
    }
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_load_ps(row + 16), _mm512_load_ps(row));
    _mm512_storeu_si512(dst + o * 32, (__m512i)v);
  }
}

void pack_w_bf16_pad32(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  pack_w_bf16_pairs(w, ws, rows, k0, kc, dst, (kc + 31) / 32 * 16);
}

template void pack_w_bf16_widen<DType::F32>(const void*, size_t, int, int64_t, int64_t, void*);
template void pack_w_bf16_widen<DType::F16>(const void*, size_t, int, int64_t, int64_t, void*);
template void pack_w_bf16_widen<DType::Q8_0>(const void*, size_t, int, int64_t, int64_t, void*);
template void pack_w_bf16_widen<DType::Q4_0>(const void*, size_t, int, int64_t, int64_t, void*);
template void pack_w_bf16_widen<DType::Q4_K>(const void*, size_t, int, int64_t, int64_t, void*);

}  // namespace cbx
