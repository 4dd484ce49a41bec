#include <cstring>

#include "core/dtype.h"
#include "kernels/matvec_q4p.h"

namespace cbx {
namespace {

// Byte j (0..15) of block b's nibbles in a q4p row of nb blocks.
inline uint8_t q4p_byte(const uint8_t* row, int64_t nb, int64_t b, int j) {
  if (b < nb / 16 * 16) return row[(b / 16) * 256 + (j / 4) * 64 + (b % 16) * 4 + j % 4];
  return row[b * 16 + j];
}

// Same arithmetic and order as the GGUF Q4_0 generic dot (matmul_generic.cpp).
void dot_q4p_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr,
                     int64_t k, float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* row = static_cast<const uint8_t*>(w) + m * ws;
    const uint16_t* dw = reinterpret_cast<const uint16_t*>(row + nb * 16);
    for (int64_t n = 0; n < nr; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* d = q8_act_d(a, k);
      const int32_t* sum = q8_act_sum(a, k);
      float s = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) {
          const uint8_t q = q4p_byte(row, nb, b, j);
          isum += int32_t(q & 0x0f) * qs[b * 32 + j];
          isum += int32_t(q >> 4) * qs[b * 32 + j + 16];
        }
        s += f16_to_f32(dw[b]) * d[b] * float(isum - 8 * sum[b]);
      }
      y[n * ldy + m] = s;
    }
  }
}

}  // namespace

size_t q4p_row_bytes(int64_t k) { return (size_t(k / 32) * 18 + 63) / 64 * 64; }

void q4p_pack_row(const void* q4_0_row, int64_t k, void* dst) {
  const int64_t nb = k / 32;
  const auto* src = static_cast<const BlockQ4_0*>(q4_0_row);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t full = nb / 16 * 16;
  for (int64_t b = 0; b < nb; ++b) {
    if (b < full) {
      uint8_t* g = out + (b / 16) * 256 + (b % 16) * 4;
      for (int s = 0; s < 4; ++s) std::memcpy(g + s * 64, src[b].qs + 4 * s, 4);
    } else {
      std::memcpy(out + b * 16, src[b].qs, 16);
    }
    std::memcpy(out + nb * 16 + b * 2, &src[b].d, 2);
  }
  std::memset(out + nb * 18, 0, q4p_row_bytes(k) - size_t(nb) * 18);
}

const DotKernel& q4p_dot_generic() {
  static const DotKernel k{ActFormat::Q8, matmul_kernels_generic().to_q8, dot_q4p_generic};
  return k;
}

const DotKernel* q4p_dot(Isa isa) { return isa == Isa::Avx512 ? &q4p_dot_avx512() : nullptr; }

}  // namespace cbx
