// q4kp layout (kernels/matvec_q4k.h): packing and the scalar reference dot.
#include <cstring>

#include "core/dtype.h"
#include "core/x86_kernels.h"
#include "kernels/matvec_q4k.h"
#include "kernels/matvec_q4p.h"

namespace cbx {

size_t q4kp_row_bytes(int64_t k) { return (size_t(k / 512) * kQ4kpGroupBytes + 63) / 64 * 64; }

void q4kp_pack_rows(const void* rows, size_t src_stride, int64_t m, int64_t k, void* dst) {
  const size_t rb = q4kp_row_bytes(k);
  for (int64_t r = 0; r < m; ++r) {
    auto* src = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(rows) + size_t(r) * src_stride);
    uint8_t* out = static_cast<uint8_t*>(dst) + size_t(r) * rb;
    std::memset(out, 0, rb);
    for (int64_t g = 0; g < k / 512; ++g, out += kQ4kpGroupBytes) {
      for (int s = 0; s < 2; ++s) {
        const BlockQ4_K& b = src[2 * g + s];
        kquant_scales(b.scales, out + 8 * s, out + 16 + 8 * s);
        std::memcpy(out + 32 + 2 * s, &b.d, 2);
        std::memcpy(out + 36 + 2 * s, &b.dmin, 2);
        for (int j = 0; j < 8; ++j) {
          const int sb = 8 * s + j;
          const uint8_t* q = b.qs + 32 * (j / 2);
          const int shift = (j & 1) * 4;
          for (int e = 0; e < 16; ++e) {  // element e (low nibble) and e + 16 (high nibble)
            const uint8_t lo = (q[e] >> shift) & 15, hi = (q[e + 16] >> shift) & 15;
            out[40 + (e / 4) * 64 + sb * 4 + e % 4] = uint8_t(lo | (hi << 4));
          }
        }
      }
    }
  }
}

namespace {

void dot_q4kp_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                      int64_t k, float* y, int64_t ldy) {
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* row = static_cast<const uint8_t*>(w) + size_t(m) * ws;
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      // Q8Lane: chunk t (elements 4t .. 4t+3 of each block), lane b, per 16-block group.
      const int8_t* qs = q8_act_qs(a);
      const float* da = q8_act_d(a, k);
      const int32_t* asum = q8_act_sum(a, k);
      float s = 0.f;
      for (int64_t g = 0; g < k / 512; ++g) {
        const uint8_t* grp = row + size_t(g) * kQ4kpGroupBytes;
        const int8_t* xg = qs + g * 512;
        for (int sb = 0; sb < 16; ++sb) {
          int32_t isum = 0;
          for (int e = 0; e < 16; ++e) {
            const uint8_t q = grp[40 + (e / 4) * 64 + sb * 4 + e % 4];
            isum += int32_t(q & 15) * xg[(e / 4) * 64 + sb * 4 + e % 4];
            isum += int32_t(q >> 4) * xg[(4 + e / 4) * 64 + sb * 4 + e % 4];
          }
          uint16_t dh, mh;
          std::memcpy(&dh, grp + 32 + 2 * (sb / 8), 2);
          std::memcpy(&mh, grp + 36 + 2 * (sb / 8), 2);
          const float dj = da[g * 16 + sb];
          s += (f16_to_f32(dh) * float(grp[sb])) * dj * float(isum) -
               (f16_to_f32(mh) * float(grp[16 + sb])) * dj * float(asum[g * 16 + sb]);
        }
      }
      y[n * ldy + m] = s;
    }
  }
}

void to_q8_lane_generic(const float* x, int64_t k, void* dst) {
  matmul_kernels(Isa::Generic).to_q8(x, k, dst);
  q8_to_lane_in_place(dst, k);
}

}  // namespace

const DotKernel& q4kp_dot_generic() {
  static const DotKernel d{ActFormat::Q8Lane, to_q8_lane_generic, dot_q4kp_generic};
  return d;
}

const DotKernel& q4kp_dot_avx512();  // matvec_q4kp_avx512.cpp

const DotKernel* q4kp_dot(Isa isa) {
#if CBX_X86_KERNELS
  return isa == Isa::Avx512 ? &q4kp_dot_avx512() : nullptr;
#else
  (void)isa;
  return nullptr;
#endif
}

}  // namespace cbx
