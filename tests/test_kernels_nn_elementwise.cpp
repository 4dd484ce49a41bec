// Elementwise ops, activations, snake, broadcasting binary ops, get_rows, concat.
// Each op runs through its front-end (ISA from CBX_DEBUG_FORCE_ISA) and is compared with the
// generic kernel (front-end with Isa::Generic) and with a double-precision reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/nn.h"
#include "nn_test_util.h"
#include "ops/elementwise.h"

using namespace cbx;
using nn_test::Buf;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

using OpFn = std::function<void(const Tensor&, Tensor&, Isa)>;

struct UnaryCase {
  const char* name;
  OpFn op;
  double (*ref)(double);
  float lo, hi;
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double softplus_ref(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

// Tolerance for every unary op: |y - ref| <= 4e-6 * (1 + |ref|) (f32 libm is ~1 ulp, the
// SIMD polynomials ~2 ulp for exp/log and < 2e-7 absolute for sin/tanh/erf).
constexpr double kUnaryTol = 4e-6;

void check_unary(const UnaryCase& c, int64_t rows, int64_t cols, uint32_t seed) {
  Buf x({rows, cols}, seed, c.lo, c.hi), y({rows, cols}), g({rows, cols});
  // Special points in the first row.
  const float special[] = {0.f, -0.f, 1e-4f, -1e-4f, 0.015f, -0.025f, c.hi, c.lo};
  for (int i = 0; i < 8 && i < cols; ++i) x.v[size_t(i)] = std::clamp(special[i], c.lo, c.hi);
  c.op(x.t, y.t, active_isa());
  c.op(x.t, g.t, Isa::Generic);
  double worst_ref = 0, worst_gen = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double r = c.ref(double(x.v[i]));
    worst_ref = std::max(worst_ref, std::fabs(y.v[i] - r) / (1 + std::fabs(r)));
    worst_gen = std::max(worst_gen, std::fabs(double(y.v[i]) - g.v[i]) / (1 + std::fabs(r)));
  }
  EXPECT_LE(worst_ref, kUnaryTol) << c.name << " vs double reference, " << rows << "x" << cols;
  EXPECT_LE(worst_gen, kUnaryTol) << c.name << " vs generic kernel";
}

std::vector<UnaryCase> unary_cases() {
  auto& P = pool();
  return {
      {"relu", [&](const Tensor& x, Tensor& y, Isa i) { relu(P, x, y, i); }, [](double x) { return x > 0 ? x : 0; }, -5,
       5},
      {"leaky_relu", [&](const Tensor& x, Tensor& y, Isa i) { leaky_relu(P, x, y, 0.1f, i); },
       [](double x) { return x >= 0 ? x : double(0.1f) * x; }, -5, 5},
      {"elu", [&](const Tensor& x, Tensor& y, Isa i) { elu(P, x, y, 1.f, i); },
       [](double x) { return x > 0 ? x : std::expm1(x); }, -8, 5},
      {"gelu", [&](const Tensor& x, Tensor& y, Isa i) { gelu(P, x, y, i); }, gelu_ref, -8, 8},
      {"gelu_tanh", [&](const Tensor& x, Tensor& y, Isa i) { gelu_tanh(P, x, y, i); }, gelu_tanh_ref, -8, 8},
      {"silu", [&](const Tensor& x, Tensor& y, Isa i) { silu(P, x, y, i); },
       [](double x) { return x * sigmoid_ref(x); }, -30, 30},
      {"mish", [&](const Tensor& x, Tensor& y, Isa i) { mish(P, x, y, i); },
       [](double x) { return x * std::tanh(softplus_ref(x)); }, -30, 30},
      {"tanh", [&](const Tensor& x, Tensor& y, Isa i) { tanh_op(P, x, y, i); }, [](double x) { return std::tanh(x); },
       -12, 12},
      {"sigmoid", [&](const Tensor& x, Tensor& y, Isa i) { sigmoid(P, x, y, i); }, sigmoid_ref, -40, 40},
      {"softplus", [&](const Tensor& x, Tensor& y, Isa i) { softplus(P, x, y, i); }, softplus_ref, -30, 30},
      {"exp", [&](const Tensor& x, Tensor& y, Isa i) { exp_op(P, x, y, i); }, [](double x) { return std::exp(x); }, -80,
       4},
      {"sin", [&](const Tensor& x, Tensor& y, Isa i) { sin_op(P, x, y, i); }, [](double x) { return std::sin(x); },
       -200, 200},
      {"scale", [&](const Tensor& x, Tensor& y, Isa i) { scale(P, x, y, 0.37f, i); },
       [](double x) { return double(0.37f) * x; }, -5, 5},
      {"affine", [&](const Tensor& x, Tensor& y, Isa i) { affine(P, x, y, 2.f, -0.5f, i); },
       [](double x) { return 2 * x - 0.5; }, -5, 5},
      {"clamp", [&](const Tensor& x, Tensor& y, Isa i) { clamp(P, x, y, -0.99f, 0.99f, i); },
       [](double x) { return std::min(std::max(x, double(-0.99f)), double(0.99f)); }, -2, 2},
      {"abs", [&](const Tensor& x, Tensor& y, Isa i) { abs_op(P, x, y, i); }, [](double x) { return std::fabs(x); }, -3,
       3},
      {"copy", [&](const Tensor& x, Tensor& y, Isa i) { copy_tensor(P, x, y, i); }, [](double x) { return x; }, -5, 5},
  };
}

}  // namespace

TEST(NnElementwise, UnaryOpsOddSizes) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  uint32_t seed = 1;
  for (const auto& c : unary_cases()) {
    check_unary(c, 3, 37, seed++);
    check_unary(c, 1, 5, seed++);
    check_unary(c, 2, 40000, seed++);  // threaded, long rows split into chunks
  }
}

TEST(NnElementwise, InPlaceAndStridedRows) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  Buf x({6, 50}, 7, -3, 3);
  std::vector<float> orig = x.v;
  // View of columns [5, 45) of every row: strided rows, contiguous innermost.
  Tensor v = slice(x.t, 1, 5, 40);
  silu(pool(), v, v);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 50; ++c) {
      double a = orig[size_t(r * 50 + c)];
      double want = (c >= 5 && c < 45) ? a / (1 + std::exp(-a)) : a;
      EXPECT_NEAR(x.v[size_t(r * 50 + c)], want, 4e-6 * (1 + std::fabs(want)));
    }
}

// Snake as in HiFT: y = x + sin^2(alpha x) / (alpha + 1e-9). Tolerance 4e-6 * (1 + |ref|).
TEST(NnElementwise, SnakePerChannel) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  for (int64_t T : {1, 13, 3001}) {
    const int64_t C = 5;
    Buf x({2, C, T}, 3, -4, 4), a({C}, 4, 0.1f, 3.f), y({2, C, T}), g({2, C, T});
    snake(pool(), x.t, a.t, y.t);
    snake(pool(), x.t, a.t, g.t, Isa::Generic);
    for (size_t i = 0; i < x.size(); ++i) {
      double al = a.v[(i / size_t(T)) % C], xv = x.v[i];
      double s = std::sin(al * xv);
      double ref = xv + s * s / (al + 1e-9);
      EXPECT_NEAR(y.v[i], ref, 4e-6 * (1 + std::fabs(ref))) << i;
      EXPECT_NEAR(y.v[i], g.v[i], 4e-6 * (1 + std::fabs(ref))) << i;
    }
  }
}

TEST(NnElementwise, ChannelAffine) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  Buf x({4, 33}, 5), s({4}, 6), b({4}, 7), y({4, 33});
  channel_affine(pool(), x.t, s.t, b.t, y.t);
  for (size_t i = 0; i < x.size(); ++i) {
    size_t c = i / 33;
    EXPECT_NEAR(y.v[i], double(x.v[i]) * s.v[c] + b.v[c], 1e-6);
  }
}

// add/sub/mul are exact in f32 (one rounding), so the tolerance is 1 ulp of the result.
TEST(NnElementwise, BinaryBroadcasting) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const int64_t B = 2, R = 3, C = 37;
  Buf a({B, R, C}, 11);
  struct BCase {
    std::initializer_list<int64_t> shape;
  };
  const std::vector<std::vector<int64_t>> shapes = {{B, R, C}, {C}, {R, 1}, {1}, {B, 1, C}, {B, R, 1}};
  for (const auto& sh : shapes) {
    std::vector<float> bv;
    int64_t n = 1;
    for (auto d : sh) n *= d;
    bv.resize(size_t(n));
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.25f * float(i % 7) - 0.6f;
    Tensor bt = make_tensor(DType::F32, int(sh.size()), sh.data(), bv.data(), bv.size() * 4);
    for (int op = 0; op < 3; ++op) {
      Buf y({B, R, C});
      if (op == 0) add(pool(), a.t, bt, y.t);
      if (op == 1) sub(pool(), a.t, bt, y.t);
      if (op == 2) mul(pool(), a.t, bt, y.t);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t c = 0; c < C; ++c) {
            int64_t idx[3] = {i, r, c};
            int64_t bo = 0;
            int lead = 3 - int(sh.size());
            for (int d = 0; d < int(sh.size()); ++d) bo = bo * sh[size_t(d)] + (sh[size_t(d)] == 1 ? 0 : idx[lead + d]);
            float av = a.v[size_t((i * R + r) * C + c)], b = bv[size_t(bo)];
            float want = op == 0 ? av + b : op == 1 ? av - b : av * b;
            EXPECT_FLOAT_EQ(y.v[size_t((i * R + r) * C + c)], want) << "op " << op << " b ndim " << sh.size();
          }
    }
  }
  // In place a += b (row vector), large enough to be threaded.
  Buf big({70, 1000}, 12), row({1000}, 13);
  std::vector<float> orig = big.v;
  add(pool(), big.t, row.t, big.t);
  for (size_t i = 0; i < big.size(); ++i) EXPECT_FLOAT_EQ(big.v[i], orig[i] + row.v[i % 1000]);
}

TEST(NnElementwise, GetRowsAllTypes) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const int64_t V = 9, D = 64;
  Buf src({V, D}, 21);
  std::vector<int32_t> ids = {3, 0, 8, 3, 5};
  Tensor idt = make_tensor(DType::I32, {5}, ids.data(), ids.size() * 4);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    const TypeTraits& tr = type_traits(dt);
    std::vector<uint8_t> tab(size_t(V) * dtype_row_bytes(dt, D));
    tr.from_float(src.p(), tab.data(), V * D);
    Tensor tt = make_tensor(dt, {V, D}, tab.data(), tab.size());
    std::vector<float> deq(size_t(V * D));
    tr.to_float(tab.data(), deq.data(), V * D);
    Buf out({5, D});
    get_rows(tt, idt, out.t);
    for (int i = 0; i < 5; ++i)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_EQ(out.v[size_t(i * D + d)], deq[size_t(ids[size_t(i)] * D + d)]) << tr.name;
  }
  std::vector<int32_t> bad = {9};
  Tensor bt = make_tensor(DType::I32, {1}, bad.data(), 4);
  Buf out1({1, D});
  EXPECT_THROW(get_rows(src.t, bt, out1.t), Error);
}

TEST(NnElementwise, ConcatAnyDim) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  Buf a({2, 3, 4}, 31), b({2, 5, 4}, 32), out({2, 8, 4});
  concat({a.t, b.t}, 1, out.t);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 4; ++k) {
        float want = j < 3 ? a.v[size_t((i * 3 + j) * 4 + k)] : b.v[size_t((i * 5 + j - 3) * 4 + k)];
        EXPECT_EQ(out.v[size_t((i * 8 + j) * 4 + k)], want);
      }
  Buf c({2, 3, 1}, 33), out2({2, 3, 5});
  concat({a.t, c.t}, -1, out2.t);
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(out2.v[size_t(i * 5 + k)], k < 4 ? a.v[size_t(i * 4 + k)] : c.v[size_t(i)]);
  Buf bad({2, 8, 3});
  EXPECT_THROW(concat({a.t, b.t}, 1, bad.t), Error);
}

TEST(NnElementwise, CopyStridedAndUpsample) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  Buf x({5, 7}, 41), xt({7, 5});
  Tensor tv = transpose(x.t, 0, 1);
  copy_strided(tv, xt.t);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_EQ(xt.v[size_t(j * 5 + i)], x.v[size_t(i * 7 + j)]);
  Buf up({5, 21});
  upsample_nearest(x.t, 3, up.t);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 21; ++j) EXPECT_EQ(up.v[size_t(i * 21 + j)], x.v[size_t(i * 7 + j / 3)]);
  Buf bad({5, 20});
  EXPECT_THROW(upsample_nearest(x.t, 3, bad.t), Error);
  EXPECT_THROW(copy_strided(tv, x.t), Error);
}

TEST(NnElementwise, Pad1dModes) {
  Buf x({2, 5}, 51), y({2, 9});
  const int64_t L = 3, R = 1;
  // F.pad(x, (3, 1), mode) reference indices for T = 5.
  const int reflect_idx[9] = {3, 2, 1, 0, 1, 2, 3, 4, 3};
  const int replicate_idx[9] = {0, 0, 0, 0, 1, 2, 3, 4, 4};
  for (PadMode m : {PadMode::Zero, PadMode::Reflect, PadMode::Replicate}) {
    pad1d(x.t, L, R, m, y.t);
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 9; ++i) {
        float want = m == PadMode::Zero      ? (i >= L && i < L + 5 ? x.v[size_t(r * 5 + i - L)] : 0.f)
                     : m == PadMode::Reflect ? x.v[size_t(r * 5 + reflect_idx[i])]
                                             : x.v[size_t(r * 5 + replicate_idx[i])];
        EXPECT_EQ(y.v[size_t(r * 9 + i)], want) << int(m) << " " << i;
      }
  }
  Buf y2({2, 15});
  EXPECT_THROW(pad1d(x.t, 5, 5, PadMode::Reflect, y2.t), Error);
}

// Double accumulation, rounded once: tolerance 1e-6 relative.
TEST(NnElementwise, RowMeanStd) {
  Buf x({3, 4, 101}, 61, -2, 5), m({3, 4}), sd({3, 4});
  row_mean_std(x.t, m.t, sd.t);
  for (int r = 0; r < 12; ++r) {
    double s = 0, v = 0;
    for (int t = 0; t < 101; ++t) s += x.v[size_t(r * 101 + t)];
    s /= 101;
    for (int t = 0; t < 101; ++t) v += (x.v[size_t(r * 101 + t)] - s) * (x.v[size_t(r * 101 + t)] - s);
    EXPECT_NEAR(m.v[size_t(r)], s, 1e-6 * (1 + std::fabs(s)));
    EXPECT_NEAR(sd.v[size_t(r)], std::sqrt(v / 100), 1e-6);
  }
}

TEST(NnElementwise, ValidationErrorsNameOpAndShapes) {
  Buf x({3, 4}), y({4, 3});
  try {
    gelu(pool(), x.t, y.t);
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("gelu"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 3]"), std::string::npos) << m;
  }
  Buf b({3});
  EXPECT_THROW(add(pool(), x.t, b.t, x.t), Error);  // [3] does not broadcast to [3, 4]
  std::vector<uint16_t> h(12);
  Tensor xh = make_tensor(DType::F16, {3, 4}, h.data(), h.size() * 2);
  EXPECT_THROW(silu(pool(), xh, x.t), Error);
  Buf alpha({5});
  EXPECT_THROW(snake(pool(), x.t, alpha.t, x.t), Error);
}

// The f16 store of every kernel table (KV caches) gives core f32_to_f16's bits for every
// non-NaN float: a sweep over the f32 bit patterns (every 4099th, all exponents and signs),
// the f16 rounding edges, in calls of odd lengths (vector tails). A NaN must stay a NaN.
TEST(NnElementwise, ToF16MatchesScalarOnEveryIsa) {
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) {
    const uint32_t u = uint32_t(b);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (float f : {0.f, -0.f, 65504.f, 65519.99f, 65520.f, -65520.f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,
                  6.1035156e-5f, 6.1035152e-5f, 1.0009766f, 1.0004883f, 1.0014648f, INFINITY, -INFINITY, NAN})
    x.push_back(f);
  std::vector<uint16_t> y(x.size());
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (int(isa) > int(detected_isa())) continue;
    const NnKernels& k = nn_kernels(isa);
    for (size_t i = 0; i < x.size(); i += 1007)
      k.to_f16(x.data() + i, y.data() + i, int64_t(std::min<size_t>(1007, x.size() - i)));
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        bad += (y[i] & 0x7c00) != 0x7c00 || (y[i] & 0x3ff) == 0;
        continue;
      }
      if (y[i] != f32_to_f16(x[i]) && bad++ < 5)
        ADD_FAILURE() << isa_name(isa) << ": " << x[i] << " -> " << y[i] << ", scalar " << f32_to_f16(x[i]);
    }
    EXPECT_EQ(bad, 0) << isa_name(isa) << " over " << x.size() << " values";
  }
}
