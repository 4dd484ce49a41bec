// Fused bf16 attention (ops/attention_bf16.h; AMX tiles or vdpbf16ps) against double-precision references:
//   exact:   softmax(scale q k^T) v on the f32 inputs;
//   rounded: the same on q, k, v rounded to bf16 (what the tiles multiply), so the remaining
//            differences are the bf16 rounding of p, the cubic exp and f32 accumulation.
// Bounds (|v| <= 1, every output a convex combination of v rows; Tk up to 1000):
//   rounded: max |out - ref| <= 4e-3 (p rounded to bf16: relative 2^-9 per weight, the exp
//            polynomial 7.5e-5, 1 / sum of the unrounded p; observed up to 1.3e-3)
//   exact:   max |out - ref| <= 1.5e-2 (adds q, k rounding, i.e. relative 2^-9 on each score,
//            up to ~5e-3 absolute for the |s| <= 12 scores of the peaked case, and v's
//            rounding of 2^-9; observed up to 3.6e-3)
// Shapes: Tq, Tk of 1, below, at and past multiples of 16 / 32, odd lengths (a length mask
// gives an odd Tk), D of 32, 64, 128, heads of a [B, T, 3 H D] projection buffer with the
// output written into a [B, T, H D] buffer (the columns around it untouched), B = 2.
// Skipped unless the AVX-512 ISA is active (CBX_DEBUG_FORCE_ISA) and AMX-BF16 tiles or the vdpbf16ps
// bf16 GEMM (CBX_DEBUG_VDPBF16) are usable.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "nn_test_util.h"
#include "ops/attention_bf16.h"
#include "ops/matmul.h"

using namespace cbx;

namespace {

constexpr double kTolRounded = 4e-3;
constexpr double kTolExact = 1.5e-2;
constexpr float kGuard = 12345.f;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

float bf(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Case {
  int64_t B, H, Tq, Tk, D;
  float q_amp;  // q uniform in [-q_amp, q_amp] (larger: more peaked softmax)
};

// Reference for one (b, h): q [Tq, D], k, v [Tk, D] with row strides; out [Tq, D] doubles.
void reference(const float* q, const float* k, const float* v, int64_t rs, int64_t Tq, int64_t Tk, int64_t D,
               double scale, bool round, std::vector<double>& out, const float* bias = nullptr, int64_t bias_rs = 0) {
  auto r = [&](float x) { return double(round ? bf(x) : x); };
  out.assign(size_t(Tq * D), 0.0);
  std::vector<double> s(static_cast<size_t>(Tk));
  for (int64_t i = 0; i < Tq; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < Tk; ++j) {
      double d = 0;
      for (int64_t e = 0; e < D; ++e) d += r(q[i * rs + e]) * r(k[j * rs + e]);
      s[size_t(j)] = d * scale + (bias ? double(bias[i * bias_rs + j]) : 0.0);
      mx = std::max(mx, s[size_t(j)]);
    }
    double sum = 0;
    for (int64_t j = 0; j < Tk; ++j) sum += s[size_t(j)] = std::exp(s[size_t(j)] - mx);
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t e = 0; e < D; ++e) out[size_t(i * D + e)] += s[size_t(j)] / sum * r(v[j * rs + e]);
  }
}

// Runs one case through [B, T, 3 H D] / [B, T, H D] buffers (q, k, v, out as strided views).
void run_case(const Case& c, uint32_t seed) {
  const int64_t B = c.B, H = c.H, D = c.D, inner = H * D, T = std::max(c.Tq, c.Tk);
  std::vector<float> qkv(size_t(B * T * 3 * inner)), att(size_t(B * T * (inner + 16)), kGuard);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < int64_t(qkv.size()); ++i) qkv[size_t(i)] = u(rng) * (i % (3 * inner) < inner ? c.q_amp : 1.f);
  const Tensor qkv_t = make_tensor(DType::F32, {B, T, 3 * inner}, qkv.data(), qkv.size() * 4);
  const Tensor att_t = make_tensor(DType::F32, {B, T, inner + 16}, att.data(), att.size() * 4);
  auto heads = [&](const Tensor& buf, int64_t col0, int64_t rows) {
    const int64_t sh[4] = {B, H, rows, D}, st[4] = {buf.stride[0], D * 4, buf.stride[1], 4};
    return make_view(buf, 4, sh, st, col0 * 4);
  };
  const Tensor q = heads(qkv_t, 0, c.Tq), k = heads(qkv_t, inner, c.Tk), v = heads(qkv_t, 2 * inner, c.Tk);
  Tensor out = heads(att_t, 8, c.Tq);
  const float scale = 1.f / std::sqrt(float(D));
  Arena scratch(attention_bf16_scratch_bytes(B, H, c.Tk, D, pool().size()));
  attention_bf16(pool(), q, k, v, out, scale, scratch);
  EXPECT_EQ(scratch.used(), 0u);

  double err_r = 0, err_e = 0;
  std::vector<double> ref_r, ref_e;
  const int64_t rs = 3 * inner, os = inner + 16;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* base = qkv.data() + b * T * rs + h * D;
      reference(base, base + inner, base + 2 * inner, rs, c.Tq, c.Tk, D, scale, true, ref_r);
      reference(base, base + inner, base + 2 * inner, rs, c.Tq, c.Tk, D, scale, false, ref_e);
      for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t e = 0; e < D; ++e) {
          const double o = att[size_t((b * T + i) * os + 8 + h * D + e)];
          ASSERT_TRUE(std::isfinite(o)) << "b " << b << " h " << h << " i " << i << " e " << e;
          err_r = std::max(err_r, std::fabs(o - ref_r[size_t(i * D + e)]));
          err_e = std::max(err_e, std::fabs(o - ref_e[size_t(i * D + e)]));
        }
    }
  // Columns outside the view and rows past Tq are untouched.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t e = 0; e < os; ++e) {
        if (i < c.Tq && e >= 8 && e < 8 + inner) continue;
        ASSERT_EQ(att[size_t((b * T + i) * os + e)], kGuard) << "b " << b << " row " << i << " col " << e;
      }
  SCOPED_TRACE(testing::Message() << "B " << B << " H " << H << " Tq " << c.Tq << " Tk " << c.Tk << " D " << D
                                  << " q_amp " << c.q_amp);
  EXPECT_LE(err_r, kTolRounded);
  EXPECT_LE(err_e, kTolExact);
  std::printf("B %lld H %lld Tq %4lld Tk %4lld D %3lld amp %.0f: max err vs bf16-rounded ref %.2e, vs exact %.2e\n",
              (long long)B, (long long)H, (long long)c.Tq, (long long)c.Tk, (long long)D, double(c.q_amp), err_r,
              err_e);
}

bool available(int64_t D = 64) { return attention_bf16_available(D); }

}  // namespace

TEST(AttentionAmx, SmallAndOddShapes) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  uint32_t seed = 1;
  for (int64_t Tq : {1, 5, 16, 31, 33, 64}) {
    for (int64_t Tk : {1, 2, 15, 17, 31, 32, 47, 65}) run_case({1, 2, Tq, Tk, 64, 1.f}, seed++);
  }
}

TEST(AttentionAmx, HeadDims) {
  if (!available(32)) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  uint32_t seed = 100;
  for (int64_t D : {32, 64, 96, 128}) {
    run_case({1, 2, 37, 53, D, 2.f}, seed++);
    run_case({2, 1, 70, 99, D, 1.f}, seed++);
  }
}

TEST(AttentionAmx, CfmSizes) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  // Full size is T ~ 900 with 8 heads; a length mask shortens the keys (odd Tk).
  run_case({2, 3, 300, 300, 64, 1.f}, 7);
  run_case({1, 2, 301, 257, 64, 3.f}, 8);
  run_case({1, 1, 1000, 1000, 64, 1.f}, 9);
  run_case({1, 2, 129, 999, 64, 6.f}, 10);  // peaked softmax (scores up to ~12 after the scale)
}

TEST(AttentionAmx, ThreeDimViewsAndOnePool) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  nn_test::Buf q({2, 20, 64}, 1), k({2, 45, 64}, 2), v({2, 45, 64}, 3), o({2, 20, 64});
  ThreadPool one(1);
  Arena scratch(attention_bf16_scratch_bytes(1, 2, 45, 64, 1));
  attention_bf16(one, q.t, k.t, v.t, o.t, 0.125f, scratch);
  std::vector<double> ref;
  for (int64_t h = 0; h < 2; ++h) {
    reference(q.p() + h * 20 * 64, k.p() + h * 45 * 64, v.p() + h * 45 * 64, 64, 20, 45, 64, 0.125, true, ref);
    for (int64_t i = 0; i < 20 * 64; ++i) EXPECT_NEAR(o.v[size_t(h * 20 * 64 + i)], ref[size_t(i)], kTolRounded);
  }
}

TEST(AttentionAmx, ThreadSplits) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  // 3 heads x 3 blocks of 32 queries: on 2 threads a thread's block range runs from one head
  // into the next (the pipeline switches K / V mid-range); on 11 threads two threads have no
  // block and 8 no head to pack, and all still meet the barrier.
  nn_test::Buf q({3, 70, 64}, 4), k({3, 7, 64}, 5), v({3, 7, 64}, 6);
  for (int threads : {2, 11}) {
    nn_test::Buf o({3, 70, 64});
    ThreadPool tp(threads);
    Arena scratch(attention_bf16_scratch_bytes(1, 3, 7, 64, threads));
    for (int rep = 0; rep < 2; ++rep) attention_bf16(tp, q.t, k.t, v.t, o.t, 0.125f, scratch);
    std::vector<double> ref;
    for (int64_t h = 0; h < 3; ++h) {
      reference(q.p() + h * 70 * 64, k.p() + h * 7 * 64, v.p() + h * 7 * 64, 64, 70, 7, 64, 0.125, true, ref);
      for (int64_t i = 0; i < 70 * 64; ++i)
        ASSERT_NEAR(o.v[size_t(h * 70 * 64 + i)], ref[size_t(i)], kTolRounded) << threads << " threads, head " << h;
    }
  }
}

TEST(AttentionAmx, ThreadCountsGiveTheSameBits) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  // Query blocks are shared out dynamically (own block, then the others' last items): every
  // pool size must give the 1-thread bits and write every output (the guard values show a
  // skipped block). 4 heads x 5 blocks: 20 items, not a multiple of 3 or 5.
  nn_test::Buf q({4, 150, 64}, 7), k({4, 90, 64}, 8), v({4, 90, 64}, 9);
  std::vector<float> want;
  for (int threads : {1, 2, 3, 5}) {
    nn_test::Buf o({4, 150, 64});
    for (float& x : o.v) x = kGuard;
    ThreadPool tp(threads);
    Arena scratch(attention_bf16_scratch_bytes(1, 4, 90, 64, threads));
    attention_bf16(tp, q.t, k.t, v.t, o.t, 0.125f, scratch);
    for (float x : o.v) ASSERT_NE(x, kGuard) << threads << " threads left an output unwritten";
    if (want.empty())
      want = o.v;
    else
      ASSERT_EQ(o.v, want) << threads << " threads";
  }
}

TEST(AttentionAmx, BadInputs) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  nn_test::Buf q({2, 8, 64}), k({2, 9, 64}), v({2, 9, 64}), o({2, 8, 64}), k48({2, 9, 48}), q48({2, 8, 48}),
      o48({2, 8, 48}), v7({2, 7, 64}), o7({2, 7, 64});
  Arena big(attention_bf16_scratch_bytes(1, 2, 9, 64, pool().size()));
  auto msg = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, Tensor& oo, Arena& a) -> std::string {
    try {
      attention_bf16(pool(), qq, kk, vv, oo, 0.125f, a);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg(q48.t, k48.t, k48.t, o48.t, big).find("head dim 48"), std::string::npos);
  EXPECT_NE(msg(q.t, k.t, v7.t, o.t, big).find("must be [1, 2, Tk, 64]"), std::string::npos);
  EXPECT_NE(msg(q.t, k.t, v.t, o7.t, big).find("differ in shape"), std::string::npos);
  Arena small(1024);
  EXPECT_NE(msg(q.t, k.t, v.t, o.t, small).find("scratch has"), std::string::npos);
  EXPECT_FALSE(attention_bf16_available(48));
  EXPECT_FALSE(attention_bf16_available(256));
}

// An additive bias (the flow encoder's relative-position scores): a [Tq, Tk] rel-shift view
// (row stride 2 Tk - 2 into a [Tq, 2 Tk - 1] buffer, offset Tk - 1) shared by all heads, and a
// per-head [H, Tq, Tk] bias. The bias is added in f32, so the bounds stay those of the
// unbiased kernel; values up to +-4 make the softmax far from the unbiased one.
TEST(AttentionAmx, AdditiveBias) {
  if (!available()) GTEST_SKIP() << "the fused bf16 attention is not available with this ISA / CPU";
  for (const int64_t T : {1, 17, 45, 130}) {
    const int64_t H = 2, D = 64, P = 2 * T - 1;
    nn_test::Buf q({H, T, D}, 11), k({H, T, D}, 12), v({H, T, D}, 13), o({H, T, D}), o2({H, T, D});
    nn_test::Buf raw({T, P}, 14), per({H, T, T}, 15);
    for (float& x : raw.v) x *= 4.f;
    for (float& x : per.v) x *= 4.f;
    const int64_t sh[2] = {T, T}, st[2] = {(T > 1 ? P - 1 : 1) * 4, 4};
    const Tensor shifted = make_view(raw.t, 2, sh, st, (T - 1) * 4);
    Arena scratch(attention_bf16_scratch_bytes(1, H, T, D, pool().size()));
    attention_bf16(pool(), q.t, k.t, v.t, shifted, o.t, 0.125f, scratch);
    attention_bf16(pool(), q.t, k.t, v.t, per.t, o2.t, 0.125f, scratch);
    EXPECT_EQ(scratch.used(), 0u);
    std::vector<double> ref;
    for (int64_t h = 0; h < H; ++h) {
      const size_t hq = size_t(h * T * D);
      reference(q.p() + hq, k.p() + hq, v.p() + hq, D, T, T, D, 0.125, true, ref, raw.p() + (T - 1), P - 1);
      for (int64_t i = 0; i < T * D; ++i)
        ASSERT_NEAR(o.v[hq + size_t(i)], ref[size_t(i)], kTolRounded) << "shared bias, T " << T << " head " << h;
      reference(q.p() + hq, k.p() + hq, v.p() + hq, D, T, T, D, 0.125, true, ref, per.p() + h * T * T, T);
      for (int64_t i = 0; i < T * D; ++i)
        ASSERT_NEAR(o2.v[hq + size_t(i)], ref[size_t(i)], kTolRounded) << "per-head bias, T " << T << " head " << h;
    }
  }
  // Shape errors name the bias.
  nn_test::Buf q({2, 8, 64}), k({2, 9, 64}), v({2, 9, 64}), o({2, 8, 64}), bad({8, 8}), bad_h({3, 8, 9});
  Arena a(attention_bf16_scratch_bytes(1, 2, 9, 64, pool().size()));
  for (const Tensor* b : {&bad.t, &bad_h.t}) {
    try {
      attention_bf16(pool(), q.t, k.t, v.t, *b, o.t, 0.125f, a);
      ADD_FAILURE() << "a bias of shape " << b->shape_str() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
    }
  }
}

// The in-kernel relative-position term (attention_bf16_relpos) against what the flow encoder
// did before it: per head, bd_raw = qv p^T by gemm_f32 at the BF16 precision, then the bias
// overload on its rel-shift view. Same bits required (same bf16 rounding of qv and p, the dim
// pairs summed in order from zero, the same fma with the scale). Heads are columns of [T, H D]
// buffers as in the flow encoder; T below / past 16, 32 and 64-key windows, from 8 on (below
// kGemmMinRows = 8 rows gemm_f32 takes its f32 dot path, not the bf16 tile, so the old path
// was not a bf16 product there).
TEST(AttentionAmx, RelativePositionsMatchTheBiasPath) {
  for (const int64_t D : {32, 64, 128}) {
    if (!attention_bf16_relpos_available(D)) GTEST_SKIP() << "no in-kernel position term with this ISA / CPU";
    for (const int64_t T : {8, 17, 45, 70, 130}) {
      const int64_t H = 3, d = H * D, P = 2 * T - 1;
      nn_test::Buf q({T, d}, 21), k({T, d}, 22), v({T, d}, 23), qv({T, d}, 24), p({P, d}, 25), o({T, d}), o2({T, d}),
          bd({T, P});
      for (float& x : qv.v) x *= 3.f;
      for (float& x : p.v) x *= 2.f;
      const int64_t hs[3] = {H, T, D}, st[3] = {D * 4, d * 4, 4}, ps[3] = {H, P, D};
      const float scale = 0.125f;
      Arena scratch(attention_bf16_relpos_scratch_bytes(1, H, T, D, pool().size()) + (size_t(16) << 20));
      for (int64_t h = 0; h < H; ++h) {
        const int64_t h1[3] = {1, T, D};
        auto head = [&](nn_test::Buf& b, int64_t rows) {
          const int64_t sh[2] = {rows, D}, s2[2] = {d * 4, 4};
          return make_view(b.t, 2, sh, s2, h * D * 4);
        };
        gemm_f32(pool(), head(qv, T), head(p, P), bd.t, &scratch, GemmPrecision::BF16);
        const int64_t sh[2] = {T, T}, sst[2] = {(T > 1 ? P - 1 : 1) * 4, 4};
        const Tensor shifted = make_view(bd.t, 2, sh, sst, (T - 1) * 4);
        Tensor oh = make_view(o.t, 3, h1, st, h * D * 4);
        attention_bf16(pool(), make_view(q.t, 3, h1, st, h * D * 4), make_view(k.t, 3, h1, st, h * D * 4),
                       make_view(v.t, 3, h1, st, h * D * 4), shifted, oh, scale, scratch);
      }
      Tensor o2v = make_view(o2.t, 3, hs, st, 0);
      attention_bf16_relpos(pool(), make_view(q.t, 3, hs, st, 0), make_view(k.t, 3, hs, st, 0),
                            make_view(v.t, 3, hs, st, 0), make_view(qv.t, 3, hs, st, 0), make_view(p.t, 3, ps, st, 0),
                            o2v, scale, scratch);
      EXPECT_EQ(scratch.used(), 0u);
      size_t bad = 0;
      for (size_t i = 0; i < o.v.size(); ++i) bad += o2.v[i] != o.v[i];
      EXPECT_EQ(bad, 0u) << "D " << D << ", T " << T;
    }
  }
}

TEST(AttentionAmx, RelativePositionsBadInputs) {
  if (!attention_bf16_relpos_available(64)) GTEST_SKIP() << "no in-kernel position term with this ISA / CPU";
  nn_test::Buf q({2, 8, 64}), k({2, 9, 64}), k8({2, 8, 64}), o({2, 8, 64}), p({2, 15, 64}), p16({2, 16, 64});
  Arena scratch(attention_bf16_relpos_scratch_bytes(1, 2, 9, 64, pool().size()));
  auto msg = [&](const Tensor& kk, const Tensor& qv, const Tensor& pp) -> std::string {
    try {
      attention_bf16_relpos(pool(), q.t, kk, kk, qv, pp, o.t, 1.f, scratch);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg(k.t, q.t, p16.t).find("need Tq == Tk"), std::string::npos);   // 8 queries, 9 keys
  EXPECT_NE(msg(k8.t, q.t, p16.t).find("need Tq == Tk"), std::string::npos);  // p rows 16, not 15
  EXPECT_NE(msg(k8.t, k.t, p.t).find("qv"), std::string::npos);               // qv of another shape
  EXPECT_EQ(msg(k8.t, q.t, p.t), "");
}

TEST(AttentionAmx, UnavailableThrows) {
  if (available()) GTEST_SKIP() << "the fused bf16 attention is available here";
  nn_test::Buf q({1, 4, 64}), k({1, 4, 64}), v({1, 4, 64}), o({1, 4, 64});
  Arena a(1 << 20);
  try {
    attention_bf16(pool(), q.t, k.t, v.t, o.t, 0.125f, a);
    FAIL() << "attention_bf16 ran without AMX or vdpbf16ps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AMX"), std::string::npos) << e.what();
  }
}
