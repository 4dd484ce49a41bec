// Planar row pairs (q4p for Q4_0, q8p for Q8_0; kernels/matvec_q4p.h): packing (row
// pairs; block-interleaved full groups of 16 blocks, the rest in order; Q8_0 as w + 128)
// and the dot kernel of the active ISA (CBX_DEBUG_FORCE_ISA) against the generic GGUF-layout dot
// on the same weights, and RowLinear (which packs where the kernel exists) against
// ops/matmul.
//   - generic planar dot == generic GGUF dot exactly (same arithmetic, same order);
//   - SIMD planar dot within 1e-5 of sum_b |d_w d_x isum_b| (integer block sums are exact,
//     only the float accumulation order differs) of the generic one;
//   - RowLinear rows == ops/matmul's dot path exactly (the SIMD planar kernels keep the
//     GGUF-layout SIMD kernels' order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/x86_kernels.h"
#include "kernels/matmul.h"
#include "kernels/matvec_q4p.h"
#include "ops/matmul.h"
#include "ops/row_linear.h"

using namespace cbx;

namespace {

const DType kTypes[] = {DType::Q4_0, DType::Q8_0};

int weight_slot(DType t) { return t == DType::Q8_0 ? kWQ8_0 : kWQ4_0; }

struct QRows {
  DType type;
  int64_t m, k;
  size_t rb, pb;  // GGUF and planar row bytes
  std::vector<uint8_t> gguf, planar;
  std::vector<float> x;
  QRows(DType t, int64_t m_, int64_t k_, uint32_t seed)
      : type(t), m(m_), k(k_), rb(dtype_row_bytes(t, k_)), pb(planar_row_bytes(t, k_)) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd;
    gguf.resize(rb * size_t(m));
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      for (float& v : row) v = nd(g) * (r % 3 == 0 ? 4.f : 0.5f);
      type_traits(t).from_float(row.data(), gguf.data() + size_t(r) * rb, k);
    }
    planar.assign(planar_matrix_bytes(t, m, k), 0xcd);
    planar_pack_rows(t, gguf.data(), rb, m, k, planar.data());
    x.resize(static_cast<size_t>(k));
    for (float& v : x) v = nd(g);
  }
  // Quant byte j and scale of block b of GGUF row r (Q8_0 bytes as signed weights).
  const uint8_t* block(int64_t r, int64_t b) const {
    return gguf.data() + size_t(r) * rb + size_t(b) * (rb / size_t(k / 32));
  }
  uint16_t scale(int64_t r, int64_t b) const {
    uint16_t d;
    std::memcpy(&d, block(r, b), 2);
    return d;
  }
  // sum_j w_j x_j of block b of row r against Q8 activations qx (exact integers).
  int32_t isum(int64_t r, int64_t b, const int8_t* qx) const {
    const uint8_t* q = block(r, b) + 2;
    int32_t s = 0;
    if (type == DType::Q8_0) {
      for (int j = 0; j < 32; ++j) s += int32_t(int8_t(q[j])) * qx[b * 32 + j];
    } else {
      for (int j = 0; j < 16; ++j) s += ((q[j] & 15) - 8) * qx[b * 32 + j] + ((q[j] >> 4) - 8) * qx[b * 32 + j + 16];
    }
    return s;
  }
};

const int64_t kShapes[][2] = {{1, 32}, {7, 96}, {37, 512}, {16, 544}, {9, 800}, {33, 1024}, {5, 4128}};

}  // namespace

// Three rows of 17 blocks: one pair and a last row paired with zeros. Per pair: the full
// group's quants (row 0, row 1), its scales (row 0, row 1), then block 16 (past the only
// full group, bytes in order): quants (row 0, row 1), scales (row 0, row 1), zero padding.
TEST(KernelsPlanar, PackLayout) {
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    QRows w(t, 3, 544, 5);
    const int qb = planar_quant_bytes(t);
    const size_t pb = w.pb, group = size_t(2 * 16 * (qb + 2));
    EXPECT_EQ(pb % 64, 0u);
    EXPECT_GE(pb, size_t(17 * (qb + 2)));
    ASSERT_EQ(w.planar.size(), 4 * pb);
    EXPECT_EQ(planar_matrix_bytes(t, 4, 544), 4 * pb);
    const uint8_t flip = t == DType::Q8_0 ? 0x80 : 0;
    for (int64_t r = 0; r < 4; ++r) {
      const uint8_t* pair = w.planar.data() + size_t(r / 2) * 2 * pb;
      const int i = int(r % 2);
      for (int b = 0; b < 17; ++b) {
        for (int j = 0; j < qb; ++j) {
          const size_t at = b < 16 ? size_t(i * 16 * qb + (j / 4) * 64 + b * 4 + j % 4) : group + size_t(i * qb + j);
          const uint8_t want = r < 3 ? uint8_t(w.block(r, b)[2 + j] ^ flip) : 0;
          ASSERT_EQ(pair[at], want) << "row " << r << " block " << b << " byte " << j;
        }
        uint16_t d;
        std::memcpy(&d, pair + (b < 16 ? size_t(16 * 2 * qb + i * 32 + b * 2) : group + size_t(2 * qb + i * 2)), 2);
        ASSERT_EQ(d, r < 3 ? w.scale(r, b) : 0) << "row " << r << " block " << b;
      }
    }
    for (int p = 0; p < 2; ++p)
      for (size_t at = group + size_t(2 * (qb + 2)); at < 2 * pb; ++at)
        ASSERT_EQ(w.planar[size_t(p) * 2 * pb + at], 0) << "pair " << p << " padding byte " << at;
  }
}

TEST(KernelsPlanar, DotMatchesGenericGguf) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  const MatmulKernels& gen = matmul_kernels(Isa::Generic);
  uint32_t seed = 1;
  for (DType t : kTypes) {
    const DotKernel* simd = planar_dot(t, active_isa());
    const DotKernel& pg = planar_dot_generic(t);
    for (const auto& sh : kShapes) {
      QRows w(t, sh[0], sh[1], seed++);
      const int64_t m = w.m, k = w.k;
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << isa_name(active_isa()) << " m " << m << " k " << k);
      std::vector<uint8_t> a8(act_row_bytes(ActFormat::Q8, k));
      gen.to_q8(w.x.data(), k, a8.data());
      std::vector<float> ref(static_cast<size_t>(m)), got(static_cast<size_t>(m), NAN);
      gen.dot[weight_slot(t)].fn(w.gguf.data(), w.rb, 0, m, a8.data(), 0, 1, k, ref.data(), m);
      pg.fn(w.planar.data(), w.pb, 0, m, a8.data(), 0, 1, k, got.data(), m);
      for (int64_t r = 0; r < m; ++r) ASSERT_EQ(got[size_t(r)], ref[size_t(r)]) << "generic planar, row " << r;
      if (!simd) continue;
      std::vector<uint8_t> as(act_row_bytes(simd->act, k));
      simd->convert(w.x.data(), k, as.data());
      std::fill(got.begin(), got.end(), NAN);
      simd->fn(w.planar.data(), w.pb, 0, m, as.data(), 0, 1, k, got.data(), m);
      const auto* dx = q8_act_d(a8.data(), k);
      const auto* qx = q8_act_qs(a8.data());
      for (int64_t r = 0; r < m; ++r) {
        double mag = 0;
        for (int64_t b = 0; b < k / 32; ++b)
          mag += std::fabs(double(f16_to_f32(w.scale(r, b))) * dx[b] * w.isum(r, b, qx));
        EXPECT_NEAR(got[size_t(r)], ref[size_t(r)], 1e-5 * mag + 1e-6) << "row " << r;
      }
    }
  }
}

TEST(KernelsPlanar, RowLinearMatchesMatmul) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  ThreadPool pool(1);
  uint32_t seed = 50;
  for (DType t : kTypes) {
    for (const auto& sh : kShapes) {
      QRows w(t, sh[0], sh[1], seed++);
      const int64_t m = w.m, k = w.k;
      Tensor wt = make_tensor(t, {m, k}, w.gguf.data(), w.gguf.size());
      std::vector<float> bias(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) bias[size_t(i)] = 0.01f * float(i);
      Tensor bt = make_tensor(DType::F32, {m}, bias.data(), bias.size() * 4);
      Tensor xt = make_tensor(DType::F32, {1, k}, w.x.data(), w.x.size() * 4);
      std::vector<float> ref(static_cast<size_t>(m)), got(static_cast<size_t>(m), NAN);
      Tensor yt = make_tensor(DType::F32, {1, m}, ref.data(), ref.size() * 4);
      matmul_bias(pool, wt, bt, xt, yt);
      RowLinear rl(wt, bt, "test");
      EXPECT_EQ(rl.packed_bytes(), planar_dot(t, active_isa()) ? planar_matrix_bytes(t, m, k) : 0u);
      std::vector<uint8_t> abuf(rl.act_bytes() + 64);
      const void* a = rl.act(w.x.data(), abuf.data());
      // Two pieces, the second starting at an odd row.
      const int64_t mid = m / 2 | 1;
      rl.run(0, std::min(mid, m), a, got.data(), RowEpilogue::Store);
      if (mid < m) rl.run(mid, m, a, got.data(), RowEpilogue::Store);
      for (int64_t r = 0; r < m; ++r)
        ASSERT_EQ(got[size_t(r)], ref[size_t(r)]) << dtype_name(t) << " k " << k << " row " << r;
    }
  }
}

// The quantized dot kernels take several activation rows at once (a CFG decode step has
// 2) and unpack each weight block once for all of them; every (weight row, activation
// row) result must equal the one-row call exactly, for any row count (1 to 8: the N-row
// blocks of 4 and every remainder, twice) and row range. ctest runs it once per ISA
// (CBX_DEBUG_FORCE_ISA), so each ISA's N-row kernels are held to its one-row kernel.
TEST(KernelsPlanar, MultiRowDotEqualsOneRowCalls) {
  if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  const MatmulKernels& kern = matmul_kernels(active_isa());
  std::mt19937 g(7);
  std::normal_distribution<float> nd;
  uint32_t seed = 90;
  for (DType t : kTypes) {
    for (const auto& sh : kShapes) {
      QRows w(t, sh[0], sh[1], seed++);
      const int64_t m = w.m, k = w.k;
      struct Case {
        const char* name;
        const DotKernel* d;
        const uint8_t* w;
        size_t ws;
      };
      const Case cases[] = {{"gguf", &kern.dot[weight_slot(t)], w.gguf.data(), w.rb},
                            {"planar", planar_dot(t, active_isa()), w.planar.data(), w.pb}};
      for (const Case& c : cases) {
        if (!c.d) continue;
        for (int64_t n_rows = 1; n_rows <= 8; ++n_rows) {
          SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << c.name << " " << isa_name(active_isa()) << " m "
                                          << m << " k " << k << " n_rows " << n_rows);
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
}

// The SIMD planar dots (AVX2, AVX-512) prefetching into L1 and into L2
// (stream_prefetch_level(), picked per CPU) compute the same bits, and both those of the
// GGUF-layout dot of the same ISA.
TEST(KernelsPlanar, PrefetchLevelsGiveTheSameBits) {
  if (detected_isa() == Isa::Generic) GTEST_SKIP() << "no SIMD planar kernel on this CPU";
#if CBX_X86_KERNELS  // else detected_isa() is generic
  uint32_t seed = 300;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (int(isa) > int(detected_isa())) continue;
    for (DType t : kTypes) {
      const DotKernel& gguf = matmul_kernels(isa).dot[weight_slot(t)];
      for (const auto& sh : kShapes) {
        QRows w(t, sh[0], sh[1], seed++);
        const int64_t m = w.m, k = w.k;
        std::vector<uint8_t> a8(act_row_bytes(gguf.act, k));
        gguf.convert(w.x.data(), k, a8.data());
        std::vector<float> ref(size_t(m), NAN);
        gguf.fn(w.gguf.data(), w.rb, 0, m, a8.data(), 0, 1, k, ref.data(), m);
        for (PrefetchLevel level : {PrefetchLevel::L1, PrefetchLevel::L2}) {
          const DotKernel& d = isa == Isa::Avx512 ? planar_dot_avx512(t, level) : planar_dot_avx2(t, level);
          std::vector<uint8_t> act(act_row_bytes(d.act, k));
          d.convert(w.x.data(), k, act.data());
          std::vector<float> got(size_t(m), NAN);
          d.fn(w.planar.data(), w.pb, 0, m, act.data(), 0, 1, k, got.data(), m);
          for (int64_t r = 0; r < m; ++r)
            ASSERT_EQ(got[size_t(r)], ref[size_t(r)])
                << isa_name(isa) << " " << dtype_name(t) << " level " << int(level) << " k " << k << " row " << r;
        }
      }
    }
  }
#endif
}
