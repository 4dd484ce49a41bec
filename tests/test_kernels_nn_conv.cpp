// conv1d (stride, dilation, asymmetric padding, groups incl. depthwise, batch, strided
// rows), conv_transpose1d (HiFT upsampling shapes) and conv2d (CAMPPlus shapes): front-end
// (CBX_DEBUG_FORCE_ISA) vs the generic kernel vs a direct double-precision reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "nn_test_util.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

using namespace cbx;
using nn_test::Buf;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Tolerance per output: |y - ref| <= 1e-5 * sum_k |w_k x_k| (+ |bias|): f32 accumulation
// over at most a few thousand terms in blocks, against a double sum.
struct Check {
  double worst_ref = 0, worst_gen = 0;
  void add(float y, float g, double ref, double mag) {
    double m = 1e-30 + mag;
    worst_ref = std::max(worst_ref, std::fabs(y - ref) / m);
    worst_gen = std::max(worst_gen, std::fabs(double(y) - g) / m);
  }
};
constexpr double kConvTol = 1e-5;
// BF16 GEMM precision (ops/matmul.h; conv1d only): x and w rounded to bf16, each by a
// relative 2^-9 at most, so |y - ref| <= (2 * 2^-9 + 2^-18) sum_k |w_k x_k| + f32 sums.
constexpr double kConvBf16Tol = 4e-3;

struct C1 {
  int64_t B, Cin, Cout, T, K;
  Conv1dParams p;
  bool bias;
};

void run_conv1d(const C1& c, uint32_t seed, double tol = kConvTol) {
  const int64_t Tout = conv1d_out_len(c.T, c.K, c.p);
  const int64_t cin_g = c.Cin / c.p.groups, cout_g = c.Cout / c.p.groups;
  // x with padded rows (strided view) to exercise row strides.
  Buf xs({c.B, c.Cin, c.T + 3}, seed), w({c.Cout, cin_g, c.K}, seed + 1), b({c.Cout}, seed + 2);
  Tensor x = slice(xs.t, 2, 1, c.T);
  Buf y({c.B, c.Cout, Tout}), g({c.B, c.Cout, Tout});
  Arena arena(64 << 20);
  Tensor bt = c.bias ? b.t : Tensor{};
  conv1d(pool(), x, w.t, bt, y.t, c.p, &arena);
  EXPECT_EQ(arena.used(), 0u);
  conv1d(pool(), x, w.t, bt, g.t, c.p, nullptr, Isa::Generic);
  Check chk;
  for (int64_t bb = 0; bb < c.B; ++bb)
    for (int64_t o = 0; o < c.Cout; ++o) {
      const int64_t grp = o / cout_g;
      for (int64_t t = 0; t < Tout; ++t) {
        double acc = c.bias ? b.v[size_t(o)] : 0, mag = std::fabs(acc);
        for (int64_t ci = 0; ci < cin_g; ++ci)
          for (int64_t kk = 0; kk < c.K; ++kk) {
            int64_t src = t * c.p.stride + kk * c.p.dilation - c.p.pad_left;
            if (src < 0 || src >= c.T) continue;
            double xv = xs.v[size_t((bb * c.Cin + grp * cin_g + ci) * (c.T + 3) + 1 + src)];
            double wv = w.v[size_t((o * cin_g + ci) * c.K + kk)];
            acc += xv * wv;
            mag += std::fabs(xv * wv);
          }
        size_t at = size_t((bb * c.Cout + o) * Tout + t);
        chk.add(y.v[at], g.v[at], acc, mag);
      }
    }
  EXPECT_LE(chk.worst_ref, tol) << "vs reference: Cin " << c.Cin << " Cout " << c.Cout << " T " << c.T << " K " << c.K
                                << " s " << c.p.stride << " d " << c.p.dilation << " g " << c.p.groups;
  EXPECT_LE(chk.worst_gen, tol + kConvTol) << "vs generic: Cin " << c.Cin << " T " << c.T;
  if (tol > kConvTol && gemm_bf16_available()) {  // the bf16 GEMM ran: not the f32 result
    EXPECT_GT(chk.worst_gen, 0.0) << "BF16 precision gave the f32 result: Cin " << c.Cin << " T " << c.T;
  }
}

constexpr auto P = nn_test::conv1d_params;  // stride, dilation, pad left, pad right, groups

}  // namespace

TEST(NnConv, Conv1dShapes) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const C1 cases[] = {
      {1, 3, 5, 17, 3, P(1, 1, 1, 1, 1), true},       // same padding
      {2, 7, 11, 40, 4, P(1, 1, 0, 3, 1), true},      // right pad 3 (pre-lookahead k=4)
      {1, 9, 13, 50, 5, P(1, 3, 6, 6, 1), false},     // dilated ResBlock conv
      {1, 6, 6, 33, 3, P(1, 1, 2, 0, 6), true},       // depthwise causal
      {1, 8, 12, 29, 3, P(1, 2, 4, 0, 4), true},      // grouped, dilated causal
      {1, 18, 10, 301, 30, P(15, 1, 7, 7, 1), true},  // HiFT source_downs[0]
      {2, 10, 7, 51, 5, P(2, 1, 2, 2, 1), false},     // tdnn k=5 s=2
      {1, 5, 4, 9, 3, P(2, 2, 1, 1, 1), true},        // strided + dilated
      {1, 3, 2, 5, 7, P(1, 1, 3, 3, 1), true},        // kernel longer than input
      {1, 67, 100, 600, 7, P(1, 1, 3, 3, 1), true},   // several M and N tiles, threaded
      {1, 40, 50, 1000, 3, P(2, 1, 1, 1, 1), true},   // strided, threaded im2col
      {1, 20, 8, 1, 1, P(1, 1, 0, 0, 1), true},       // T = 1 (1x1 conv)
  };
  uint32_t seed = 1;
  for (const C1& c : cases) run_conv1d(c, seed += 10);
}

// conv1d in BF16 GEMM precision (a GemmPrecisionScope): the AMX path where it exists (AVX-512
// with AMX tiles, CBX_DEBUG_NO_AMX unset), the exact f32 path elsewhere (then within kConvTol).
TEST(NnConv, Conv1dBf16Precision) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  const double tol = gemm_bf16_available() ? kConvBf16Tol : kConvTol;
  const C1 cases[] = {
      {1, 3, 5, 17, 3, P(1, 1, 1, 1, 1), true},        // same padding, tiny
      {2, 7, 11, 40, 4, P(1, 1, 0, 3, 1), true},       // batch, right pad
      {1, 64, 64, 333, 11, P(1, 5, 25, 25, 1), true},  // HiFT ResBlock: k 11, dilation 5
      {1, 8, 12, 29, 3, P(1, 2, 4, 0, 4), true},       // grouped, dilated causal
      {1, 18, 10, 301, 30, P(15, 1, 7, 7, 1), true},   // HiFT source_downs[0] (im2col)
      {1, 40, 50, 1000, 3, P(2, 1, 1, 1, 1), true},    // strided, several chunks' worth
      {1, 96, 70, 257, 3, P(1, 1, 2, 0, 1), false},    // causal, edge tiles (direct path)
      {1, 40, 150, 100, 3, P(1, 2, 2, 2, 1), true},    // C_out 150: k-major on AMX, direct on vdpbf16ps
      {1, 24, 530, 70, 3, P(1, 1, 1, 1, 1), true},     // C_out > 512: k-major GEMM path on both
      {1, 20, 8, 1, 1, P(1, 1, 0, 0, 1), true},        // T = 1 (1x1 conv)
      // Direct path with several packed input chunks per thread (chunk edges, halos):
      {1, 64, 64, 2100, 11, P(1, 5, 25, 25, 1), true},  // ~30 time tiles a chunk at C_in 64
      {1, 256, 40, 700, 3, P(1, 1, 2, 0, 1), true},     // 7 a chunk at C_in 256, causal
      {1, 500, 33, 300, 3, P(1, 1, 1, 1, 1), false},    // 3 a chunk at C_in 512
  };
  uint32_t seed = 500;
  for (const C1& c : cases) run_conv1d(c, seed += 10, tol);
}

// conv_transpose1d on HiFT upsampling shapes vs a double reference and the generic ISA;
// tol > kConvTol: BF16 precision (then the bf16 GEMM must have run where it exists).
static void run_conv_transpose1d_cases(double tol) {
  struct Ct {
    int64_t Cin, Cout, T, K, s, pad, opad;
  };
  const Ct cases[] = {{16, 8, 13, 16, 8, 4, 0},   {8, 6, 21, 11, 5, 3, 0}, {6, 4, 30, 7, 3, 2, 0},
                      {3, 5, 7, 4, 2, 1, 1},      {5, 3, 1, 3, 1, 0, 0},   {40, 24, 300, 16, 8, 4, 0},
                      {64, 32, 2100, 16, 8, 4, 0}};  // several column chunks, threaded
  uint32_t seed = 100;
  for (const Ct& c : cases) {
    ConvTranspose1dParams p;
    p.stride = c.s;
    p.padding = c.pad;
    p.output_padding = c.opad;
    const int64_t Tout = conv_transpose1d_out_len(c.T, c.K, p);
    Buf x({c.Cin, c.T}, seed++), w({c.Cin, c.Cout, c.K}, seed++), b({c.Cout}, seed++);
    Buf y({c.Cout, Tout}), g({c.Cout, Tout});
    Arena arena(16 << 20);
    conv_transpose1d(pool(), x.t, w.t, b.t, y.t, p, &arena);
    EXPECT_EQ(arena.used(), 0u);
    conv_transpose1d(pool(), x.t, w.t, b.t, g.t, p, nullptr, Isa::Generic);
    std::vector<double> ref(size_t(c.Cout * Tout)), mag(ref.size());
    for (int64_t o = 0; o < c.Cout; ++o)
      for (int64_t t = 0; t < Tout; ++t)
        ref[size_t(o * Tout + t)] = b.v[size_t(o)], mag[size_t(o * Tout + t)] = std::fabs(b.v[size_t(o)]);
    for (int64_t ci = 0; ci < c.Cin; ++ci)
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t o = 0; o < c.Cout; ++o)
          for (int64_t kk = 0; kk < c.K; ++kk) {
            int64_t to = t * c.s - c.pad + kk;
            if (to < 0 || to >= Tout) continue;
            double v = double(x.v[size_t(ci * c.T + t)]) * w.v[size_t((ci * c.Cout + o) * c.K + kk)];
            ref[size_t(o * Tout + to)] += v;
            mag[size_t(o * Tout + to)] += std::fabs(v);
          }
    Check chk;
    for (size_t i = 0; i < ref.size(); ++i) chk.add(y.v[i], g.v[i], ref[i], mag[i]);
    EXPECT_LE(chk.worst_ref, tol) << "K " << c.K << " s " << c.s;
    EXPECT_LE(chk.worst_gen, tol + kConvTol) << "K " << c.K << " s " << c.s;
    if (tol > kConvTol && gemm_bf16_available()) {  // the bf16 GEMM ran: not the f32 result
      EXPECT_GT(chk.worst_gen, 0.0) << "BF16 precision gave the f32 result: K " << c.K << " s " << c.s;
    }
  }
}

TEST(NnConv, ConvTranspose1dHiftShapes) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  run_conv_transpose1d_cases(kConvTol);
}

// conv_transpose1d in BF16 GEMM precision: AMX where it exists, else exact f32.
TEST(NnConv, ConvTranspose1dBf16Precision) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  run_conv_transpose1d_cases(gemm_bf16_available() ? kConvBf16Tol : kConvTol);
}

TEST(NnConv, Conv2dCampplusShapes) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  struct C2 {
    int64_t Cin, Cout, H, W, kh, kw, sh, sw, ph, pw;
    bool bias;
  };
  const C2 cases[] = {{1, 4, 20, 31, 3, 3, 1, 1, 1, 1, false},
                      {4, 4, 20, 31, 3, 3, 2, 1, 1, 1, true},
                      {3, 5, 9, 7, 1, 1, 2, 1, 0, 0, true},
                      {2, 3, 5, 6, 3, 2, 1, 2, 0, 1, true},
                      {8, 16, 40, 250, 3, 3, 2, 1, 1, 1, false}};
  uint32_t seed = 200;
  for (const C2& c : cases) {
    Conv2dParams p;
    p.stride_h = c.sh;
    p.stride_w = c.sw;
    p.pad_h = c.ph;
    p.pad_w = c.pw;
    const int64_t Ho = (c.H + 2 * c.ph - c.kh) / c.sh + 1, Wo = (c.W + 2 * c.pw - c.kw) / c.sw + 1;
    Buf x({c.Cin, c.H, c.W}, seed++), w({c.Cout, c.Cin, c.kh, c.kw}, seed++), b({c.Cout}, seed++);
    Buf y({c.Cout, Ho, Wo}), g({c.Cout, Ho, Wo});
    Tensor bt = c.bias ? b.t : Tensor{};
    conv2d(pool(), x.t, w.t, bt, y.t, p);
    conv2d(pool(), x.t, w.t, bt, g.t, p, nullptr, Isa::Generic);
    Check chk;
    for (int64_t o = 0; o < c.Cout; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = c.bias ? b.v[size_t(o)] : 0, mag = std::fabs(acc);
          for (int64_t ci = 0; ci < c.Cin; ++ci)
            for (int64_t ky = 0; ky < c.kh; ++ky)
              for (int64_t kx = 0; kx < c.kw; ++kx) {
                int64_t hi = i * c.sh + ky - c.ph, wi = j * c.sw + kx - c.pw;
                if (hi < 0 || hi >= c.H || wi < 0 || wi >= c.W) continue;
                double v = double(x.v[size_t((ci * c.H + hi) * c.W + wi)]) *
                           w.v[size_t(((o * c.Cin + ci) * c.kh + ky) * c.kw + kx)];
                acc += v;
                mag += std::fabs(v);
              }
          size_t at = size_t((o * Ho + i) * Wo + j);
          chk.add(y.v[at], g.v[at], acc, mag);
        }
    EXPECT_LE(chk.worst_ref, kConvTol) << c.H << "x" << c.W;
    EXPECT_LE(chk.worst_gen, kConvTol) << c.H << "x" << c.W;
  }
}

TEST(NnConv, ValidationErrors) {
  Buf x({4, 10}), w({6, 3, 3}), y({6, 8});
  try {
    conv1d(pool(), x.t, w.t, Tensor{}, y.t, Conv1dParams{});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("conv1d"), std::string::npos) << m;
    EXPECT_NE(m.find("[6, 3, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 10]"), std::string::npos) << m;
  }
  Buf w2({6, 4, 3}), ybad({6, 9});
  EXPECT_THROW(conv1d(pool(), x.t, w2.t, Tensor{}, ybad.t, Conv1dParams{}), Error);  // T_out is 8
  Buf wt({4, 2, 16}), yt({2, 10});
  ConvTranspose1dParams pt;
  pt.stride = 8;
  EXPECT_THROW(conv_transpose1d(pool(), x.t, wt.t, Tensor{}, yt.t, pt), Error);
  Buf x2({2, 5, 5}), w4({3, 2, 3, 3}), y2({3, 4, 4});
  EXPECT_THROW(conv2d(pool(), x2.t, w4.t, Tensor{}, y2.t, Conv2dParams{}), Error);  // 3x3 out
}

// conv1d_snake (HiFT resblock step) where it fuses: the bits of snake, conv1d and add run one
// after the other, with the residual apart from y, as y itself, and absent; several input
// chunks per thread (T 2100 at C_in 64). Elsewhere it must refuse.
TEST(NnConv, Conv1dSnakeFusedMatchesComposedOps) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  Conv1dParams pd = P(1, 3, 6, 6, 1);
  if (!conv1d_snake_fused(64, pd)) {
    Buf x({8, 20}), a({8}, 3), w({8, 8, 3}), y({8, 20});
    EXPECT_THROW(conv1d_snake(pool(), x.t, a.t, w.t, Tensor{}, Tensor{}, y.t, P(1, 1, 1, 1, 1)), Error);
    GTEST_SKIP() << "no fused bf16 direct conv on this CPU / precision";
  }
  struct Case {
    int64_t Cin, Cout, T, K;
    Conv1dParams p;
  };
  const Case cases[] = {
      {64, 64, 2100, 5, pd}, {40, 24, 333, 11, P(1, 5, 25, 25, 1)}, {96, 96, 70, 3, P(1, 1, 1, 1, 1)}};
  uint32_t seed = 900;
  for (const Case& c : cases) {
    const int64_t Tout = conv1d_out_len(c.T, c.K, c.p);
    Buf x({c.Cin, c.T}, seed += 10, -3.f, 3.f), alpha({c.Cin}, seed + 1, 0.2f, 2.f), w({c.Cout, c.Cin, c.K}, seed + 2),
        b({c.Cout}, seed + 3), res({c.Cout, Tout}, seed + 4);
    Arena arena(64 << 20);
    // Composed: t = snake(x); u = conv1d(t); want = res + u.
    Buf t({c.Cin, c.T}), u({c.Cout, Tout}), want({c.Cout, Tout});
    snake(pool(), x.t, alpha.t, t.t);
    conv1d(pool(), t.t, w.t, b.t, u.t, c.p, &arena);
    add(pool(), res.t, u.t, want.t);
    Buf y1({c.Cout, Tout}), y2({c.Cout, Tout});
    conv1d_snake(pool(), x.t, alpha.t, w.t, b.t, Tensor{}, y1.t, c.p, &arena);
    EXPECT_EQ(arena.used(), 0u);
    EXPECT_EQ(y1.v, u.v) << "no residual: Cin " << c.Cin << " T " << c.T;
    conv1d_snake(pool(), x.t, alpha.t, w.t, b.t, res.t, y2.t, c.p, &arena);
    EXPECT_EQ(y2.v, want.v) << "residual apart: Cin " << c.Cin << " T " << c.T;
    conv1d_snake(pool(), x.t, alpha.t, w.t, b.t, res.t, res.t, c.p, &arena);  // in place over the residual
    EXPECT_EQ(res.v, want.v) << "residual = y: Cin " << c.Cin << " T " << c.T;
  }
  Buf x({8, 20}), a({8}, 3), a2({7}, 3), w({8, 8, 3}), y({8, 20}), y9({8, 9});
  EXPECT_THROW(conv1d_snake(pool(), x.t, a.t, w.t, Tensor{}, Tensor{}, y9.t, P(2, 1, 1, 1, 1)), Error);  // stride
  EXPECT_THROW(conv1d_snake(pool(), x.t, a2.t, w.t, Tensor{}, Tensor{}, y.t, P(1, 1, 1, 1, 1)), Error);  // alpha
  EXPECT_THROW(conv1d_snake(pool(), x.t, a.t, w.t, Tensor{}, Tensor{}, x.t, P(1, 1, 1, 1, 1)), Error);   // y = x
}

// The direct conv shares whole time tiles out with the pool's WorkSplit (own block, then
// the others' last tiles, each piece packing its own input columns): pools of 1, 3 and 5
// threads (more than the cores: some are preempted, others steal) give the 2-thread bits,
// the in-place residual included (a tile run twice adds its residual twice).
TEST(NnConv, Conv1dSnakeThreadCountsGiveTheSameBits) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  const Conv1dParams pd = P(1, 3, 9, 9, 1);
  if (!conv1d_snake_fused(64, pd)) GTEST_SKIP() << "no fused bf16 direct conv on this CPU / precision";
  const int64_t C = 64, T = 4000, K = 7;
  Buf x({C, T}, 31, -3.f, 3.f), alpha({C}, 32, 0.2f, 2.f), w({C, C, K}, 33), b({C}, 34), res0({C, T}, 35);
  Arena arena(64 << 20);
  Buf want({C, T});
  want.v = res0.v;
  conv1d_snake(pool(), x.t, alpha.t, w.t, b.t, want.t, want.t, pd, &arena);
  for (int threads : {1, 3, 5}) {
    ThreadPool tp(threads);
    Arena ar(64 << 20);
    for (int rep = 0; rep < 3; ++rep) {
      Buf y({C, T});
      y.v = res0.v;
      conv1d_snake(tp, x.t, alpha.t, w.t, b.t, y.t, y.t, pd, &ar);
      EXPECT_EQ(y.v, want.v) << threads << " threads, rep " << rep;
    }
  }
}

// conv1d_pack: weights packed once give the per-call packing's bits (conv1d and
// conv1d_snake, batch, C_in / C_out off the 32 grid, no bias); a pack made from other
// weights is refused by name; an empty pack (no direct kernel, C_out over its limit) and
// the f32 path ignore it.
TEST(NnConv, Conv1dPackedWeightsMatchPerCallPacking) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  struct Case {
    int64_t B, Cin, Cout, T, K;
    Conv1dParams p;
    bool bias;
  };
  const Case cases[] = {{1, 64, 64, 700, 11, P(1, 5, 25, 25, 1), true},
                        {2, 40, 24, 333, 3, P(1, 1, 2, 0, 1), false},
                        {1, 80, 512, 90, 7, P(1, 1, 3, 3, 1), true},
                        {1, 24, 530, 70, 3, P(1, 1, 1, 1, 1), true}};  // C_out > 512: no direct kernel
  uint32_t seed = 1300;
  for (const Case& c : cases) {
    const int64_t Tout = conv1d_out_len(c.T, c.K, c.p);
    Buf x({c.B, c.Cin, c.T}, seed += 10), w({c.Cout, c.Cin, c.K}, seed + 1), b({c.Cout}, seed + 2);
    const Tensor bt = c.bias ? b.t : Tensor{};
    const Conv1dPacked pk = conv1d_pack(pool(), w.t, bt);
    EXPECT_EQ(pk.empty(), !conv1d_snake_fused(c.Cout, c.p)) << "C_out " << c.Cout;
    Arena arena(64 << 20);
    Buf want({c.B, c.Cout, Tout}), got({c.B, c.Cout, Tout});
    conv1d(pool(), x.t, w.t, bt, want.t, c.p, &arena);
    Conv1dParams pp = c.p;
    pp.packed = &pk;
    conv1d(pool(), x.t, w.t, bt, got.t, pp, &arena);
    EXPECT_EQ(arena.used(), 0u);
    EXPECT_EQ(got.v, want.v) << "conv1d: Cin " << c.Cin << " Cout " << c.Cout;
    if (!pk.empty() && c.B == 1) {
      Buf alpha({c.Cin}, seed + 3, 0.2f, 2.f), s1({c.Cout, Tout}), s2({c.Cout, Tout});
      const Tensor x2 = x.t.ndim == 3 ? slice(x.t, 0, 0, 1) : x.t;
      const int64_t sh[2] = {c.Cin, c.T}, st[2] = {c.T * 4, 4};
      const Tensor xv = make_view(x2, 2, sh, st, 0);
      conv1d_snake(pool(), xv, alpha.t, w.t, bt, Tensor{}, s1.t, c.p, &arena);
      conv1d_snake(pool(), xv, alpha.t, w.t, bt, Tensor{}, s2.t, pp, &arena);
      EXPECT_EQ(s2.v, s1.v) << "conv1d_snake: Cin " << c.Cin;
    }
    if (!pk.empty()) {  // the same shapes but other weights (or another bias): refused
      Buf w2({c.Cout, c.Cin, c.K}, seed + 5), b2({c.Cout}, seed + 6);
      EXPECT_THROW(conv1d(pool(), x.t, w2.t, bt, got.t, pp, &arena), Error);
      EXPECT_THROW(conv1d(pool(), x.t, w.t, b2.t, got.t, pp, &arena), Error);
    }
    {  // f32 precision ignores the pack
      GemmPrecisionScope f32(GemmPrecision::F32);
      Buf f1({c.B, c.Cout, Tout}), f2({c.B, c.Cout, Tout});
      conv1d(pool(), x.t, w.t, bt, f1.t, c.p, &arena);
      conv1d(pool(), x.t, w.t, bt, f2.t, pp, &arena);
      EXPECT_EQ(f2.v, f1.v);
    }
  }
  Conv1dPacks packs;
  Buf w({16, 8, 3}), b({16});
  packs.add(pool(), w.t, b.t);
  packs.add(pool(), w.t, b.t);  // once per weights
  EXPECT_EQ(packs.find(w.t) != nullptr, conv1d_snake_fused(16, P(1, 1, 1, 1, 1)));
  EXPECT_EQ(packs.find(b.t), nullptr);
  EXPECT_EQ(packs.bytes(), conv1d_snake_fused(16, P(1, 1, 1, 1, 1)) ? size_t(3 * 32 * 32 * 2 + 32 * 16 * 4) : 0u);
}

// conv_transpose1d_pack: the pre-transposed weights give the per-call transpose's bits in
// BF16 precision; a pack of other weights is refused; f32 precision ignores it.
TEST(NnConv, ConvTranspose1dPackedWeightsMatchPerCallTranspose) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  ConvTranspose1dParams p;
  p.stride = 8;
  p.padding = 4;
  Buf x({64, 300}, 1401), w({64, 32, 16}, 1402), w2({64, 32, 16}, 1403), b({32}, 1404);
  const int64_t Tout = conv_transpose1d_out_len(300, 16, p);
  const ConvTranspose1dPacked pk = conv_transpose1d_pack(pool(), w.t);
  EXPECT_EQ(pk.empty(), !gemm_bf16_available());
  Arena arena(16 << 20);
  Buf want({32, Tout}), got({32, Tout});
  conv_transpose1d(pool(), x.t, w.t, b.t, want.t, p, &arena);
  ConvTranspose1dParams pp = p;
  pp.packed = &pk;
  conv_transpose1d(pool(), x.t, w.t, b.t, got.t, pp, &arena);
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(got.v, want.v);
  if (!pk.empty()) {
    EXPECT_THROW(conv_transpose1d(pool(), x.t, w2.t, b.t, got.t, pp, &arena), Error);
  }
  GemmPrecisionScope f32(GemmPrecision::F32);
  Buf f2({32, Tout}), f3({32, Tout});
  conv_transpose1d(pool(), x.t, w2.t, b.t, f2.t, pp, &arena);  // ignored: w2's result
  conv_transpose1d(pool(), x.t, w2.t, b.t, f3.t, p, &arena);
  EXPECT_EQ(f2.v, f3.v);
}
