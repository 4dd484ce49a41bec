// SIMD nn kernels written once against a lane wrapper V; nn_avx2.cpp and nn_avx512.cpp
// include this after defining V (in an anonymous namespace) and build their table with
// make_table<V>(). See nn_simd_math.h for why everything here is a template.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/nn.h"
#include "kernels/nn_simd_math.h"

namespace cbx::nn_simd {

template <class V>
void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store_h(y + i, V::load(x + i));
  if (i < n) V::store_h_n(y + i, V::load_n(x + i, n - i), n - i);
}

// kv_transpose in blocks of W keys: each key's dims [c0, c1) widened with vector loads into an
// L1 tile [W][c1 - c0], then written out column by column (W consecutive floats per dim).
template <class V>
void kv_transpose(const void* k, DType dt, int64_t k_rs, int64_t tk, int64_t c0, int64_t c1, float* kt, int64_t kt_rs) {
  constexpr int W = V::W;
  constexpr int64_t kMaxDims = 128;  // tile width per pass
  alignas(64) float tile[W * kMaxDims];
  for (int64_t cb = c0; cb < c1; cb += kMaxDims) {
    const int64_t nc = std::min(kMaxDims, c1 - cb);
    for (int64_t j0 = 0; j0 < tk; j0 += W) {
      const int64_t nj = std::min<int64_t>(W, tk - j0);
      for (int64_t jj = 0; jj < nj; ++jj) {
        float* t = tile + jj * nc;
        const int64_t at = (j0 + jj) * k_rs + cb;
        int64_t c = 0;
        if (dt == DType::F16) {
          const uint16_t* s = static_cast<const uint16_t*>(k) + at;
          for (; c + W <= nc; c += W) V::store(t + c, V::load_h(s + c));
          if (c < nc) V::store_n(t + c, V::load_h_n(s + c, nc - c), nc - c);
        } else {
          const float* s = static_cast<const float*>(k) + at;
          for (; c + W <= nc; c += W) V::store(t + c, V::load(s + c));
          if (c < nc) V::store_n(t + c, V::load_n(s + c, nc - c), nc - c);
        }
      }
      for (int64_t c = 0; c < nc; ++c) {
        float* dst = kt + (cb + c) * kt_rs + j0;
        for (int64_t jj = 0; jj < nj; ++jj) dst[jj] = tile[jj * nc + c];
      }
    }
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t j = tk; j < kt_rs; ++j) kt[(cb + c) * kt_rs + j] = 0.f;
  }
}

template <class V>
void unary(Unary op, const float* x, float* y, int64_t n, float p0, float p1) {
  using R = typename V::R;
  const R vp0 = V::set1(p0), vp1 = V::set1(p1), zero = V::zero(), half = V::set1(0.5f);
  const R one = V::set1(1.f);
  switch (op) {
    case Unary::Copy:
      if (x != y) std::memmove(y, x, size_t(n) * sizeof(float));
      return;
    case Unary::Scale:
      return map1<V>(x, y, n, [&](R v) { return V::mul(v, vp0); });
    case Unary::Affine:
      return map1<V>(x, y, n, [&](R v) { return V::fma(v, vp0, vp1); });
    case Unary::Relu:
      return map1<V>(x, y, n, [&](R v) { return V::max(v, zero); });
    case Unary::LeakyRelu:
      return map1<V>(x, y, n, [&](R v) { return V::sel_lt(v, zero, V::mul(v, vp0), v); });
    case Unary::Elu:
      return map1<V>(x, y, n, [&](R v) {
        R e = V::mul(vp0, V::sub(vexp<V>(V::min(v, zero)), one));
        return V::sel_gt(v, zero, v, e);
      });
    case Unary::Gelu:
      return map1<V>(x, y, n, [&](R v) {
        R e = verf<V>(V::mul(v, V::set1(0.70710678118654752f)));
        return V::mul(V::mul(half, v), V::add(one, e));
      });
    case Unary::GeluTanh:
      return map1<V>(x, y, n, [&](R v) {
        R in = V::mul(V::set1(0.79788456080286536f), V::fma(V::mul(V::set1(0.044715f), V::mul(v, v)), v, v));
        return V::mul(V::mul(half, v), V::add(one, vtanh<V>(in)));
      });
    case Unary::Silu:
      return map1<V>(x, y, n, [&](R v) { return V::mul(v, vsigmoid<V>(v)); });
    case Unary::Mish:
      return map1<V>(x, y, n, [&](R v) { return vmish<V>(v); });
    case Unary::Tanh:
      return map1<V>(x, y, n, [&](R v) { return vtanh<V>(v); });
    case Unary::Sigmoid:
      return map1<V>(x, y, n, [&](R v) { return vsigmoid<V>(v); });
    case Unary::Softplus:
      return map1<V>(x, y, n, [&](R v) { return vsoftplus<V>(v); });
    case Unary::Exp:
      return map1<V>(x, y, n, [&](R v) { return vexp<V>(v); });
    case Unary::Sin:
      return map1<V>(x, y, n, [&](R v) { return vsin<V>(v); });
    case Unary::Clamp:
      return map1<V>(x, y, n, [&](R v) { return V::min(V::max(v, vp0), vp1); });
    case Unary::Abs:
      return map1<V>(x, y, n, [&](R v) { return V::abs(v); });
    case Unary::Count:
      break;
  }
}

template <class V, class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, bool bs, F f) {
  using R = typename V::R;
  int64_t i = 0;
  if (bs) {
    R bv = V::set1(b[0]);
    for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(a + i), bv));
    if (i < n) V::store_n(y + i, f(V::load_n(a + i, n - i), bv), n - i);
    return;
  }
  for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(a + i), V::load(b + i)));
  if (i < n) V::store_n(y + i, f(V::load_n(a + i, n - i), V::load_n(b + i, n - i)), n - i);
}

template <class V>
void binary(Binary op, const float* a, const float* b, float* y, int64_t n, bool bs) {
  using R = typename V::R;
  switch (op) {
    case Binary::Add:
      return map2<V>(a, b, y, n, bs, [](R p, R q) { return V::add(p, q); });
    case Binary::Sub:
      return map2<V>(a, b, y, n, bs, [](R p, R q) { return V::sub(p, q); });
    case Binary::Mul:
      return map2<V>(a, b, y, n, bs, [](R p, R q) { return V::mul(p, q); });
    case Binary::Count:
      break;
  }
}

template <class V>
void snake(const float* x, float* y, int64_t n, float alpha) {
  using R = typename V::R;
  const R va = V::set1(alpha), inv = V::set1(1.f / (alpha + 1e-9f));
  map1<V>(x, y, n, [&](R v) {
    R s = vsin<V>(V::mul(va, v));
    return V::fma(V::mul(s, s), inv, v);
  });
}

template <class V>
float sum(const float* x, int64_t n) {
  auto acc = V::zero();
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) acc = V::add(acc, V::load(x + i));
  if (i < n) acc = V::add(acc, V::load_n(x + i, n - i));
  return V::reduce_add(acc);
}

template <class V>
float sum_sq_dev(const float* x, int64_t n, float mean) {
  auto acc = V::zero();
  const auto m = V::set1(mean);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    auto d = V::sub(V::load(x + i), m);
    acc = V::fma(d, d, acc);
  }
  if (i < n) {
    auto d = V::keep_n(V::sub(V::load_n(x + i, n - i), m), n - i);
    acc = V::fma(d, d, acc);
  }
  return V::reduce_add(acc);
}

template <class V>
float dot(const float* a, const float* b, int64_t n) {
  auto a0 = V::zero(), a1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * V::W <= n; i += 2 * V::W) {
    a0 = V::fma(V::load(a + i), V::load(b + i), a0);
    a1 = V::fma(V::load(a + i + V::W), V::load(b + i + V::W), a1);
  }
  for (; i + V::W <= n; i += V::W) a0 = V::fma(V::load(a + i), V::load(b + i), a0);
  if (i < n) a1 = V::fma(V::load_n(a + i, n - i), V::load_n(b + i, n - i), a1);
  return V::reduce_add(V::add(a0, a1));
}

template <class V>
void layer_norm(const float* x, float* y, int64_t n, const float* w, const float* b, float eps) {
  using R = typename V::R;
  float mean = sum<V>(x, n) / float(n);
  float var = sum_sq_dev<V>(x, n, mean) / float(n);
  float rstd = 1.f / std::sqrt(var + eps);
  const R vm = V::set1(mean), vr = V::set1(rstd);
  int64_t i = 0;
  auto one = [&](R v, int64_t at, int64_t cnt) {
    R t = V::mul(V::sub(v, vm), vr);
    if (w) t = V::mul(t, cnt == V::W ? V::load(w + at) : V::load_n(w + at, cnt));
    if (b) t = V::add(t, cnt == V::W ? V::load(b + at) : V::load_n(b + at, cnt));
    return t;
  };
  for (; i + V::W <= n; i += V::W) V::store(y + i, one(V::load(x + i), i, V::W));
  if (i < n) V::store_n(y + i, one(V::load_n(x + i, n - i), i, n - i), n - i);
}

template <class V>
void rms_norm(const float* x, float* y, int64_t n, const float* w, float eps) {
  float ss = dot<V>(x, x, n);
  const auto r = V::set1(1.f / std::sqrt(ss / float(n) + eps));
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    auto t = V::mul(V::load(x + i), r);
    V::store(y + i, w ? V::mul(t, V::load(w + i)) : t);
  }
  if (i < n) {
    auto t = V::mul(V::load_n(x + i, n - i), r);
    V::store_n(y + i, w ? V::mul(t, V::load_n(w + i, n - i)) : t, n - i);
  }
}

template <class V>
float max_of(const float* x, int64_t n) {
  auto m = V::set1(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) m = V::max(m, V::load(x + i));
  float r = V::reduce_max(m);
  for (; i < n; ++i) r = (x[i] > r ? x[i] : r);
  return r;
}

// y = exp(x - m) in place or not; returns the sum.
template <class V>
float exp_shift_sum(const float* x, float* y, int64_t n, float m) {
  const auto vm = V::set1(m);
  auto acc = V::zero();
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    auto e = vexp<V>(V::sub(V::load(x + i), vm));
    V::store(y + i, e);
    acc = V::add(acc, e);
  }
  if (i < n) {
    auto e = vexp<V>(V::sub(V::load_n(x + i, n - i), vm));
    V::store_n(y + i, e, n - i);
    acc = V::add(acc, V::keep_n(e, n - i));
  }
  return V::reduce_add(acc);
}

template <class V>
void softmax(const float* x, float* y, int64_t n) {
  float mx = max_of<V>(x, n);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::memset(y, 0, size_t(n) * sizeof(float));
    return;
  }
  float s = exp_shift_sum<V>(x, y, n, mx);
  unary<V>(Unary::Scale, y, y, n, 1.f / s, 0.f);
}

template <class V>
void rope(const float* x, float* y, int64_t half, const float* c, const float* s) {
  int64_t i = 0;
  for (; i < half; i += V::W) {
    int64_t cnt = imin(V::W, half - i);
    auto a = V::load_n(x + i, cnt), b = V::load_n(x + half + i, cnt);
    auto vc = V::load_n(c + i, cnt), vs = V::load_n(s + i, cnt);
    V::store_n(y + i, V::sub(V::mul(a, vc), V::mul(b, vs)), cnt);
    V::store_n(y + half + i, V::fma(b, vc, V::mul(a, vs)), cnt);
  }
}

template <class V>
void lstm_gates(const float* g, float* h, float* c, int64_t H) {
  for (int64_t j = 0; j < H; j += V::W) {
    int64_t cnt = imin(V::W, H - j);
    auto ig = vsigmoid<V>(V::load_n(g + j, cnt));
    auto fg = vsigmoid<V>(V::load_n(g + H + j, cnt));
    auto gg = vtanh<V>(V::load_n(g + 2 * H + j, cnt));
    auto og = vsigmoid<V>(V::load_n(g + 3 * H + j, cnt));
    auto cn = V::fma(fg, V::load_n(c + j, cnt), V::mul(ig, gg));
    V::store_n(c + j, cn, cnt);
    V::store_n(h + j, V::mul(og, vtanh<V>(cn)), cnt);
  }
}

}  // namespace cbx::nn_simd
