// conv1d_scratch_bytes and conv_transpose1d_scratch_bytes (ops/conv.h) are the exact scratch
// the calls take: each op runs with an Arena of exactly that capacity (also when the arena's
// offset is not 64-byte aligned), reaches exactly that high-water mark, and one 64-byte step
// less fails with the arena's out-of-memory error. Over f32 and BF16 GEMM precision (the bf16
// paths where this CPU / CBX_DEBUG_FORCE_ISA has them), thread counts 1 to 3, every conv1d
// path (padded stride 1, unpadded, grouped, strided im2col, direct bf16 with and without
// packed weights, batched) and conv_transpose1d with and without its packed weights.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/arena.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "nn_test_util.h"
#include "ops/conv.h"
#include "ops/matmul.h"

using namespace cbx;
using nn_test::Buf;

namespace {

// call(arena) with an arena of exactly `need` bytes, behind a 1-byte allocation (the scratch
// then starts at the next 64-byte boundary) and one 64-byte step short.
template <class F>
void expect_exact(size_t need, F&& call, const std::string& what) {
  SCOPED_TRACE(what + ": need " + std::to_string(need));
  ASSERT_GT(need, 0u);
  {
    Arena a(need, false);
    call(&a);
    EXPECT_EQ(a.used(), 0u);
    EXPECT_EQ(a.high_water(), need);
  }
  {
    Arena a(64 + need, false);
    a.alloc_bytes(1, 1, "before");
    call(&a);
    EXPECT_EQ(a.used(), 1u);
    EXPECT_EQ(a.high_water(), 64 + need);
  }
  Arena small(((need + 63) & ~size_t(63)) - 64, false);
  try {
    call(&small);
    ADD_FAILURE() << "an arena one 64-byte step smaller did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("arena: out of memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(small.used(), 0u);
}

constexpr auto P = nn_test::conv1d_params;  // stride, dilation, pad left, pad right, groups

void run_precision(GemmPrecision prec) {
  GemmPrecisionScope scope(prec);
  struct C1 {
    int64_t B, Cin, Cout, T, K;
    Conv1dParams p;
  };
  const C1 cases[] = {
      {1, 3, 5, 17, 3, P(1, 1, 1, 1, 1)},        // same padding, tiny
      {2, 7, 11, 40, 4, P(1, 1, 0, 3, 1)},       // batch, right pad
      {1, 6, 9, 50, 1, P(1, 1, 0, 0, 1)},        // no padding: no padded copy
      {1, 64, 64, 333, 11, P(1, 5, 25, 25, 1)},  // HiFT ResBlock
      {1, 8, 12, 29, 3, P(1, 2, 4, 0, 4)},       // grouped, dilated causal
      {1, 16, 16, 40, 3, P(1, 1, 1, 1, 16)},     // depthwise
      {1, 18, 10, 301, 30, P(15, 1, 7, 7, 1)},   // strided (im2col)
      {1, 40, 50, 1000, 3, P(2, 1, 1, 1, 1)},    // strided, several chunks
      {1, 4, 6, 9, 3, P(2, 1, 1, 1, 1)},         // strided, fewer outputs than a chunk's minimum
      {1, 40, 150, 100, 3, P(1, 2, 2, 2, 1)},    // C_out 150
      {1, 24, 530, 70, 3, P(1, 1, 1, 1, 1)},     // C_out > 512: no direct conv
      {1, 20, 8, 1, 1, P(1, 1, 0, 0, 1)},        // T = 1
      {1, 256, 40, 700, 3, P(1, 1, 2, 0, 1)},    // several direct input chunks
      {3, 80, 80, 120, 3, P(1, 1, 1, 1, 1)},     // batched, CFM-like
  };
  uint32_t seed = 7000;
  for (int nt : {1, 2, 3}) {
    ThreadPool pool(nt);
    for (const C1& c : cases) {
      const int64_t Tout = conv1d_out_len(c.T, c.K, c.p);
      Buf x({c.B, c.Cin, c.T}, seed += 3), w({c.Cout, c.Cin / c.p.groups, c.K}, seed + 1), b({c.Cout}, seed + 2);
      Buf y({c.B, c.Cout, Tout});
      const std::string what = "conv1d Cin " + std::to_string(c.Cin) + " Cout " + std::to_string(c.Cout) + " T " +
                               std::to_string(c.T) + " K " + std::to_string(c.K) + " stride " +
                               std::to_string(c.p.stride) + " groups " + std::to_string(c.p.groups) + " threads " +
                               std::to_string(nt);
      expect_exact(
          conv1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, c.p, nt),
          [&](Arena* a) { conv1d(pool, x.t, w.t, b.t, y.t, c.p, a); }, what);
      if (c.p.groups != 1) continue;
      const Conv1dPacked pk = conv1d_pack(pool, w.t, b.t);
      Conv1dParams pp = c.p;
      pp.packed = &pk;
      const size_t packed_need = conv1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, pp, nt);
      if (!pk.empty() && conv1d_snake_fused(c.Cout, c.p)) {
        EXPECT_LT(packed_need, conv1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, c.p, nt)) << what;
      }
      expect_exact(
          packed_need, [&](Arena* a) { conv1d(pool, x.t, w.t, b.t, y.t, pp, a); }, what + " packed");
      if (c.B == 1 && conv1d_snake_fused(c.Cout, c.p)) {
        Buf alpha({c.Cin}, seed + 4, 0.2f, 2.f), y2({c.Cout, Tout});
        const Tensor x2 = slice(x.t, 0, 0, 1);
        const int64_t sh[2] = {c.Cin, c.T}, st[2] = {c.T * 4, 4};
        const Tensor xv = make_view(x2, 2, sh, st, 0);
        for (const Conv1dParams* q : {&c.p, static_cast<const Conv1dParams*>(&pp)})
          expect_exact(
              conv1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, *q, nt),
              [&](Arena* a) { conv1d_snake(pool, xv, alpha.t, w.t, b.t, Tensor{}, y2.t, *q, a); }, what + " snake");
      }
    }
    struct Ct {
      int64_t Cin, Cout, T, K, s, pad;
    };
    const Ct tcases[] = {{16, 8, 13, 16, 8, 4},   {3, 5, 7, 4, 2, 1},       {5, 3, 1, 3, 1, 0},
                         {40, 24, 300, 16, 8, 4}, {64, 32, 2100, 16, 8, 4}, {512, 256, 40, 16, 8, 4}};
    for (const Ct& c : tcases) {
      ConvTranspose1dParams p;
      p.stride = c.s;
      p.padding = c.pad;
      const int64_t Tout = conv_transpose1d_out_len(c.T, c.K, p);
      Buf x({c.Cin, c.T}, seed += 3), w({c.Cin, c.Cout, c.K}, seed + 1), b({c.Cout}, seed + 2), y({c.Cout, Tout});
      const std::string what = "conv_transpose1d Cin " + std::to_string(c.Cin) + " Cout " + std::to_string(c.Cout) +
                               " T " + std::to_string(c.T) + " threads " + std::to_string(nt);
      expect_exact(
          conv_transpose1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, p, nt),
          [&](Arena* a) { conv_transpose1d(pool, x.t, w.t, b.t, y.t, p, a); }, what);
      const ConvTranspose1dPacked pk = conv_transpose1d_pack(pool, w.t);
      ConvTranspose1dParams pp = p;
      pp.packed = &pk;
      expect_exact(
          conv_transpose1d_scratch_bytes(c.Cin, c.Cout, c.T, c.K, pp, nt),
          [&](Arena* a) { conv_transpose1d(pool, x.t, w.t, b.t, y.t, pp, a); }, what + " packed");
    }
  }
}

}  // namespace

TEST(ConvScratch, F32IsExact) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  run_precision(GemmPrecision::F32);
}

TEST(ConvScratch, Bf16IsExact) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  run_precision(GemmPrecision::BF16);
}

// The bf16 figures differ from the f32 ones where the bf16 kernels exist (the packing), so
// the two tests above cover different paths there.
TEST(ConvScratch, PrecisionChangesTheAnswer) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const Conv1dParams p = P(1, 1, 1, 1, 1);
  size_t f32, bf16, tf32, tbf16;
  ConvTranspose1dParams tp;
  tp.stride = 8;
  tp.padding = 4;
  {
    GemmPrecisionScope s(GemmPrecision::F32);
    f32 = conv1d_scratch_bytes(64, 64, 300, 3, p, 2);
    tf32 = conv_transpose1d_scratch_bytes(64, 32, 300, 16, tp, 2);
  }
  {
    GemmPrecisionScope s(GemmPrecision::BF16);
    bf16 = conv1d_scratch_bytes(64, 64, 300, 3, p, 2);
    tbf16 = conv_transpose1d_scratch_bytes(64, 32, 300, 16, tp, 2);
  }
  EXPECT_EQ(f32, size_t(64 * 302 * 4 + 64 * 3 * 8));  // padded input, row offsets
  EXPECT_EQ(tf32, size_t(32 * 16 * 300 * 4));         // the columns of all 300 inputs
  if (gemm_bf16_available()) {
    EXPECT_NE(bf16, f32);
    EXPECT_GT(tbf16, tf32);
  } else {
    EXPECT_EQ(bf16, f32);
    EXPECT_EQ(tbf16, tf32);
  }
  EXPECT_THROW(conv1d_scratch_bytes(64, 64, 2, 5, p, 2), Error);  // too short for the kernel
  EXPECT_THROW(conv1d_scratch_bytes(6, 4, 30, 3, P(1, 1, 0, 0, 4), 2), Error);
}
