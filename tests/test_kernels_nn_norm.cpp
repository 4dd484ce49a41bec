// layer_norm, rms_norm, softmax, rope: front-end (CBX_DEBUG_FORCE_ISA) vs generic kernel vs a
// double-precision reference, odd sizes, strided rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "nn_test_util.h"
#include "ops/norm.h"

using namespace cbx;
using nn_test::Buf;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Normalised outputs are O(1): tolerance 2e-5 absolute (f32 sums over up to 4099 terms
// against double sums; the SIMD kernels sum in a different order than the generic one).
constexpr double kNormTol = 2e-5;

void ref_layer_norm(const float* x, double* y, int64_t n, const float* w, const float* b, double eps) {
  double m = 0, v = 0;
  for (int64_t i = 0; i < n; ++i) m += x[i];
  m /= double(n);
  for (int64_t i = 0; i < n; ++i) v += (x[i] - m) * (x[i] - m);
  v /= double(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) / std::sqrt(v + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
}

}  // namespace

TEST(NnNorm, LayerNormAndRmsNorm) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  for (int64_t D : {1, 7, 80, 513, 4099}) {
    for (int64_t R : {1, 3, 40}) {
      Buf x({R, D}, uint32_t(D + R), -2, 3), w({D}, 2, 0.5f, 1.5f), b({D}, 3), y({R, D}), g({R, D});
      std::vector<double> ref(size_t(R * D));
      for (int64_t r = 0; r < R; ++r) ref_layer_norm(x.p() + r * D, ref.data() + r * D, D, w.p(), b.p(), 1e-5);
      layer_norm(pool(), x.t, w.t, b.t, 1e-5f, y.t);
      layer_norm(pool(), x.t, w.t, b.t, 1e-5f, g.t, Isa::Generic);
      EXPECT_LE(nn_test::max_abs_diff(y.p(), ref.data(), ref.size()), kNormTol) << "layer_norm D=" << D;
      EXPECT_LE(nn_test::max_abs_diff(y.p(), g.p(), ref.size()), kNormTol) << "layer_norm D=" << D;
      // No affine parameters.
      for (int64_t r = 0; r < R; ++r) ref_layer_norm(x.p() + r * D, ref.data() + r * D, D, nullptr, nullptr, 1e-12);
      layer_norm(pool(), x.t, Tensor{}, Tensor{}, 1e-12f, y.t);
      if (D > 1) {
        EXPECT_LE(nn_test::max_abs_diff(y.p(), ref.data(), ref.size()), kNormTol) << D;
      }

      for (int64_t r = 0; r < R; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += double(x.v[size_t(r * D + i)]) * x.v[size_t(r * D + i)];
        double s = 1 / std::sqrt(ss / double(D) + 1e-5);
        for (int64_t i = 0; i < D; ++i) ref[size_t(r * D + i)] = x.v[size_t(r * D + i)] * s * w.v[size_t(i)];
      }
      rms_norm(pool(), x.t, w.t, 1e-5f, y.t);
      rms_norm(pool(), x.t, w.t, 1e-5f, g.t, Isa::Generic);
      EXPECT_LE(nn_test::max_abs_diff(y.p(), ref.data(), ref.size()), kNormTol) << "rms_norm D=" << D;
      EXPECT_LE(nn_test::max_abs_diff(y.p(), g.p(), ref.size()), kNormTol) << "rms_norm D=" << D;
    }
  }
}

// LayerNorm over channels of [B, C, T] equals layer_norm on the transposed data.
TEST(NnNorm, LayerNormChannels) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  for (auto [B, C, T] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 13}, {2, 256, 1100}, {1, 80, 1}}) {
    Buf x({B, C, T}, uint32_t(C + T), -2, 3), w({C}, 2, 0.5f, 1.5f), b({C}, 3), y({B, C, T}), g({B, C, T});
    layer_norm_channels(pool(), x.t, w.t, b.t, 1e-5f, y.t);
    layer_norm_channels(pool(), x.t, w.t, b.t, 1e-5f, g.t, Isa::Generic);
    std::vector<double> ref(x.size());
    std::vector<float> col(static_cast<size_t>(C));
    std::vector<double> out(static_cast<size_t>(C));
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < C; ++c) col[size_t(c)] = x.v[size_t((bb * C + c) * T + t)];
        ref_layer_norm(col.data(), out.data(), C, w.p(), b.p(), 1e-5);
        for (int64_t c = 0; c < C; ++c) ref[size_t((bb * C + c) * T + t)] = out[size_t(c)];
      }
    EXPECT_LE(nn_test::max_abs_diff(y.p(), ref.data(), ref.size()), kNormTol) << C << "x" << T;
    EXPECT_LE(nn_test::max_abs_diff(y.p(), g.p(), ref.size()), kNormTol) << C << "x" << T;
    layer_norm_channels(pool(), x.t, w.t, b.t, 1e-5f, x.t);  // in place
    EXPECT_LE(nn_test::max_abs_diff(x.p(), ref.data(), ref.size()), kNormTol);
  }
}

// Probabilities: absolute tolerance 1e-6 (exp is ~2 ulp; sums in f32).
TEST(NnNorm, SoftmaxInPlaceWithMaskedEntries) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t D : {1, 5, 17, 1000, 3001}) {
    const int64_t R = 6;
    Buf x({R, D}, uint32_t(D), -20, 20), g({R, D});
    for (int64_t i = 0; i < D; i += 3) x.v[size_t(i)] = ninf;   // row 0: some masked
    for (int64_t i = 0; i < D; ++i) x.v[size_t(D + i)] = ninf;  // row 1: all masked -> zeros
    std::vector<double> ref(size_t(R * D));
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = x.p() + r * D;
      double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < D; ++i) m = std::max(m, double(xr[i]));
      for (int64_t i = 0; i < D; ++i) s += m == -INFINITY ? 0 : std::exp(xr[i] - m);
      for (int64_t i = 0; i < D; ++i) ref[size_t(r * D + i)] = m == -INFINITY ? 0 : std::exp(xr[i] - m) / s;
    }
    softmax(pool(), x.t, g.t, Isa::Generic);
    softmax(pool(), x.t, x.t);  // in place
    EXPECT_LE(nn_test::max_abs_diff(x.p(), ref.data(), ref.size()), 1e-6) << D;
    EXPECT_LE(nn_test::max_abs_diff(x.p(), g.p(), ref.size()), 1e-6) << D;
  }
}

// RoPE on [T, H, D] and on an [H, T, D] tensor seen through transpose(0, 1); positions
// with gaps; llama3-style frequency factors. The angle is f32 p * inv_freq as in PyTorch,
// so the reference forms it the same way and the tolerance is 2e-6 * |x|max.
TEST(NnNorm, RopeNeoxLayouts) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const int64_t T = 37, H = 3, D = 64, half = D / 2;
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t * 7 + 1000);
  Tensor pt = make_tensor(DType::I32, {T}, pos.data(), pos.size() * 4);
  Buf ff({half}, 9, 1.f, 8.f);
  for (bool use_ff : {false, true}) {
    const float theta = use_ff ? 500000.f : 10000.f;
    Buf x({T, H, D}, 5), y({T, H, D}), g({T, H, D});
    Tensor fft = use_ff ? ff.t : Tensor{};
    rope(pool(), x.t, pt, theta, fft, y.t);
    rope(pool(), x.t, pt, theta, fft, g.t, Isa::Generic);
    double worst = 0, worst_g = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          float inv = float(1.0 / std::pow(double(theta), double(2 * i) / double(D)));
          if (use_ff) inv /= ff.v[size_t(i)];
          double a = double(float(pos[size_t(t)]) * inv);
          const float* xr = x.p() + (t * H + h) * D;
          double r0 = xr[i] * std::cos(a) - xr[i + half] * std::sin(a);
          double r1 = xr[i + half] * std::cos(a) + xr[i] * std::sin(a);
          size_t o = size_t((t * H + h) * D + i);
          worst = std::max({worst, std::fabs(y.v[o] - r0), std::fabs(y.v[o + size_t(half)] - r1)});
          worst_g = std::max({worst_g, std::fabs(double(y.v[o]) - g.v[o]),
                              std::fabs(double(y.v[o + size_t(half)]) - g.v[o + size_t(half)])});
        }
    EXPECT_LE(worst, 2e-6) << "ff " << use_ff;
    EXPECT_LE(worst_g, 2e-6) << "ff " << use_ff;

    // Same data laid out [H, T, D], rotated in place through a [T, H, D] view.
    Buf xh({H, T, D});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D; ++i) xh.v[size_t((h * T + t) * D + i)] = x.v[size_t((t * H + h) * D + i)];
    Tensor v = transpose(xh.t, 0, 1);
    rope(pool(), v, pt, theta, fft, v);
    double d = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D; ++i)
          d = std::max(d, std::fabs(double(xh.v[size_t((h * T + t) * D + i)]) - y.v[size_t((t * H + h) * D + i)]));
    EXPECT_EQ(d, 0.0);
  }
}

TEST(NnNorm, ValidationErrors) {
  Buf x({3, 8}), y({3, 8}), w({7});
  try {
    layer_norm(pool(), x.t, w.t, Tensor{}, 1e-5f, y.t);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layer_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("[7]"), std::string::npos) << m;
  }
  std::vector<int32_t> pos(2);
  Tensor pt = make_tensor(DType::I32, {2}, pos.data(), 8);
  EXPECT_THROW(rope(pool(), x.t, pt, 1e4f, Tensor{}, y.t), Error);  // 2 positions for T=3
  Buf y2({3, 9});
  EXPECT_THROW(softmax(pool(), x.t, y2.t), Error);
}
