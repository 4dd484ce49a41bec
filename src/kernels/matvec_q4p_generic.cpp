#include <cstring>

#include "core/dtype.h"
#include "kernels/matvec_q4p.h"

namespace cbx {
namespace {

// Byte j (0..15) of block b's nibbles and block b's scale, row i of a q4p pair of nb-block rows.
inline uint8_t q4p_byte(const uint8_t* pair, int64_t nb, int i, int64_t b, int j) {
  if (b < nb / 16 * 16) return pair[q4p_group_nibbles(b / 16, i) + size_t((j / 4) * 64 + (b % 16) * 4 + j % 4)];
  return pair[q4p_rest_nibbles(nb, i) + size_t(b - nb / 16 * 16) * 16 + size_t(j)];
}
inline uint16_t q4p_scale(const uint8_t* pair, int64_t nb, int i, int64_t b) {
  const size_t at = b < nb / 16 * 16 ? q4p_group_scales(b / 16, i) + size_t(b % 16) * 2
                                     : q4p_rest_scales(nb, i) + size_t(b - nb / 16 * 16) * 2;
  uint16_t d;
  std::memcpy(&d, pair + at, 2);
  return d;
}

// Same arithmetic and order as the GGUF Q4_0 generic dot (matmul_generic.cpp).
void dot_q4p_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr,
                     int64_t k, float* y, int64_t ldy) {
  const int64_t nb = k / 32;
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* pair = static_cast<const uint8_t*>(w) + (m & ~int64_t(1)) * ws;
    const int i = int(m & 1);
    for (int64_t n = 0; n < nr; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* d = q8_act_d(a, k);
      const int32_t* sum = q8_act_sum(a, k);
      float s = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) {
          const uint8_t q = q4p_byte(pair, nb, i, b, j);
          isum += int32_t(q & 0x0f) * qs[b * 32 + j];
          isum += int32_t(q >> 4) * qs[b * 32 + j + 16];
        }
        s += f16_to_f32(q4p_scale(pair, nb, i, b)) * d[b] * float(isum - 8 * sum[b]);
      }
      y[n * ldy + m] = s;
    }
  }
}

}  // namespace

size_t q4p_row_bytes(int64_t k) { return (size_t(k / 32) * 18 + 63) / 64 * 64; }

size_t q4p_matrix_bytes(int64_t m, int64_t k) { return size_t((m + 1) / 2 * 2) * q4p_row_bytes(k); }

void q4p_pack_rows(const void* q4_0_rows, size_t src_stride, int64_t m, int64_t k, void* dst) {
  const int64_t nb = k / 32, full = nb / 16 * 16;
  const size_t pair_bytes = 2 * q4p_row_bytes(k);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, q4p_matrix_bytes(m, k));
  for (int64_t r = 0; r < m; ++r) {
    const auto* src = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(q4_0_rows) + size_t(r) * src_stride);
    uint8_t* pair = out + size_t(r / 2) * pair_bytes;
    const int i = int(r & 1);
    for (int64_t b = 0; b < nb; ++b) {
      if (b < full) {
        uint8_t* g = pair + q4p_group_nibbles(b / 16, i) + (b % 16) * 4;
        for (int s = 0; s < 4; ++s) std::memcpy(g + s * 64, src[b].qs + 4 * s, 4);
        std::memcpy(pair + q4p_group_scales(b / 16, i) + (b % 16) * 2, &src[b].d, 2);
      } else {
        std::memcpy(pair + q4p_rest_nibbles(nb, i) + size_t(b - full) * 16, src[b].qs, 16);
        std::memcpy(pair + q4p_rest_scales(nb, i) + size_t(b - full) * 2, &src[b].d, 2);
      }
    }
  }
}

const DotKernel& q4p_dot_generic() {
  static const DotKernel k{ActFormat::Q8, matmul_kernels_generic().to_q8, dot_q4p_generic};
  return k;
}

const DotKernel* q4p_dot(Isa isa) { return isa == Isa::Avx512 ? &q4p_dot_avx512() : nullptr; }

}  // namespace cbx
