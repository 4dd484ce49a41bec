// Pre-packed weights and fused epilogues (ops/matmul.h: pack_weight, matmul_packed) against the
// unfused ops on the same ISA and precision: matmul_bias per part into column slices of y, then
// gelu, then add. Every comparison is bit for bit: the panels come from the per-call packer and
// the tile kernel sums the same products in the same order; bias, GELU and the residual are the
// same elementwise kernels. Runs per ISA (ctest .generic / .avx2 / .avx512); the panel path
// exists only on AVX-512 with AMX, elsewhere the fallback must give the same bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/debug_env.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

using namespace cbx;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

struct Weight {
  std::vector<uint8_t> bytes;
  Tensor t;
};

// [m, k] weight of dtype t with rows row_pad bytes apart beyond their size.
Weight make_weight(DType t, int64_t m, int64_t k, uint32_t seed, size_t row_pad = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.5f);
  const size_t rb = dtype_row_bytes(t, k), stride = rb + row_pad;
  Weight w;
  w.bytes.assign(stride * size_t(m) + 64, 0);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : row) v = nd(rng);
    type_traits(t).from_float(row.data(), w.bytes.data() + i * stride, k);
  }
  Tensor base;  // the byte buffer, viewed as rows of t below
  base.dtype = t;
  base.ndim = 1;
  base.shape[0] = 0;
  base.data = w.bytes.data();
  base.base = w.bytes.data();
  base.base_bytes = w.bytes.size();
  const int64_t sh[2] = {m, k}, st[2] = {int64_t(stride), int64_t(type_traits(t).block_bytes)};
  w.t = make_view(base, 2, sh, st, 0);
  return w;
}

struct Mat {
  std::vector<float> v;
  Tensor t;
};

// [b, rows, cols] f32 (b = 0: 2-D [rows, cols]) with rows cols + pad floats apart.
Mat make_mat(int64_t b, int64_t rows, int64_t cols, int64_t pad, uint32_t seed) {
  Mat a;
  const int64_t ld = cols + pad, bb = b ? b : 1;
  a.v.assign(size_t(bb * rows * ld + 16), 0.f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : a.v) x = nd(rng);
  Tensor base = make_tensor(DType::F32, {int64_t(a.v.size())}, a.v.data(), a.v.size() * 4);
  if (b) {
    const int64_t sh[3] = {b, rows, cols}, st[3] = {rows * ld * 4, ld * 4, 4};
    a.t = make_view(base, 3, sh, st, 0);
  } else {
    const int64_t sh[2] = {rows, cols}, st[2] = {ld * 4, 4};
    a.t = make_view(base, 2, sh, st, 0);
  }
  return a;
}

// Whether pack_weight makes panels for a BF16 weight here (CBX_DEBUG_NO_PREPACK=1 turns them off).
bool panels_possible() { return gemm_bf16_available() && !debug_env().no_prepack; }

Tensor cols_of(const Tensor& t, int64_t c0, int64_t n) { return slice(t, t.ndim - 1, c0, n); }

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!same_shape(a, b)) return false;
  for (int64_t r = 0; r < a.rows(); ++r)
    if (std::memcmp(a.row(r), b.row(r), size_t(a.cols()) * 4) != 0) return false;
  return true;
}

// The unfused reference: matmul_bias per part into column slices of y, gelu, y = residual + y.
void unfused(const std::vector<const Tensor*>& parts, const Tensor* bias, const Tensor& x, Tensor& y, bool gelu_act,
             const Tensor* residual) {
  int64_t o = 0;
  for (const Tensor* p : parts) {
    Tensor yi = cols_of(y, o, p->shape[0]);
    if (bias)
      matmul_bias(pool(), *p, slice(*bias, 0, o, p->shape[0]), x, yi);
    else
      matmul(pool(), *p, x, yi);
    o += p->shape[0];
  }
  if (gelu_act) gelu(pool(), y, y);
  if (residual) add(pool(), *residual, y, y);
}

class PackedTest : public ::testing::TestWithParam<std::tuple<DType, GemmPrecision>> {
 protected:
  void SetUp() override {
    if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  }
};

// Packed (parts stacked, odd shapes, strided rows) equals the per-call GEMM bit for bit, with
// and without bias; panels exist exactly when the bf16 GEMM runs.
TEST_P(PackedTest, EqualsPerCallBitForBit) {
  const auto [t, prec] = GetParam();
  const bool quant = type_traits(t).is_quantized;
  GemmPrecisionScope scope(prec);
  uint32_t seed = 100;
  struct Case {
    std::vector<int64_t> rows;
    int64_t k, n, batch;
  };
  const std::vector<Case> cases = {{{65}, quant ? 576 : 45, 300, 0}, {{40, 33, 64}, 1088, 70, 0},
                                   {{96, 96, 96}, 256, 37, 2},       {{31}, 64, 9, 0},
                                   {{64, 7}, quant ? 32 : 3, 33, 0}, {{100}, 512, 5, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " prec=" << gemm_precision_name(prec) << " K=" << c.k
                                    << " N=" << c.n << " B=" << c.batch << " parts=" << c.rows.size());
    std::vector<Weight> ws;
    std::vector<const Tensor*> parts;
    int64_t m = 0;
    for (int64_t r : c.rows) {
      ws.push_back(make_weight(t, r, c.k, seed += 7, 64));
      m += r;
    }
    for (const Weight& w : ws) parts.push_back(&w.t);
    const PackedWeight pw = pack_weight(pool(), parts, GemmPrecision::Auto, "test");
    EXPECT_EQ(pw.rows(), m);
    EXPECT_EQ(pw.cols(), c.k);
    const bool want_panels = panels_possible() && prec == GemmPrecision::BF16;
    EXPECT_EQ(pw.has_panels(), want_panels);
    if (want_panels) {
      EXPECT_GE(pw.panel_bytes(), size_t(m * ((c.k + 31) / 32 * 32) * 2));
    }
    const int64_t rows = c.batch ? c.n / c.batch + 1 : c.n;
    Mat x = make_mat(c.batch, rows, c.k, 5, seed + 1);
    std::vector<float> bv(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) bv[size_t(i)] = 0.1f * float(i % 7) - 0.3f;
    Tensor bt = make_tensor(DType::F32, {m}, bv.data(), bv.size() * 4);
    for (bool with_bias : {false, true}) {
      Mat y = make_mat(c.batch, rows, m, 3, seed + 2), yr = make_mat(c.batch, rows, m, 0, seed + 3);
      MatmulEpilogue e;
      e.bias = with_bias ? &bt : nullptr;
      matmul_packed(pool(), pw, x.t, y.t, e);
      unfused(parts, e.bias, x.t, yr.t, false, nullptr);
      EXPECT_TRUE(same_bits(y.t, yr.t)) << "bias=" << with_bias;
    }
  }
}

// Fused epilogues (bias + GELU, bias + residual, residual aliasing y, all three) and the
// LayerNorm prologue against the unfused ops (layer_norm first), with an arena for the scratch.
TEST_P(PackedTest, EpiloguesEqualUnfused) {
  const auto [t, prec] = GetParam();
  GemmPrecisionScope scope(prec);
  uint32_t seed = 500;
  for (auto [m, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{256, 1024, 300}, {1024, 256, 97}, {70, 96, 40}, {48, 64, 6}}) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " prec=" << gemm_precision_name(prec) << " M=" << m
                                    << " K=" << k << " N=" << n);
    Weight w = make_weight(t, m, k, seed += 11);
    const PackedWeight pw = pack_weight(pool(), {&w.t}, GemmPrecision::Auto, "test");
    Mat x = make_mat(0, n, k, 0, seed + 1);
    std::vector<float> bv(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) bv[size_t(i)] = 0.05f * float(i % 9) - 0.2f;
    Tensor bt = make_tensor(DType::F32, {m}, bv.data(), bv.size() * 4);
    Arena arena(matmul_packed_scratch_bytes(pw, n, pool().size()));
    std::vector<float> lw(static_cast<size_t>(k)), lb(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      lw[size_t(i)] = 1.f + 0.01f * float(i % 13);
      lb[size_t(i)] = 0.02f * float(i % 5) - 0.04f;
    }
    Tensor lwt = make_tensor(DType::F32, {k}, lw.data(), lw.size() * 4);
    Tensor lbt = make_tensor(DType::F32, {k}, lb.data(), lb.size() * 4);
    Mat xn = make_mat(0, n, k, 0, seed + 5);
    layer_norm(pool(), x.t, lwt, lbt, 1e-5f, xn.t);
    // gelu, residual, residual = y, gelu + residual = y; then LayerNorm + gelu, LayerNorm +
    // residual = y
    for (int mode = 0; mode < 6; ++mode) {
      SCOPED_TRACE(testing::Message() << "mode " << mode);
      const bool act = mode == 0 || mode == 3 || mode == 4, alias = mode == 2 || mode == 3 || mode == 5;
      const bool ln = mode >= 4, with_res = mode != 0 && mode != 4;
      Mat res = make_mat(0, n, m, 2, seed + 2);
      Mat y = make_mat(0, n, m, 2, seed + 2);  // = res
      Mat yr = make_mat(0, n, m, 0, seed + 4), r2 = make_mat(0, n, m, 2, seed + 2);
      MatmulEpilogue e;
      e.bias = &bt;
      e.act = act ? MatmulAct::Gelu : MatmulAct::None;
      e.residual = !with_res ? nullptr : alias ? &y.t : &res.t;
      if (ln) {
        e.ln_w = &lwt;
        e.ln_b = &lbt;
      }
      matmul_packed(pool(), pw, x.t, y.t, e, &arena);
      EXPECT_EQ(arena.used(), 0u);
      unfused({&w.t}, &bt, ln ? xn.t : x.t, yr.t, act, with_res ? &r2.t : nullptr);
      EXPECT_TRUE(same_bits(y.t, yr.t));
    }
    EXPECT_LE(arena.high_water(), arena.capacity());
  }
}

// The MLP (LayerNorm + ff1 + bias + GELU or SiLU, then ff2 + bias + residual) against the unfused
// ops, with x = y (the CFM case: xt += ff2(gelu(ff1(norm3(xt))))) and with x apart from y.
TEST_P(PackedTest, MlpEqualsUnfused) {
  const auto [t, prec] = GetParam();
  GemmPrecisionScope scope(prec);
  uint32_t seed = 900;
  for (auto [c, f, n] : {std::tuple<int64_t, int64_t, int64_t>{256, 1024, 300}, {64, 96, 45}, {96, 64, 7}}) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " prec=" << gemm_precision_name(prec) << " C=" << c
                                    << " F=" << f << " N=" << n);
    Weight w1 = make_weight(t, f, c, seed += 3), w2 = make_weight(t, c, f, seed += 3);
    const PackedWeight p1 = pack_weight(pool(), {&w1.t}, GemmPrecision::Auto, "ff1");
    const PackedWeight p2 = pack_weight(pool(), {&w2.t}, GemmPrecision::Auto, "ff2");
    std::vector<float> b1(static_cast<size_t>(f)), b2(static_cast<size_t>(c)), lw(static_cast<size_t>(c)),
        lb(static_cast<size_t>(c));
    for (size_t i = 0; i < b1.size(); ++i) b1[i] = 0.03f * float(i % 11) - 0.1f;
    for (size_t i = 0; i < b2.size(); ++i) {
      b2[i] = 0.02f * float(i % 7) - 0.05f;
      lw[i] = 1.f - 0.01f * float(i % 9);
      lb[i] = 0.01f * float(i % 4);
    }
    Tensor b1t = make_tensor(DType::F32, {f}, b1.data(), b1.size() * 4);
    Tensor b2t = make_tensor(DType::F32, {c}, b2.data(), b2.size() * 4);
    Tensor lwt = make_tensor(DType::F32, {c}, lw.data(), lw.size() * 4);
    Tensor lbt = make_tensor(DType::F32, {c}, lb.data(), lb.size() * 4);
    Arena arena(matmul_mlp_scratch_bytes(p1, p2, n, pool().size()));
    for (int mode = 0; mode < 3; ++mode) {  // GELU with x = y, GELU with x apart, SiLU with x = y
      const bool in_place = mode != 1;
      const MatmulAct act = mode == 2 ? MatmulAct::Silu : MatmulAct::Gelu;
      SCOPED_TRACE(testing::Message() << "mode " << mode);
      Mat x = make_mat(0, n, c, 3, seed + 1), y = make_mat(0, n, c, 3, seed + 1);
      Mat other = make_mat(0, n, c, 0, seed + 2), hid = make_mat(0, n, f, 0, seed + 4);
      Tensor& xin = in_place ? y.t : other.t;
      // Reference: from copies of the same inputs.
      Mat rx = make_mat(0, n, c, in_place ? 3 : 0, in_place ? seed + 1 : seed + 2), ry = make_mat(0, n, c, 3, seed + 1);
      Mat rn = make_mat(0, n, c, 0, seed + 5), rh = make_mat(0, n, f, 0, seed + 6), rt = make_mat(0, n, c, 0, seed + 7);
      layer_norm(pool(), rx.t, lwt, lbt, 1e-5f, rn.t);
      matmul_bias(pool(), w1.t, b1t, rn.t, rh.t);
      if (act == MatmulAct::Gelu)
        gelu(pool(), rh.t, rh.t);
      else
        silu(pool(), rh.t, rh.t);
      matmul_bias(pool(), w2.t, b2t, rh.t, rt.t);
      add(pool(), ry.t, rt.t, ry.t);

      matmul_mlp(pool(), p1, MatmulEpilogue{&b1t, act, nullptr, &lwt, &lbt, 1e-5f}, p2,
                 MatmulEpilogue{&b2t, MatmulAct::None, &y.t}, xin, hid.t, y.t, &arena);
      EXPECT_EQ(arena.used(), 0u);
      EXPECT_TRUE(same_bits(y.t, ry.t));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                                              DType::Q4_0),
                                            ::testing::Values(GemmPrecision::F32, GemmPrecision::BF16)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  gemm_precision_name(std::get<1>(info.param));
                         });

// The panel paths share their items out with the pool's WorkSplit (own block, then the
// others' tails): pools of 1, 3 and 5 threads (more threads than cores, so some get
// preempted and others steal) give the 2-thread pool's bits, residual epilogue included
// (an item run twice would add its residual twice, one skipped would keep y's old values).
TEST(Packed, ThreadCountsGiveTheSameBits) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  GemmPrecisionScope scope(GemmPrecision::BF16);
  Weight w = make_weight(DType::Q4_0, 160, 256, 11), w1 = make_weight(DType::F16, 512, 256, 12),
         w2 = make_weight(DType::F16, 256, 512, 13);
  const PackedWeight pw = pack_weight(pool(), {&w.t}, GemmPrecision::Auto, "w");
  const PackedWeight p1 = pack_weight(pool(), {&w1.t}, GemmPrecision::Auto, "ff1");
  const PackedWeight p2 = pack_weight(pool(), {&w2.t}, GemmPrecision::Auto, "ff2");
  const int64_t n = 301;
  Mat x = make_mat(0, n, 256, 0, 21);
  auto run = [&](ThreadPool& tp, Mat& y, Mat& z) {
    matmul_packed(tp, pw, x.t, y.t, MatmulEpilogue{nullptr, MatmulAct::None, &y.t});
    Mat hid = make_mat(0, n, 512, 0, 23);
    Arena arena(matmul_mlp_scratch_bytes(p1, p2, n, tp.size()));
    matmul_mlp(tp, p1, MatmulEpilogue{nullptr, MatmulAct::Gelu}, p2, MatmulEpilogue{nullptr, MatmulAct::None, &z.t},
               z.t, hid.t, z.t, &arena);
  };
  Mat y_ref = make_mat(0, n, 160, 0, 22), z_ref = make_mat(0, n, 256, 0, 24);
  run(pool(), y_ref, z_ref);
  for (int threads : {1, 3, 5}) {
    ThreadPool tp(threads);
    for (int rep = 0; rep < 3; ++rep) {
      Mat y = make_mat(0, n, 160, 0, 22), z = make_mat(0, n, 256, 0, 24);
      run(tp, y, z);
      EXPECT_TRUE(same_bits(y.t, y_ref.t)) << threads << " threads, rep " << rep;
      EXPECT_TRUE(same_bits(z.t, z_ref.t)) << threads << " threads, rep " << rep;
    }
  }
}

// A weight packed for BF16 run under an F32 scope takes the per-call F32 path (same bits).
TEST(Packed, PanelsFollowTheCallsPrecision) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  Weight w = make_weight(DType::Q4_0, 96, 256, 7);
  const PackedWeight pw = pack_weight(pool(), {&w.t}, GemmPrecision::BF16, "test");
  EXPECT_EQ(pw.has_panels(), panels_possible());
  Mat x = make_mat(0, 64, 256, 0, 8), y = make_mat(0, 64, 96, 0, 9), yr = make_mat(0, 64, 96, 0, 10);
  GemmPrecisionScope f32(GemmPrecision::F32);
  matmul_packed(pool(), pw, x.t, y.t);
  matmul(pool(), w.t, x.t, yr.t);
  EXPECT_TRUE(same_bits(y.t, yr.t));
  // Without an arena, the residual-aliasing fallback keeps its GEMM result apart from matmul's
  // scratch.
  std::vector<float> bv(96, 0.25f);
  Tensor bt = make_tensor(DType::F32, {96}, bv.data(), bv.size() * 4);
  Mat r = make_mat(0, 64, 96, 0, 11), r2 = make_mat(0, 64, 96, 0, 11), tmp = make_mat(0, 64, 96, 0, 12);
  matmul_packed(pool(), pw, x.t, r.t, MatmulEpilogue{&bt, MatmulAct::None, &r.t});
  matmul_bias(pool(), w.t, bt, x.t, tmp.t);
  add(pool(), r2.t, tmp.t, r2.t);
  EXPECT_TRUE(same_bits(r.t, r2.t));
}

TEST(Packed, ErrorsNameTheProblem) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  Weight a = make_weight(DType::F16, 32, 64, 1), b = make_weight(DType::F16, 32, 96, 2);
  Weight q = make_weight(DType::Q8_0, 32, 64, 3);
  EXPECT_THROW(pack_weight(pool(), {}, GemmPrecision::Auto, "w"), Error);
  EXPECT_THROW(pack_weight(pool(), {&a.t, &b.t}, GemmPrecision::Auto, "w"), Error);  // K differs
  EXPECT_THROW(pack_weight(pool(), {&a.t, &q.t}, GemmPrecision::Auto, "w"),
               Error);  // dtype differs
  const PackedWeight pw = pack_weight(pool(), {&a.t, &a.t}, GemmPrecision::BF16, "w");
  EXPECT_EQ(pw.rows(), 64);
  Mat x = make_mat(0, 40, 64, 0, 4), y = make_mat(0, 40, 64, 0, 5), bad = make_mat(0, 40, 63, 0, 6);
  EXPECT_THROW(matmul_packed(pool(), pw, bad.t, y.t), Error);  // K mismatch
  EXPECT_THROW(matmul_packed(pool(), PackedWeight{}, x.t, y.t), Error);
  std::vector<float> bv(63);
  Tensor bt = make_tensor(DType::F32, {63}, bv.data(), bv.size() * 4);
  MatmulEpilogue e;
  e.bias = &bt;
  EXPECT_THROW(matmul_packed(pool(), pw, x.t, y.t, e), Error);  // bias [63] for M = 64
  // A residual that overlaps y shifted by one row.
  Mat big = make_mat(0, 41, 64, 0, 7);
  Tensor y0 = slice(big.t, 0, 0, 40), y1 = slice(big.t, 0, 1, 40);
  MatmulEpilogue r;
  r.residual = &y1;
  try {
    matmul_packed(pool(), pw, x.t, y0, r);
    ADD_FAILURE() << "an overlapping residual was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("overlaps"), std::string::npos) << err.what();
  }
}

}  // namespace
