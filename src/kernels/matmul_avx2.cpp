// AVX2 + FMA + F16C matmul kernels.
//   dot path: F32 / F16 / BF16 weights widened to f32 against f32 activations; Q8_0 / Q4_0
//   weights against Q8 activations with vpmaddubsw (Q8_0: sign trick |w| * sign(x, w),
//   at most 2 * 128 * 127 per pair, no int16 saturation; Q4_0: unsigned nibbles, the
//   -8 offset subtracted from each block's integer sum as 8 * sum(x)); the float order is
//   that of kernels/matmul_avx2_q.h, shared with the planar q4p / q8p kernel.
//   GEMM path: 6 x 16 register tile (12 ymm accumulators), f32 for every weight type.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/matmul.h"
#include "kernels/matmul_avx2_q.h"
#include "kernels/matvec_q4k.h"

namespace cbx {

// ---- activation conversion ----

void to_q8_avx2(const float* x, int64_t k, void* dst) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + k);
  auto* sum = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst) + k + k / 8);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + b * 32 + 8 * j);
      mx = _mm256_max_ps(mx, _mm256_and_ps(v[j], absmask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    // Same arithmetic as the generic quantizer: inv = 127 / amax, nearest-even rounding.
    const __m256 inv = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * 32), p);
    sum[b] = hsum256_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    d[b] = amax / 127.f;
  }
}

namespace {

void to_bf16_scalar(const float* x, int64_t k, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < k; ++i) p[i] = f32_to_bf16(x[i]);
}

// ---- dot path, float weights (tail elements scalar) ----

struct LoadF32 {
  static __m256 load(const uint8_t* r, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + i); }
  static float at(const uint8_t* r, int64_t i) { return reinterpret_cast<const float*>(r)[i]; }
};
struct LoadF16 {
  static __m256 load(const uint8_t* r, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(r) + i)));
  }
  static float at(const uint8_t* r, int64_t i) { return _cvtsh_ss(reinterpret_cast<const uint16_t*>(r)[i]); }
};
struct LoadBF16 {
  static __m256 load(const uint8_t* r, int64_t i) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(r) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float at(const uint8_t* r, int64_t i) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(r)[i]); }
};

template <typename L>
void dot_float(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
               float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t k8 = k & ~int64_t(7);
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) {
    const uint8_t* r[4] = {wb + m * ws, wb + (m + 1) * ws, wb + (m + 2) * ws, wb + (m + 3) * ws};
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n * as);
      __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
      for (int64_t i = 0; i < k8; i += 8) {
        const __m256 av = _mm256_loadu_ps(a + i);
        c0 = _mm256_fmadd_ps(L::load(r[0], i), av, c0);
        c1 = _mm256_fmadd_ps(L::load(r[1], i), av, c1);
        c2 = _mm256_fmadd_ps(L::load(r[2], i), av, c2);
        c3 = _mm256_fmadd_ps(L::load(r[3], i), av, c3);
      }
      float s[4] = {hsum256(c0), hsum256(c1), hsum256(c2), hsum256(c3)};
      for (int64_t i = k8; i < k; ++i)
        for (int j = 0; j < 4; ++j) s[j] += L::at(r[j], i) * a[i];
      for (int j = 0; j < 4; ++j) y[n * ldy + m + j] = s[j];
    }
  }
  for (; m < m1; ++m) {
    const uint8_t* r0 = wb + m * ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n * as);
      __m256 c0 = _mm256_setzero_ps();
      for (int64_t i = 0; i < k8; i += 8) c0 = _mm256_fmadd_ps(L::load(r0, i), _mm256_loadu_ps(a + i), c0);
      float s = hsum256(c0);
      for (int64_t i = k8; i < k; ++i) s += L::at(r0, i) * a[i];
      y[n * ldy + m] = s;
    }
  }
}

// ---- dot path, quantized weights ----

// Exact integer sum of one GGUF block against its 32 activations (8 lanes to add up).
inline __m256i block_dot(const BlockQ8_0& b, const int8_t* x) {
  return dot32_s8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)),
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
inline __m256i block_dot(const BlockQ4_0& b, const int8_t* x) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i lo4 = _mm_set1_epi8(0x0f);
  return dot32_u4(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4)),
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

// In the order of kernels/matmul_avx2_q.h (shared with the planar q4p / q8p kernel).
template <bool kQ4>
void dot_q(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows, int64_t k,
           float* y, int64_t ldy) {
  const int64_t nb = k / 32, full = nb / 16 * 16;
  constexpr int kShift = kQ4 ? 3 : 0;  // Q4_0: the -8 offset through the activation block sums
  using Block = std::conditional_t<kQ4, BlockQ4_0, BlockQ8_0>;
  for (int64_t m = m0; m < m1; ++m) {
    const Block* wb = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* dx = q8_act_d(a, k);
      const int32_t* sx = q8_act_sum(a, k);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < full; b += 8) {
        __m256i v[8];
        for (int j = 0; j < 8; ++j) v[j] = block_dot(wb[b + j], qs + (b + j) * 32);
        __m256i isum = sums8_epi32(v);
        if constexpr (kQ4)
          isum = _mm256_sub_epi32(
              isum, _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx + b)), kShift));
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(short(wb[b].d), short(wb[b + 1].d), short(wb[b + 2].d),
                                                         short(wb[b + 3].d), short(wb[b + 4].d), short(wb[b + 5].d),
                                                         short(wb[b + 6].d), short(wb[b + 7].d)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_loadu_ps(dx + b)), acc);
      }
      float s = hsum256(acc);
      for (int64_t b = full; b < nb; ++b)
        s += block_term(wb[b].d, dx[b], hsum256_epi32(block_dot(wb[b], qs + b * 32)) - (kQ4 ? sx[b] << kShift : 0));
      y[n * ldy + m] = s;
    }
  }
}

// ---- GEMM path: 6 activation rows x 16 weight rows ----

constexpr int kNr = 6;
constexpr int kMr = 16;

void pack_x_f32(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  auto* p = static_cast<float*>(dst);
  const float* r[kNr];
  for (int j = 0; j < kNr; ++j)
    r[j] = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + (j < rows ? j : 0) * xs);
  for (int64_t i = 0; i < k; ++i)
    for (int j = 0; j < kNr; ++j) p[i * kNr + j] = j < rows ? r[j][i] : 0.f;
}

template <DType T>
void pack_w_f32(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  auto* p = static_cast<float*>(dst);
  const TypeTraits& tr = type_traits(T);
  alignas(32) float buf[512];
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
      } else {
        tr.to_float(src + size_t((k0 + c) / tr.block_size) * tr.block_bytes, buf, len);
        row = buf;
      }
      for (int64_t i = 0; i < len; ++i) p[(c + i) * kMr + r] = row[i];
    }
  }
}

void tile_f32(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const float* a = static_cast<const float*>(xp);
  const float* b = static_cast<const float*>(wp);
  // Every loop over c has a constant trip count and is unrolled, so the 12 accumulators stay
  // in registers (with one loop over r left rolled GCC kept c on the stack and stored all 12
  // every k step: ~46% of the FMA peak instead of ~90%).
  __m256 c[kNr][2];
#pragma GCC unroll 6
  for (int r = 0; r < kNr; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < kc; ++i) {
    const __m256 b0 = _mm256_load_ps(b + i * kMr), b1 = _mm256_load_ps(b + i * kMr + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kNr; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + i * kNr + r);
      c[r][0] = _mm256_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(av, b1, c[r][1]);
    }
  }
  if (nrows == kNr && mcols == kMr) {
#pragma GCC unroll 6
    for (int r = 0; r < kNr; ++r) {
      float* yr = y + r * ldy;
      __m256 v0 = c[r][0], v1 = c[r][1];
      if (acc) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(yr));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(yr + 8));
      }
      _mm256_storeu_ps(yr, v0);
      _mm256_storeu_ps(yr + 8, v1);
    }
    return;
  }
  alignas(32) float t[kNr][kMr];
#pragma GCC unroll 6
  for (int r = 0; r < kNr; ++r) {
    _mm256_store_ps(t[r], c[r][0]);
    _mm256_store_ps(t[r] + 8, c[r][1]);
  }
  for (int r = 0; r < nrows; ++r)
    for (int j = 0; j < mcols; ++j) y[r * ldy + j] = acc ? y[r * ldy + j] + t[r][j] : t[r][j];
}

constexpr GemmKernel gemm_f32(void (*pack_w)(const void*, size_t, int, int64_t, int64_t, void*)) {
  return GemmKernel{kNr, kMr, 1, 4, pack_x_f32, pack_w, tile_f32};
}

const MatmulKernels kAvx2 = {
    Isa::Avx2,
    to_q8_avx2,
    to_bf16_scalar,
    {{ActFormat::F32, nullptr, dot_float<LoadF32>},
     {ActFormat::F32, nullptr, dot_float<LoadF16>},
     {ActFormat::F32, nullptr, dot_float<LoadBF16>},
     {ActFormat::Q8, to_q8_avx2, dot_q<false>},
     {ActFormat::Q8, to_q8_avx2, dot_q<true>},
     {ActFormat::Q8, to_q8_avx2, dot_q4_k_avx2}},
    {gemm_f32(pack_w_f32<DType::F32>), gemm_f32(pack_w_f32<DType::F16>), gemm_f32(pack_w_f32<DType::BF16>),
     gemm_f32(pack_w_f32<DType::Q8_0>), gemm_f32(pack_w_f32<DType::Q4_0>), gemm_f32(pack_w_f32<DType::Q4_K>)},
};

}  // namespace

const MatmulKernels& matmul_kernels_avx2() { return kAvx2; }

}  // namespace cbx
