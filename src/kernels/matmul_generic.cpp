// Generic (scalar) matmul kernels: the reference every SIMD kernel is tested against.
// Also the ISA dispatch and the layout helpers shared by all tables.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/x86_kernels.h"
#include "kernels/matmul.h"
#include "kernels/matvec_q4k.h"

namespace cbx {

size_t q8_act_row_bytes(int64_t k) {
  size_t b = size_t(k) + size_t(k / 32) * 8;
  return (b + 63) & ~size_t(63);
}

size_t act_row_bytes(ActFormat f, int64_t k) {
  size_t b = 0;
  switch (f) {
    case ActFormat::F32:
      b = size_t(k) * 4;
      break;
    case ActFormat::BF16:
      b = size_t(k) * 2;
      break;
    case ActFormat::Q8:
    case ActFormat::Q8Nib:
    case ActFormat::Q8Lane:
      return q8_act_row_bytes(k);
  }
  return (b + 63) & ~size_t(63);
}

int matmul_weight_slot(DType t) {
  switch (t) {
    case DType::F32:
      return kWF32;
    case DType::F16:
      return kWF16;
    case DType::BF16:
      return kWBF16;
    case DType::Q8_0:
      return kWQ8_0;
    case DType::Q4_0:
      return kWQ4_0;
    case DType::Q4_K:
      return kWQ4_K;
    default:
      return -1;
  }
}

const MatmulKernels& matmul_kernels(Isa isa) {
#if CBX_X86_KERNELS
  switch (isa) {
    case Isa::Avx512:
      return matmul_kernels_avx512();
    case Isa::Avx2:
      return matmul_kernels_avx2();
    default:
      return matmul_kernels_generic();
  }
#else
  (void)isa;  // only the generic kernels are compiled in (core/x86_kernels.h)
  return matmul_kernels_generic();
#endif
}

namespace {

// ---- activation conversion ----

void to_q8_generic(const float* x, int64_t k, void* dst) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + k);
  auto* sum = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst) + k + k / 8);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    // The SIMD versions compute exactly this: inv = 127 / amax, q = nearest-even(x * inv).
    float inv = amax > 0.f ? 127.f / amax : 0.f;
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) {
      int q = int(std::nearbyint(xb[j] * inv));
      qs[b * 32 + j] = int8_t(q);
      s += q;
    }
    d[b] = amax / 127.f;
    sum[b] = s;
  }
}

void to_bf16_generic(const float* x, int64_t k, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < k; ++i) p[i] = f32_to_bf16(x[i]);
}

// ---- dot path ----

template <typename Load>
void dot_rows_float(const void* w, size_t w_stride, int64_t m0, int64_t m1, const void* act, size_t act_stride,
                    int64_t n_rows, int64_t k, float* y, int64_t ldy, Load load) {
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* wr = static_cast<const uint8_t*>(w) + m * w_stride;
    for (int64_t n = 0; n < n_rows; ++n) {
      const float* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + n * act_stride);
      float s = 0.f;
      for (int64_t i = 0; i < k; ++i) s += load(wr, i) * a[i];
      y[n * ldy + m] = s;
    }
  }
}

void dot_f32(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr, int64_t k,
             float* y, int64_t ldy) {
  dot_rows_float(w, ws, m0, m1, act, as, nr, k, y, ldy,
                 [](const uint8_t* r, int64_t i) { return reinterpret_cast<const float*>(r)[i]; });
}
void dot_f16(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr, int64_t k,
             float* y, int64_t ldy) {
  dot_rows_float(w, ws, m0, m1, act, as, nr, k, y, ldy,
                 [](const uint8_t* r, int64_t i) { return f16_to_f32(reinterpret_cast<const uint16_t*>(r)[i]); });
}
void dot_bf16(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr, int64_t k,
              float* y, int64_t ldy) {
  dot_rows_float(w, ws, m0, m1, act, as, nr, k, y, ldy,
                 [](const uint8_t* r, int64_t i) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(r)[i]); });
}

// Quantized weights x Q8 activations: per block, an exact integer dot scaled by d_w * d_x.
// Q8_0: sum w*x directly. Q4_0: sum (q - 8) * x = sum q * x - 8 * sum x.
void dot_q8_0(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr, int64_t k,
              float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m) {
    auto* wb = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < nr; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* d = q8_act_d(a, k);
      float s = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 32; ++j) isum += int32_t(wb[b].qs[j]) * qs[b * 32 + j];
        s += f16_to_f32(wb[b].d) * d[b] * float(isum);
      }
      y[n * ldy + m] = s;
    }
  }
}

void dot_q4_0(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr, int64_t k,
              float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m) {
    auto* wb = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < nr; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* d = q8_act_d(a, k);
      const int32_t* sum = q8_act_sum(a, k);
      float s = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) {
          isum += int32_t(wb[b].qs[j] & 0x0f) * qs[b * 32 + j];
          isum += int32_t(wb[b].qs[j] >> 4) * qs[b * 32 + j + 16];
        }
        s += f16_to_f32(wb[b].d) * d[b] * float(isum - 8 * sum[b]);
      }
      y[n * ldy + m] = s;
    }
  }
}

// ---- GEMM path: f32 panels, k_pack = 1 ----

constexpr int kNr = 4;
constexpr int kMr = 16;

void pack_x_generic(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  auto* p = static_cast<float*>(dst);
  for (int64_t i = 0; i < k; ++i)
    for (int r = 0; r < kNr; ++r)
      p[i * kNr + r] = r < rows ? reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + r * xs)[i] : 0.f;
}

// Widens rows of w (any weight type) to f32 and transposes them into [kc][kMr].
template <DType T>
void pack_w_generic(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst) {
  auto* p = static_cast<float*>(dst);
  const TypeTraits& tr = type_traits(T);
  float buf[512];
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) {
      for (int64_t i = 0; i < kc; ++i) p[i * kMr + r] = 0.f;
      continue;
    }
    const uint8_t* src = static_cast<const uint8_t*>(w) + r * ws + size_t(k0 / tr.block_size) * tr.block_bytes;
    for (int64_t c = 0; c < kc; c += 512) {
      int64_t len = kc - c < 512 ? kc - c : 512;
      tr.to_float(src + size_t(c / tr.block_size) * tr.block_bytes, buf, len);
      for (int64_t i = 0; i < len; ++i) p[(c + i) * kMr + r] = buf[i];
    }
  }
}

void tile_generic(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols,
                  bool accumulate) {
  auto* a = static_cast<const float*>(xp);
  auto* b = static_cast<const float*>(wp);
  float c[kNr][kMr] = {};
  for (int64_t i = 0; i < kc; ++i)
    for (int r = 0; r < kNr; ++r)
      for (int j = 0; j < kMr; ++j) c[r][j] += a[i * kNr + r] * b[i * kMr + j];
  for (int r = 0; r < nrows; ++r)
    for (int j = 0; j < mcols; ++j) y[r * ldy + j] = accumulate ? y[r * ldy + j] + c[r][j] : c[r][j];
}

constexpr GemmKernel gemm_generic(void (*pack_w)(const void*, size_t, int, int64_t, int64_t, void*)) {
  return GemmKernel{kNr, kMr, 1, 4, pack_x_generic, pack_w, tile_generic};
}

const MatmulKernels kGeneric = {
    Isa::Generic,
    to_q8_generic,
    to_bf16_generic,
    {{ActFormat::F32, nullptr, dot_f32},
     {ActFormat::F32, nullptr, dot_f16},
     {ActFormat::F32, nullptr, dot_bf16},
     {ActFormat::Q8, to_q8_generic, dot_q8_0},
     {ActFormat::Q8, to_q8_generic, dot_q4_0},
     {ActFormat::Q8, to_q8_generic, dot_q4_k_generic}},
    {gemm_generic(pack_w_generic<DType::F32>), gemm_generic(pack_w_generic<DType::F16>),
     gemm_generic(pack_w_generic<DType::BF16>), gemm_generic(pack_w_generic<DType::Q8_0>),
     gemm_generic(pack_w_generic<DType::Q4_0>), gemm_generic(pack_w_generic<DType::Q4_K>)},
};

}  // namespace

const MatmulKernels& matmul_kernels_generic() { return kGeneric; }

}  // namespace cbx
