// Scalar Q4_K x Q8 dot: the reference of the SIMD kernels (kernels/matvec_q4k.h).
#include "core/dtype.h"
#include "kernels/matvec_q4k.h"

namespace cbx {

void dot_q4_k_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                      int64_t k, float* y, int64_t ldy) {
  const int64_t nsb = k / kQK_K;
  for (int64_t m = m0; m < m1; ++m) {
    auto* row = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + m * ws);
    for (int64_t n = 0; n < n_rows; ++n) {
      const void* a = static_cast<const uint8_t*>(act) + n * as;
      const int8_t* qs = q8_act_qs(a);
      const float* da = q8_act_d(a, k);
      const int32_t* asum = q8_act_sum(a, k);
      float s = 0.f;
      for (int64_t b = 0; b < nsb; ++b) {
        const BlockQ4_K& blk = row[b];
        uint8_t sc[8], mn[8];
        kquant_scales(blk.scales, sc, mn);
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int j = 0; j < 8; ++j) {
          const uint8_t* q = blk.qs + 32 * (j / 2);
          const int8_t* x = qs + b * kQK_K + 32 * j;
          const int shift = (j & 1) * 4;
          int32_t isum = 0;
          for (int l = 0; l < 32; ++l) isum += int32_t((q[l] >> shift) & 15) * x[l];
          const float dj = da[b * 8 + j];
          s += (d * float(sc[j])) * dj * float(isum) - (dmin * float(mn[j])) * dj * float(asum[b * 8 + j]);
        }
      }
      y[n * ldy + m] = s;
    }
  }
}

}  // namespace cbx
