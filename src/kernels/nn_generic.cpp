// Reference (portable scalar) versions of the nn kernels. The SIMD kernels are tested
// against these; keep them plain.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/x86_kernels.h"
#include "kernels/nn.h"

namespace cbx {
namespace {

inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }

inline float unary1(Unary op, float x, float p0, float p1) {
  switch (op) {
    case Unary::Copy:
      return x;
    case Unary::Scale:
      return p0 * x;
    case Unary::Affine:
      return p0 * x + p1;
    case Unary::Relu:
      return x > 0.f ? x : 0.f;
    case Unary::LeakyRelu:
      return x >= 0.f ? x : p0 * x;
    case Unary::Elu:
      return x > 0.f ? x : p0 * std::expm1(x);
    case Unary::Gelu:
      return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case Unary::GeluTanh:
      return 0.5f * x * (1.f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Unary::Silu:
      return x * sigmoidf(x);
    case Unary::Mish: {
      float sp = x > 20.f ? x : std::log1p(std::exp(x));
      return x * std::tanh(sp);
    }
    case Unary::Tanh:
      return std::tanh(x);
    case Unary::Sigmoid:
      return sigmoidf(x);
    case Unary::Softplus:
      return x > 20.f ? x : std::log1p(std::exp(x));
    case Unary::Exp:
      return std::exp(x);
    case Unary::Sin:
      return std::sin(x);
    case Unary::Clamp:
      return std::min(std::max(x, p0), p1);
    case Unary::Abs:
      return std::fabs(x);
    case Unary::Count:
      break;
  }
  return x;
}

void unary_generic(Unary op, const float* x, float* y, int64_t n, float p0, float p1) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary1(op, x[i], p0, p1);
}

void binary_generic(Binary op, const float* a, const float* b, float* y, int64_t n, bool bs) {
  for (int64_t i = 0; i < n; ++i) {
    float bv = bs ? b[0] : b[i];
    switch (op) {
      case Binary::Add:
        y[i] = a[i] + bv;
        break;
      case Binary::Sub:
        y[i] = a[i] - bv;
        break;
      case Binary::Mul:
        y[i] = a[i] * bv;
        break;
      case Binary::Count:
        break;
    }
  }
}

void snake_generic(const float* x, float* y, int64_t n, float alpha) {
  float inv = 1.f / (alpha + 1e-9f);
  for (int64_t i = 0; i < n; ++i) {
    float s = std::sin(alpha * x[i]);
    y[i] = x[i] + inv * s * s;
  }
}

void layer_norm_generic(const float* x, float* y, int64_t n, const float* w, const float* b, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  float mean = float(sum / double(n));
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += double(x[i] - mean) * double(x[i] - mean);
  float rstd = float(1.0 / std::sqrt(var / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

void rms_norm_generic(const float* x, float* y, int64_t n, const float* w, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float r = float(1.0 / std::sqrt(ss / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = w ? x[i] * r * w[i] : x[i] * r;
}

void softmax_generic(const float* x, float* y, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == -std::numeric_limits<float>::infinity()) {  // all masked: PyTorch gives NaN; 0 here
    for (int64_t i = 0; i < n; ++i) y[i] = 0.f;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - mx);
    sum += y[i];
  }
  float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

void rope_generic(const float* x, float* y, int64_t half, const float* c, const float* s) {
  for (int64_t i = 0; i < half; ++i) {
    float a = x[i], b = x[i + half];
    y[i] = a * c[i] - b * s[i];
    y[i + half] = b * c[i] + a * s[i];
  }
}

void gemm_generic(const GemmTile& t) {
  for (int64_t i = 0; i < t.m; ++i) {
    float* c = t.c + i * t.c_rs;
    for (int64_t kk = 0; kk < t.k; ++kk) {
      float a = t.a[i * t.a_rs + kk * t.a_cs];
      const float* b = t.b + (t.b_off ? t.b_off[kk] : kk * t.b_rs);
      for (int64_t j = 0; j < t.n; ++j) c[j] += a * b[j];
    }
  }
}

inline float kv_at(const void* p, DType dt, int64_t i) {
  return dt == DType::F16 ? f16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Online softmax over keys, one query at a time.
void attn_generic(const AttnHead& h, int64_t q0, int64_t q1, float* scratch) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float* acc = scratch;  // [d]
  for (int64_t i = q0; i < q1; ++i) {
    const float* q = h.q + i * h.q_rs;
    int64_t kend = h.tk;
    if (h.causal) kend = std::min<int64_t>(kend, std::max<int64_t>(0, h.q_offset + i + 1));
    float m = ninf, l = 0.f;
    for (int64_t c = 0; c < h.d; ++c) acc[c] = 0.f;
    for (int64_t j = 0; j < kend; ++j) {
      float s = 0.f;
      const bool second = h.k2 && j >= h.split;  // AttnHead's second segment
      const void* kb = second ? h.k2 : h.k;
      const void* vb = second ? h.v2 : h.v;
      const int64_t kat = second ? (j - h.split) * h.k2_rs : j * h.k_rs;
      const int64_t vat = second ? (j - h.split) * h.v2_rs : j * h.v_rs;
      for (int64_t c = 0; c < h.d; ++c) s += q[c] * kv_at(kb, h.kv_dtype, kat + c);
      s *= h.scale;
      if (h.mask) s += h.mask[i * h.mask_rs + j];
      if (s == ninf) continue;
      float mn = std::max(m, s);
      float alpha = std::exp(m - mn);  // exp(-inf) = 0 on the first key
      float p = std::exp(s - mn);
      l = l * alpha + p;
      for (int64_t c = 0; c < h.d; ++c) acc[c] = acc[c] * alpha + p * kv_at(vb, h.kv_dtype, vat + c);
      m = mn;
    }
    float* o = h.o + i * h.o_rs;
    float inv = l > 0.f ? 1.f / l : 0.f;
    for (int64_t c = 0; c < h.d; ++c) o[c] = acc[c] * inv;
  }
}

// The reference: each query on its own (the shared segment gives nothing to share here).
void attn_multi_generic(const AttnHead* h, int nq, float* scratch) {
  for (int r = 0; r < nq; ++r) attn_generic(h[r], 0, 1, scratch);
}

void lstm_gates_generic(const float* g, float* h, float* c, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    float ig = sigmoidf(g[j]), fg = sigmoidf(g[H + j]);
    float gg = std::tanh(g[2 * H + j]), og = sigmoidf(g[3 * H + j]);
    c[j] = fg * c[j] + ig * gg;
    h[j] = og * std::tanh(c[j]);
  }
}

float dot_generic(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void to_f16_generic(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void kv_transpose_generic(const void* k, DType dt, int64_t k_rs, int64_t tk, int64_t c0, int64_t c1, float* kt,
                          int64_t kt_rs) {
  for (int64_t c = c0; c < c1; ++c) {
    float* dst = kt + c * kt_rs;
    if (dt == DType::F16) {
      const uint16_t* s = static_cast<const uint16_t*>(k) + c;
      for (int64_t j = 0; j < tk; ++j) dst[j] = f16_to_f32(s[j * k_rs]);
    } else {
      const float* s = static_cast<const float*>(k) + c;
      for (int64_t j = 0; j < tk; ++j) dst[j] = s[j * k_rs];
    }
    for (int64_t j = tk; j < kt_rs; ++j) dst[j] = 0.f;
  }
}

const NnKernels kGeneric = {
    Isa::Generic,       unary_generic,      binary_generic, snake_generic,  layer_norm_generic,
    rms_norm_generic,   softmax_generic,    rope_generic,   gemm_generic,   attn_generic,
    attn_multi_generic, lstm_gates_generic, dot_generic,    to_f16_generic, kv_transpose_generic,
};

}  // namespace

const NnKernels& nn_kernels_generic() { return kGeneric; }

const NnKernels& nn_kernels(Isa isa) {
  // Never hand out a table the CPU cannot run (an explicit isa argument may ask for more).
  static const Isa best = detected_isa();
  if (int(isa) > int(best)) isa = best;
#if CBX_X86_KERNELS
  switch (isa) {
    case Isa::Avx512:
      return nn_kernels_avx512();
    case Isa::Avx2:
      return nn_kernels_avx2();
    case Isa::Generic:
      break;
  }
#endif
  return kGeneric;
}

}  // namespace cbx
