#include "core/dtype_kquant.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace cbx {

void kquant_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t b[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    b[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    b[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    b[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

namespace {

// Element i (0..255) of a K-quant block: its sub-block is i / 32; its nibble sits in byte
// 32 * (i / 64) + i % 32, low for even sub-blocks, high for odd ones.
inline int nibble_at(const uint8_t* qs, int i) {
  const uint8_t b = qs[32 * (i / 64) + i % 32];
  return (i / 32) & 1 ? b >> 4 : b & 15;
}
inline void set_nibble(uint8_t* qs, int i, int q) {
  uint8_t& b = qs[32 * (i / 64) + i % 32];
  if ((i / 32) & 1)
    b = uint8_t((b & 0x0f) | (q << 4));
  else
    b = uint8_t((b & 0xf0) | q);
}

inline int clampi(long v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : int(v); }

// Squared error of x[0..32) quantized as a * q - b (q = round((x + b) / a) in [0, qmax]).
float sub_error(const float* x, int qmax, float a, float b) {
  float e = 0.f;
  for (int l = 0; l < 32; ++l) {
    const int q = a > 0.f ? clampi(std::lround((x[l] + b) / a), 0, qmax) : 0;
    const float r = a * float(q) - b - x[l];
    e += r * r;
  }
  return e;
}

// Scale a >= 0 and min b >= 0 for x = a * q - b, q in [0, qmax], minimising the squared
// error: from several starting ranges, q is rounded and (a, b) refit by least squares a
// few times (b clamped at 0, as the format stores only subtracted mins).
void fit_sub(const float* x, int qmax, float* a_out, float* b_out) {
  // The range to cover: [min(x, 0), max(x)] (the stored min only subtracts, so a block of
  // positive values starts at 0; a negative block ends at its own maximum).
  float lo = 0.f, hi = x[0];
  for (int l = 0; l < 32; ++l) {
    lo = std::fmin(lo, x[l]);
    hi = std::fmax(hi, x[l]);
  }
  *a_out = 0.f;
  *b_out = -lo;
  if (hi <= lo) return;
  float best_a = (hi - lo) / float(qmax), best_b = -lo;
  float best_e = sub_error(x, qmax, best_a, best_b);
  for (int t = 0; t < 12; ++t) {
    float a = (hi - lo) / (float(qmax) - 1.f + 0.2f * float(t)), b = -lo;
    for (int it = 0; it < 3; ++it) {
      double sq = 0, sqq = 0, sx = 0, sqx = 0;
      for (int l = 0; l < 32; ++l) {
        const double q = a > 0.f ? clampi(std::lround((x[l] + b) / a), 0, qmax) : 0;
        sq += q;
        sqq += q * q;
        sx += x[l];
        sqx += q * x[l];
      }
      const double det = 32.0 * sqq - sq * sq;
      if (det <= 0) break;
      double na = (32.0 * sqx - sq * sx) / det;
      double nb = -(sqq * sx - sq * sqx) / det;  // x ~ na * q - nb
      if (nb < 0) {
        nb = 0;
        na = sqq > 0 ? sqx / sqq : 0;
      }
      if (na <= 0) break;
      a = float(na);
      b = float(nb);
      const float e = sub_error(x, qmax, a, b);
      if (e < best_e) {
        best_e = e;
        best_a = a;
        best_b = b;
      }
    }
  }
  *a_out = best_a;
  *b_out = best_b;
}

// One super-block: d, dmin, packed scales and the quants q[256] (0..qmax).
void quant_super(const float* x, int qmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* q) {
  float a[8], b[8], amax = 0.f, bmax = 0.f;
  for (int j = 0; j < 8; ++j) {
    fit_sub(x + 32 * j, qmax, &a[j], &b[j]);
    amax = std::fmax(amax, a[j]);
    bmax = std::fmax(bmax, b[j]);
  }
  *d_out = f32_to_f16(amax / 63.f);
  *dmin_out = f32_to_f16(bmax / 63.f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    const int s0 = d > 0.f ? clampi(std::lround(a[j] / d), 0, 63) : 0;
    const int m0 = dmin > 0.f ? clampi(std::lround(b[j] / dmin), 0, 63) : 0;
    int bs = s0, bm = m0;
    float be = sub_error(xs, qmax, d * float(s0), dmin * float(m0));
    for (int s = s0 - 1; s <= s0 + 1; ++s)
      for (int m = m0 - 1; m <= m0 + 1; ++m) {
        if (s < 0 || s > 63 || m < 0 || m > 63 || (s == s0 && m == m0)) continue;
        const float e = sub_error(xs, qmax, d * float(s), dmin * float(m));
        if (e < be) {
          be = e;
          bs = s;
          bm = m;
        }
      }
    sc[j] = uint8_t(bs);
    mn[j] = uint8_t(bm);
    const float sa = d * float(bs), sb = dmin * float(bm);
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = uint8_t(sa > 0.f ? clampi(std::lround((xs[l] + sb) / sa), 0, qmax) : 0);
  }
  kquant_pack_scales(sc, mn, scales);
}

}  // namespace

void q4_k_to_float(const void* src, float* dst, int64_t n) {
  auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    uint8_t sc[8], m[8];
    kquant_scales(b[i].scales, sc, m);
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e)
      dst[e] = d * float(sc[e / 32]) * float(nibble_at(b[i].qs, e)) - dmin * float(m[e / 32]);
  }
}

void q5_k_to_float(const void* src, float* dst, int64_t n) {
  auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    uint8_t sc[8], m[8];
    kquant_scales(b[i].scales, sc, m);
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int q = nibble_at(b[i].qs, e) | (((b[i].qh[e % 32] >> (e / 32)) & 1) << 4);
      dst[e] = d * float(sc[e / 32]) * float(q) - dmin * float(m[e / 32]);
    }
  }
}

void q4_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  uint8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant_super(src + i * kQK_K, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int e = 0; e < kQK_K; ++e) set_nibble(b[i].qs, e, q[e]);
  }
}

void q5_k_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  uint8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant_super(src + i * kQK_K, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQK_K; ++e) {
      set_nibble(b[i].qs, e, q[e] & 15);
      b[i].qh[e % 32] = uint8_t(b[i].qh[e % 32] | ((q[e] >> 4) << (e / 32)));
    }
  }
}

}  // namespace cbx
