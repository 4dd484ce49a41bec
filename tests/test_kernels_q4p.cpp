// Planar Q4_0 (q4p, kernels/matvec_q4p.h): packing (row pairs; block-interleaved full
// groups of 16 blocks, the rest in order) and the dot kernel of the active ISA
// (CBX_FORCE_ISA) against the generic GGUF-layout Q4_0 dot on the same weights, and
// RowLinear (which packs Q4_0 where the kernel exists) against ops/matmul.
//   - generic q4p dot == generic GGUF dot exactly (same arithmetic, same order);
//   - SIMD q4p dot within 1e-5 of sum_b |d_w d_x isum_b| (integer block sums are exact,
//     only the float accumulation order differs) of the generic one;
//   - RowLinear rows == ops/matmul's dot path exactly (the SIMD q4p kernel keeps the
//     GGUF-layout SIMD kernel's order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matvec_q4p.h"
#include "ops/matmul.h"
#include "ops/row_linear.h"

using namespace cbx;

namespace {

struct Q4Rows {
  int64_t m, k;
  std::vector<uint8_t> gguf, q4p;
  std::vector<float> x;
  Q4Rows(int64_t m_, int64_t k_, uint32_t seed) : m(m_), k(k_) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd;
    const size_t rb = dtype_row_bytes(DType::Q4_0, k);
    gguf.resize(rb * size_t(m));
    q4p.assign(q4p_matrix_bytes(m, k), 0xcd);
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      for (float& v : row) v = nd(g) * (r % 3 == 0 ? 4.f : 0.5f);
      type_traits(DType::Q4_0).from_float(row.data(), gguf.data() + size_t(r) * rb, k);
    }
    q4p_pack_rows(gguf.data(), rb, m, k, q4p.data());
    x.resize(static_cast<size_t>(k));
    for (float& v : x) v = nd(g);
  }
};

const int64_t kShapes[][2] = {{1, 32}, {7, 96}, {37, 512}, {16, 544}, {33, 1024}, {5, 4128}};

}  // namespace

// Three rows of 17 blocks: one pair and a last row paired with zeros. Per pair: the full
// group's nibbles (row 0, row 1), its scales (row 0, row 1), then block 16 (past the only
// full group, bytes in order): nibbles (row 0, row 1), scales (row 0, row 1), zero padding.
TEST(KernelsQ4p, PackLayout) {
  Q4Rows w(3, 544, 5);
  const size_t rb = dtype_row_bytes(DType::Q4_0, 544), pb = q4p_row_bytes(544);
  EXPECT_EQ(pb % 64, 0u);
  EXPECT_GE(pb, size_t(17 * 18));
  ASSERT_EQ(w.q4p.size(), 4 * pb);
  EXPECT_EQ(q4p_matrix_bytes(4, 544), 4 * pb);
  for (int64_t r = 0; r < 4; ++r) {
    const uint8_t* pair = w.q4p.data() + size_t(r / 2) * 2 * pb;
    const int i = int(r % 2);
    for (int b = 0; b < 17; ++b) {
      for (int j = 0; j < 16; ++j) {
        const size_t at = b < 16 ? size_t(i * 256 + (j / 4) * 64 + b * 4 + j % 4) : size_t(576 + i * 16 + j);
        const uint8_t want = r < 3 ? reinterpret_cast<const BlockQ4_0*>(w.gguf.data() + size_t(r) * rb)[b].qs[j] : 0;
        ASSERT_EQ(pair[at], want) << "row " << r << " block " << b << " byte " << j;
      }
      uint16_t d, want = 0;
      std::memcpy(&d, pair + (b < 16 ? size_t(512 + i * 32 + b * 2) : size_t(576 + 32 + i * 2)), 2);
      if (r < 3) want = reinterpret_cast<const BlockQ4_0*>(w.gguf.data() + size_t(r) * rb)[b].d;
      ASSERT_EQ(d, want) << "row " << r << " block " << b;
    }
  }
  for (int p = 0; p < 2; ++p)
    for (size_t at = 576 + 36; at < 2 * pb; ++at) ASSERT_EQ(w.q4p[size_t(p) * 2 * pb + at], 0) << "pair " << p << " padding byte " << at;
}

TEST(KernelsQ4p, DotMatchesGenericGguf) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_FORCE_ISA asks for more than this CPU has";
  const MatmulKernels& gen = matmul_kernels(Isa::Generic);
  const DotKernel* simd = q4p_dot(active_isa());
  const DotKernel& pg = q4p_dot_generic();
  uint32_t seed = 1;
  for (const auto& sh : kShapes) {
    Q4Rows w(sh[0], sh[1], seed++);
    const int64_t m = w.m, k = w.k;
    std::vector<uint8_t> a8(act_row_bytes(ActFormat::Q8, k));
    gen.to_q8(w.x.data(), k, a8.data());
    std::vector<float> ref(static_cast<size_t>(m)), got(static_cast<size_t>(m), NAN);
    gen.dot[kWQ4_0].fn(w.gguf.data(), dtype_row_bytes(DType::Q4_0, k), 0, m, a8.data(), 0, 1, k, ref.data(), m);
    pg.fn(w.q4p.data(), q4p_row_bytes(k), 0, m, a8.data(), 0, 1, k, got.data(), m);
    for (int64_t r = 0; r < m; ++r) ASSERT_EQ(got[size_t(r)], ref[size_t(r)]) << "generic q4p, k " << k << " row " << r;
    if (!simd) continue;
    std::vector<uint8_t> as(act_row_bytes(simd->act, k));
    simd->convert(w.x.data(), k, as.data());
    std::fill(got.begin(), got.end(), NAN);
    // Rows [1, m) too: an odd start and an odd count.
    simd->fn(w.q4p.data(), q4p_row_bytes(k), 0, m, as.data(), 0, 1, k, got.data(), m);
    const auto* dx = q8_act_d(a8.data(), k);
    const auto* qx = q8_act_qs(a8.data());
    for (int64_t r = 0; r < m; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(w.gguf.data() + size_t(r) * dtype_row_bytes(DType::Q4_0, k));
      double mag = 0;
      for (int64_t b = 0; b < k / 32; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j)
          isum += ((blk[b].qs[j] & 15) - 8) * qx[b * 32 + j] + ((blk[b].qs[j] >> 4) - 8) * qx[b * 32 + j + 16];
        mag += std::fabs(double(f16_to_f32(blk[b].d)) * dx[b] * isum);
      }
      EXPECT_NEAR(got[size_t(r)], ref[size_t(r)], 1e-5 * mag + 1e-6) << isa_name(active_isa()) << " k " << k << " row " << r;
    }
  }
}

TEST(KernelsQ4p, RowLinearMatchesMatmul) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_FORCE_ISA asks for more than this CPU has";
  ThreadPool pool(1);
  uint32_t seed = 50;
  for (const auto& sh : kShapes) {
    Q4Rows w(sh[0], sh[1], seed++);
    const int64_t m = w.m, k = w.k;
    Tensor wt = make_tensor(DType::Q4_0, {m, k}, w.gguf.data(), w.gguf.size());
    std::vector<float> bias(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) bias[size_t(i)] = 0.01f * float(i);
    Tensor bt = make_tensor(DType::F32, {m}, bias.data(), bias.size() * 4);
    Tensor xt = make_tensor(DType::F32, {1, k}, w.x.data(), w.x.size() * 4);
    std::vector<float> ref(static_cast<size_t>(m)), got(static_cast<size_t>(m), NAN);
    Tensor yt = make_tensor(DType::F32, {1, m}, ref.data(), ref.size() * 4);
    matmul_bias(pool, wt, bt, xt, yt);
    RowLinear rl(wt, bt, "test");
    EXPECT_EQ(rl.packed_bytes(), q4p_dot(active_isa()) ? q4p_matrix_bytes(m, k) : 0u);
    std::vector<uint8_t> abuf(rl.act_bytes() + 64);
    const void* a = rl.act(w.x.data(), abuf.data());
    // Two pieces, the second starting at an odd row.
    const int64_t mid = m / 2 | 1;
    rl.run(0, std::min(mid, m), a, got.data(), RowEpilogue::Store);
    if (mid < m) rl.run(mid, m, a, got.data(), RowEpilogue::Store);
    for (int64_t r = 0; r < m; ++r) ASSERT_EQ(got[size_t(r)], ref[size_t(r)]) << "k " << k << " row " << r;
  }
}

// The quantized dot kernels take several activation rows at once (a CFG decode step has
// 2) and unpack each weight block once for all of them; every (weight row, activation
// row) result must equal the one-row call exactly, for any row count and row range.
TEST(KernelsQ4p, MultiRowDotEqualsOneRowCalls) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_FORCE_ISA asks for more than this CPU has";
  const MatmulKernels& kern = matmul_kernels(active_isa());
  const DotKernel* q4p = q4p_dot(active_isa());
  std::mt19937 g(7);
  std::normal_distribution<float> nd;
  uint32_t seed = 90;
  for (const auto& sh : kShapes) {
    Q4Rows w(sh[0], sh[1], seed++);
    const int64_t m = w.m, k = w.k;
    std::vector<uint8_t> q8(dtype_row_bytes(DType::Q8_0, k) * size_t(m));
    {
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t r = 0; r < m; ++r) {
        for (float& v : row) v = nd(g);
        type_traits(DType::Q8_0).from_float(row.data(), q8.data() + size_t(r) * dtype_row_bytes(DType::Q8_0, k), k);
      }
    }
    struct Case {
      const char* name;
      const DotKernel* d;
      const uint8_t* w;
      size_t ws;
    };
    const Case cases[] = {{"q4_0", &kern.dot[kWQ4_0], w.gguf.data(), dtype_row_bytes(DType::Q4_0, k)},
                          {"q8_0", &kern.dot[kWQ8_0], q8.data(), dtype_row_bytes(DType::Q8_0, k)},
                          {"q4p", q4p, w.q4p.data(), q4p_row_bytes(k)}};
    for (const Case& c : cases) {
      if (!c.d) continue;
      for (int64_t n_rows : {1, 2, 3, 4, 5, 7}) {
        SCOPED_TRACE(testing::Message() << c.name << " " << isa_name(active_isa()) << " m " << m << " k " << k
                                        << " n_rows " << n_rows);
        // Activation rows with a gap between them (as != the row size).
        const size_t as = act_row_bytes(c.d->act, k) + 64;
        std::vector<uint8_t> act(as * size_t(n_rows));
        std::vector<float> x(static_cast<size_t>(k));
        for (int64_t n = 0; n < n_rows; ++n) {
          for (float& v : x) v = nd(g) * float(n + 1);
          c.d->convert(x.data(), k, act.data() + size_t(n) * as);
        }
        const int64_t m0 = m > 2 ? 1 : 0, ldy = m + 3;  // an odd first row, a padded output
        std::vector<float> got(size_t(ldy * n_rows), NAN), ref(size_t(ldy * n_rows), NAN);
        c.d->fn(c.w, c.ws, m0, m, act.data(), as, n_rows, k, got.data(), ldy);
        for (int64_t n = 0; n < n_rows; ++n)
          for (int64_t r = m0; r < m; ++r)
            c.d->fn(c.w, c.ws, r, r + 1, act.data() + size_t(n) * as, as, 1, k, ref.data() + n * ldy, ldy);
        for (int64_t n = 0; n < n_rows; ++n)
          for (int64_t r = 0; r < m; ++r) {
            const float a = got[size_t(n * ldy + r)], b = ref[size_t(n * ldy + r)];
            if (r < m0) {
              ASSERT_TRUE(std::isnan(a)) << "row " << r << " outside [m0, m1) written";
            } else {
              ASSERT_EQ(a, b) << "act row " << n << " weight row " << r;
            }
          }
      }
    }
  }
}

// The AVX-512 q4p dot prefetching into L1 and into L2 (stream_prefetch_level(), picked per
// CPU) computes the same bits, and both those of the GGUF-layout AVX-512 Q4_0 dot.
TEST(KernelsQ4p, PrefetchLevelsGiveTheSameBits) {
  if (detected_isa() != Isa::Avx512) GTEST_SKIP() << "no AVX-512 q4p kernel on this CPU";
  const DotKernel& gguf = matmul_kernels(Isa::Avx512).dot[kWQ4_0];
  uint32_t seed = 300;
  for (const auto& sh : kShapes) {
    Q4Rows w(sh[0], sh[1], seed++);
    const int64_t m = w.m, k = w.k;
    std::vector<uint8_t> a8(act_row_bytes(gguf.act, k));
    gguf.convert(w.x.data(), k, a8.data());
    std::vector<float> ref(size_t(m), NAN);
    gguf.fn(w.gguf.data(), dtype_row_bytes(DType::Q4_0, k), 0, m, a8.data(), 0, 1, k, ref.data(), m);
    for (PrefetchLevel level : {PrefetchLevel::L1, PrefetchLevel::L2}) {
      const DotKernel& d = q4p_dot_avx512(level);
      std::vector<uint8_t> act(act_row_bytes(d.act, k));
      d.convert(w.x.data(), k, act.data());
      std::vector<float> got(size_t(m), NAN);
      d.fn(w.q4p.data(), q4p_row_bytes(k), 0, m, act.data(), 0, 1, k, got.data(), m);
      for (int64_t r = 0; r < m; ++r)
        ASSERT_EQ(got[size_t(r)], ref[size_t(r)]) << "level " << int(level) << " k " << k << " row " << r;
    }
  }
}
