// Vector math shared by the AVX2 and AVX-512 nn kernels, written once against a lane
// wrapper V (see nn_avx2.cpp / nn_avx512.cpp for the primitives V provides). Everything
// here is a template on V, and each V lives in an anonymous namespace, so the two
// instantiations never collide at link time although they use different ISA flags.
//
// Accuracy (vs the libm-based generic kernels; the tests check it with margin):
//   exp: ~2 ulp over [-87.3, 88.37]; exactly 0 below -87.34 (so exp(-inf) = 0), +inf above
//        88.72, and (88.37, 88.72] saturates at exp(88.37) = 2.6e38 (no 2^128 scale)
//   sin: abs err < 2e-7 for |x| < 1e4 (3-part Cody-Waite reduction by pi)
//   tanh/sigmoid: abs err < 2e-7;  erf: abs err < 2e-7 (Abramowitz-Stegun 7.1.26 form)
//   log (for softplus): ~2 ulp for normal inputs
#pragma once
#include <cstdint>

namespace cbx::nn_simd {

// Scalar helpers with internal linkage: the SIMD translation units are compiled with
// wider ISA flags, and a shared inline (std::min, std::fill) emitted out of line there
// could be picked by the linker for generic code.
static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t iclamp(int64_t v, int64_t lo, int64_t hi) { return imin(imax(v, lo), hi); }

template <class V>
inline typename V::R vexp(typename V::R x) {
  using R = typename V::R;
  const R hi = V::set1(88.3762626647949f), lo = V::set1(-87.3365447504f);
  R xc = V::min(V::max(x, lo), hi);
  R n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  // r = x - n ln2, ln2 split so n * ln2_hi is exact.
  R r = V::fma(n, V::set1(-0.693359375f), xc);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  // e^r on |r| <= ln2/2: Taylor to r^7 (truncation < 6e-9 relative).
  R p = V::set1(1.f / 5040.f);
  p = V::fma(p, r, V::set1(1.f / 720.f));
  p = V::fma(p, r, V::set1(1.f / 120.f));
  p = V::fma(p, r, V::set1(1.f / 24.f));
  p = V::fma(p, r, V::set1(1.f / 6.f));
  p = V::fma(p, r, V::set1(0.5f));
  p = V::fma(p, r, V::set1(1.f));
  p = V::fma(p, r, V::set1(1.f));
  R y = V::mul(p, V::pow2i(n));
  y = V::sel_lt(x, lo, V::zero(), y);
  y = V::sel_gt(x, V::set1(88.7228391f), V::set1(__builtin_inff()), y);
  return y;
}

// Natural log for x > 0 (normal numbers).
template <class V>
inline typename V::R vlog(typename V::R x) {
  using R = typename V::R;
  R e;
  R m = V::frexp1(x, e);  // x = m * 2^e, m in [1, 2)
  // Move m into [sqrt(1/2), sqrt(2)).
  R big = V::sel_gt(m, V::set1(1.41421356f), V::set1(1.f), V::zero());
  e = V::add(e, big);
  m = V::sel_gt(m, V::set1(1.41421356f), V::mul(m, V::set1(0.5f)), m);
  R f = V::sub(m, V::set1(1.f));
  R z = V::mul(f, f);
  R p = V::set1(7.0376836292E-2f);
  p = V::fma(p, f, V::set1(-1.1514610310E-1f));
  p = V::fma(p, f, V::set1(1.1676998740E-1f));
  p = V::fma(p, f, V::set1(-1.2420140846E-1f));
  p = V::fma(p, f, V::set1(1.4249322787E-1f));
  p = V::fma(p, f, V::set1(-1.6668057665E-1f));
  p = V::fma(p, f, V::set1(2.0000714765E-1f));
  p = V::fma(p, f, V::set1(-2.4999993993E-1f));
  p = V::fma(p, f, V::set1(3.3333331174E-1f));
  R y = V::mul(V::mul(p, f), z);
  y = V::fma(e, V::set1(-2.12194440e-4f), y);
  y = V::fma(z, V::set1(-0.5f), y);
  R r = V::add(f, y);
  return V::fma(e, V::set1(0.693359375f), r);
}

template <class V>
inline typename V::R vsin(typename V::R x) {
  using R = typename V::R;
  R n = V::round(V::mul(x, V::set1(0.318309886183790672f)));
  R r = V::fma(n, V::set1(-3.140625f), x);
  r = V::fma(n, V::set1(-9.67502593994140625e-4f), r);
  r = V::fma(n, V::set1(-1.509957990978376432e-7f), r);
  // sin on [-pi/2, pi/2]: odd Taylor series to r^11.
  R z = V::mul(r, r);
  R p = V::set1(-2.5052108385e-8f);
  p = V::fma(p, z, V::set1(2.7557319224e-6f));
  p = V::fma(p, z, V::set1(-1.9841269841e-4f));
  p = V::fma(p, z, V::set1(8.3333333333e-3f));
  p = V::fma(p, z, V::set1(-1.6666666667e-1f));
  R s = V::fma(V::mul(p, z), r, r);
  return V::xor_(s, V::odd_sign(n));  // sin(r + n pi) = (-1)^n sin(r)
}

template <class V>
inline typename V::R vsigmoid(typename V::R x) {
  const auto one = V::set1(1.f);
  return V::div(one, V::add(one, vexp<V>(V::sub(V::zero(), x))));
}

template <class V>
inline typename V::R vtanh(typename V::R x) {
  using R = typename V::R;
  R a = V::abs(x);
  R t = vexp<V>(V::mul(a, V::set1(-2.f)));
  R one = V::set1(1.f);
  R y = V::div(V::sub(one, t), V::add(one, t));
  // Small |x|: x - x^3/3 + 2x^5/15 avoids the cancellation in 1 - t.
  R z = V::mul(a, a);
  R ys = V::mul(a, V::fma(z, V::fma(z, V::set1(2.f / 15.f), V::set1(-1.f / 3.f)), one));
  y = V::sel_lt(a, V::set1(0.02f), ys, y);
  return V::or_(y, V::and_(x, V::set1(-0.f)));
}

template <class V>
inline typename V::R verf(typename V::R x) {
  using R = typename V::R;
  R a = V::abs(x);
  R one = V::set1(1.f);
  R t = V::div(one, V::fma(a, V::set1(0.3275911f), one));
  R p = V::set1(1.061405429f);
  p = V::fma(p, t, V::set1(-1.453152027f));
  p = V::fma(p, t, V::set1(1.421413741f));
  p = V::fma(p, t, V::set1(-0.284496736f));
  p = V::fma(p, t, V::set1(0.254829592f));
  p = V::mul(p, t);
  R y = V::sub(one, V::mul(p, vexp<V>(V::sub(V::zero(), V::mul(a, a)))));
  return V::or_(y, V::and_(x, V::set1(-0.f)));
}

// log(1 + exp(x)), = x above 20 as PyTorch's threshold.
template <class V>
inline typename V::R vsoftplus(typename V::R x) {
  using R = typename V::R;
  R u = vexp<V>(V::sub(V::zero(), V::abs(x)));  // (0, 1]
  R w = V::add(V::set1(1.f), u);
  // log1p(u) = log(w) - ((w - 1) - u) / w corrects the rounding of w.
  R l = V::sub(vlog<V>(w), V::div(V::sub(V::sub(w, V::set1(1.f)), u), w));
  R y = V::add(V::max(x, V::zero()), l);
  return V::sel_gt(x, V::set1(20.f), x, y);
}

// x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2); = x above 20.
template <class V>
inline typename V::R vmish(typename V::R x) {
  using R = typename V::R;
  R e = vexp<V>(V::min(x, V::set1(20.f)));
  R n = V::mul(e, V::add(e, V::set1(2.f)));
  R y = V::div(V::mul(x, n), V::add(n, V::set1(2.f)));
  return V::sel_gt(x, V::set1(20.f), x, y);
}

// y[i] = f(x[i]) over n floats, tail through masked loads/stores.
template <class V, class F>
inline void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(x + i)));
  if (i < n) V::store_n(y + i, f(V::load_n(x + i, n - i)), n - i);
}

}  // namespace cbx::nn_simd
