#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/x86_kernels.h"
#include "kernels/matvec_q4p.h"

namespace cbx {
namespace {

// Quant byte j (0 .. qb-1) of block b, and block b's scale, in row i of a planar pair of
// nb-block rows.
inline uint8_t planar_byte(int qb, const uint8_t* pair, int64_t nb, int i, int64_t b, int j) {
  if (b < nb / 16 * 16) return pair[planar_group_quants(qb, b / 16, i) + size_t((j / 4) * 64 + (b % 16) * 4 + j % 4)];
  return pair[planar_rest_quants(qb, nb, i) + size_t(b - nb / 16 * 16) * size_t(qb) + size_t(j)];
}
inline uint16_t planar_scale(int qb, const uint8_t* pair, int64_t nb, int i, int64_t b) {
  const size_t at = b < nb / 16 * 16 ? planar_group_scales(qb, b / 16, i) + size_t(b % 16) * 2
                                     : planar_rest_scales(qb, nb, i) + size_t(b - nb / 16 * 16) * 2;
  uint16_t d;
  std::memcpy(&d, pair + at, 2);
  return d;
}

// Same arithmetic and order as the GGUF Q4_0 / Q8_0 generic dots (matmul_generic.cpp).
template <int kQb>
void dot_planar_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t nr,
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
        if constexpr (kQb == 16) {
          for (int j = 0; j < 16; ++j) {
            const uint8_t q = planar_byte(kQb, pair, nb, i, b, j);
            isum += int32_t(q & 0x0f) * qs[b * 32 + j];
            isum += int32_t(q >> 4) * qs[b * 32 + j + 16];
          }
          isum -= 8 * sum[b];
        } else {
          for (int j = 0; j < 32; ++j) isum += (int32_t(planar_byte(kQb, pair, nb, i, b, j)) - 128) * qs[b * 32 + j];
        }
        s += f16_to_f32(planar_scale(kQb, pair, nb, i, b)) * d[b] * float(isum);
      }
      y[n * ldy + m] = s;
    }
  }
}

}  // namespace

size_t planar_row_bytes(DType t, int64_t k) {
  return (size_t(k / 32) * size_t(planar_quant_bytes(t) + 2) + 63) / 64 * 64;
}

size_t planar_matrix_bytes(DType t, int64_t m, int64_t k) { return size_t((m + 1) / 2 * 2) * planar_row_bytes(t, k); }

void planar_pack_rows(DType t, const void* rows, size_t src_stride, int64_t m, int64_t k, void* dst) {
  CBX_CHECK(planar_type(t), "planar_pack_rows: no planar layout for %s", dtype_name(t));
  const int qb = planar_quant_bytes(t);
  const size_t bb = size_t(qb) + 2;  // GGUF block bytes: f16 d, then the quants
  const int64_t nb = k / 32, full = nb / 16 * 16;
  const size_t pair_bytes = 2 * planar_row_bytes(t, k);
  const uint8_t flip = t == DType::Q8_0 ? 0x80 : 0x00;  // Q8_0: signed w -> unsigned w + 128
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, planar_matrix_bytes(t, m, k));
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(rows) + size_t(r) * src_stride;
    uint8_t* pair = out + size_t(r / 2) * pair_bytes;
    const int i = int(r & 1);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + size_t(b) * bb;
      uint8_t* q;
      size_t piece;  // bytes between consecutive 4-byte pieces of the block
      if (b < full) {
        q = pair + planar_group_quants(qb, b / 16, i) + (b % 16) * 4;
        piece = 64;
        std::memcpy(pair + planar_group_scales(qb, b / 16, i) + (b % 16) * 2, blk, 2);
      } else {
        q = pair + planar_rest_quants(qb, nb, i) + size_t(b - full) * size_t(qb);
        piece = 4;
        std::memcpy(pair + planar_rest_scales(qb, nb, i) + size_t(b - full) * 2, blk, 2);
      }
      for (int s = 0; s < qb / 4; ++s)
        for (int j = 0; j < 4; ++j) q[size_t(s) * piece + size_t(j)] = uint8_t(blk[2 + 4 * s + j] ^ flip);
    }
  }
}

void q8_to_lane_in_place(void* row, int64_t k) {
  auto* qs = static_cast<uint8_t*>(row);
  uint32_t tmp[128];
  for (int64_t g = 0; g + 16 <= k / 32; g += 16) {
    uint8_t* q = qs + g * 32;
    for (int b = 0; b < 16; ++b)
      for (int t = 0; t < 8; ++t) std::memcpy(&tmp[t * 16 + b], q + b * 32 + t * 4, 4);
    std::memcpy(q, tmp, sizeof(tmp));
  }
}

const DotKernel& planar_dot_generic(DType t) {
  static const DotKernel q4{ActFormat::Q8, matmul_kernels_generic().to_q8, dot_planar_generic<16>};
  static const DotKernel q8{ActFormat::Q8, matmul_kernels_generic().to_q8, dot_planar_generic<32>};
  return t == DType::Q8_0 ? q8 : q4;
}

const DotKernel* planar_dot(DType t, Isa isa) {
  if (!planar_type(t)) return nullptr;
#if CBX_X86_KERNELS
  if (isa == Isa::Avx512) return &planar_dot_avx512(t);
  if (isa == Isa::Avx2) return &planar_dot_avx2(t);
#endif
  return nullptr;
}

}  // namespace cbx
