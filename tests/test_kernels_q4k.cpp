// Q4_K: the dtype against the published GGUF block format (type ids, sizes, a hand-made
// block decoded), the quantizer, and the Q4_K x Q8 dot kernels of every ISA (the op follows
// CBX_DEBUG_FORCE_ISA; registered once per ISA like every test_kernels_* binary).
//
// Kernel bounds. The SIMD kernels compute the same exact integer sub-block sums as the
// scalar reference (dot_q4_k_generic) and differ only in float order: each output is a sum
// of T = 2 K / 32 terms t_i = (d sc_j) da_j isum_j and (dmin m_j) da_j asum_j, each a
// product of three roundings, summed in some order. Rounded f32 summation of T terms is off
// by at most (T - 1) u sum |t_i| (u = 2^-24), and each term by 3 u |t_i|, so
//   |y_simd - y_generic| <= 2 (T + 2) u sum_i |t_i|
// (the factor 2: both sides round). sum |t_i| is recomputed here in double from the weight
// blocks and the generic Q8 activation row (the SIMD converters produce the same row).
// Against a double dot of the dequantized weights with f32 x, the activation quantization
// dominates: per 32-block ||dx|| <= sqrt(32) / 254 ||x||, so as for Q4_0 (test_kernels_matmul)
// max |e| / (||w|| ||x||) <= 2.5e-2 on the dot path and an RMS well below it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matvec_q4k.h"
#include "ops/matmul.h"
#include "ops/row_linear.h"

using namespace cbx;

namespace {

// The published layout, written out independently of core/dtype: element e of a 256-block
// sits in byte 32 * (e / 64) + e % 32 of qs, in the high nibble when e % 64 >= 32.
int ref_nibble(const uint8_t* qs, int e) {
  const uint8_t b = qs[32 * (e / 64) + e % 32];
  return e % 64 >= 32 ? b >> 4 : b & 15;
}

TEST(Q4KFormat, TypeIdsAndSizes) {
  EXPECT_EQ(uint32_t(DType::Q4_K), 12u);
  EXPECT_EQ(uint32_t(DType::Q5_K), 13u);
  EXPECT_EQ(type_traits(DType::Q4_K).block_size, 256);
  EXPECT_EQ(type_traits(DType::Q4_K).block_bytes, 144u);  // 2 + 2 + 12 + 128: 4.5 bits a weight
  EXPECT_EQ(type_traits(DType::Q5_K).block_bytes, 176u);  // + 32 bytes of fifth bits
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("Q5_K"), DType::Q5_K);
  EXPECT_STREQ(dtype_name(DType::Q4_K), "q4_k");
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 1024), 4u * 144u);
  EXPECT_THROW(dtype_row_bytes(DType::Q4_K, 288), Error);
  EXPECT_TRUE(dtype_known(12) && dtype_known(13));
  EXPECT_EQ(offsetof(BlockQ4_K, dmin), 2u);
  EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
}

// sc = {1, 2, 3, 4, 17, 33, 50, 63}, m = {0, 5, 10, 63, 16, 32, 48, 1} packed by hand:
//   bytes 0..3:  sc[j] | (sc[j + 4] >> 4) << 6;  bytes 4..7: m[j] | (m[j + 4] >> 4) << 6;
//   bytes 8..11: (sc[j + 4] & 15) | (m[j + 4] & 15) << 4.
const uint8_t kScales[12] = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x85, 0xca, 0x3f, 0x01, 0x01, 0x02, 0x1f};
const int kSc[8] = {1, 2, 3, 4, 17, 33, 50, 63}, kMn[8] = {0, 5, 10, 63, 16, 32, 48, 1};

TEST(Q4KFormat, HandMadeBlockDecodes) {
  BlockQ4_K b{};
  b.d = 0x3800;     // f16 0.5
  b.dmin = 0x3400;  // f16 0.25
  std::memcpy(b.scales, kScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t((i * 7 + 3) & 0xff);
  uint8_t sc[8], mn[8];
  kquant_scales(b.scales, sc, mn);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(sc[j], kSc[j]) << j;
    EXPECT_EQ(mn[j], kMn[j]) << j;
  }
  uint8_t packed[12];
  kquant_pack_scales(sc, mn, packed);
  EXPECT_EQ(std::memcmp(packed, kScales, 12), 0);
  std::vector<float> out(256);
  type_traits(DType::Q4_K).to_float(&b, out.data(), 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(out[size_t(e)], 0.5f * float(kSc[e / 32]) * float(ref_nibble(b.qs, e)) - 0.25f * float(kMn[e / 32])) << e;
  // Spot values: element 0 = byte 0 low nibble (3), sub-block 0; element 32 = byte 0 high (0).
  EXPECT_EQ(out[0], 0.5f * 1 * 3 - 0.f);
  EXPECT_EQ(out[32], 0.5f * 2 * 0 - 0.25f * 5);
  // Element 255: byte 127 (= 127 * 7 + 3 = 892 -> 0x7c) high nibble 7, sub-block 7.
  EXPECT_EQ(out[255], 0.5f * 63 * 7 - 0.25f * 1);
}

TEST(Q4KFormat, HandMadeQ5Block) {
  BlockQ5_K b{};
  b.d = 0x3c00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t((i * 13 + 5) & 0xff);
  for (int i = 0; i < 32; ++i) b.qh[i] = uint8_t(i * 37 + 11);
  std::vector<float> out(256);
  type_traits(DType::Q5_K).to_float(&b, out.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int q = ref_nibble(b.qs, e) + (((b.qh[e % 32] >> (e / 32)) & 1) ? 16 : 0);
    EXPECT_EQ(out[size_t(e)], float(kSc[e / 32]) * float(q) - 0.5f * float(kMn[e / 32])) << e;
  }
}

double snr_db(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    s += double(x[i]) * x[i];
    n += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  }
  return 10 * std::log10(s / n);
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const TypeTraits& tr = type_traits(t);
  std::vector<uint8_t> q(dtype_row_bytes(t, int64_t(x.size())));
  tr.from_float(x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  tr.to_float(q.data(), y.data(), int64_t(x.size()));
  return y;
}

// Weight-like data (normal, and heavy-tailed with outliers): Q4_K (a scale and a min per
// 32, fitted by least squares) beats Q4_0 (one absmax scale per 32) at the same 4.5 bits;
// Q5_K beats Q4_K by about a bit (~6 dB). The margins are far below the observed ones.
TEST(Q4KQuantizer, BeatsQ4_0AndIsDeterministic) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::student_t_distribution<float> td(3.f);
  std::vector<float> g(256 * 64), h(256 * 64);
  for (auto& v : g) v = nd(rng);
  for (auto& v : h) v = 0.02f * td(rng);
  for (const auto* x : {&g, &h}) {
    const double s40 = snr_db(*x, round_trip(DType::Q4_0, *x));
    const double s4k = snr_db(*x, round_trip(DType::Q4_K, *x));
    const double s5k = snr_db(*x, round_trip(DType::Q5_K, *x));
    if (std::getenv("CBX_TEST_VERBOSE")) std::printf("SNR dB: q4_0 %.2f q4_k %.2f q5_k %.2f\n", s40, s4k, s5k);
    EXPECT_GT(s4k, s40 + 1.0) << "q4_0 " << s40 << " q4_k " << s4k;
    EXPECT_GT(s5k, s4k + 4.0) << "q4_k " << s4k << " q5_k " << s5k;
  }
  std::vector<uint8_t> a(dtype_row_bytes(DType::Q4_K, int64_t(g.size()))), b(a.size());
  type_traits(DType::Q4_K).from_float(g.data(), a.data(), int64_t(g.size()));
  type_traits(DType::Q4_K).from_float(g.data(), b.data(), int64_t(g.size()));
  EXPECT_EQ(a, b);
}

// Zeros, constants and one-signed blocks: the stored min is subtracted only (>= 0), so an
// all-positive block keeps min 0; zeros decode to zeros exactly.
TEST(Q4KQuantizer, EdgeBlocks) {
  std::vector<float> x(512, 0.f);
  EXPECT_EQ(round_trip(DType::Q4_K, x), x);
  for (size_t i = 0; i < 256; ++i) x[i] = 1.5f;                       // constant positive
  for (size_t i = 256; i < 512; ++i) x[i] = -float(i - 255) / 256.f;  // negative ramp
  const std::vector<float> y = round_trip(DType::Q4_K, x);
  for (size_t i = 0; i < 256; ++i) EXPECT_NEAR(y[i], 1.5f, 1.5f / 63 / 2 + 1e-3f) << i;
  for (size_t i = 256; i < 512; ++i) EXPECT_NEAR(y[i], x[i], 0.02f) << i;
}

ThreadPool& pool(int n) {
  static ThreadPool p2(2), p3(3);
  return n == 3 ? p3 : p2;
}

// [m, k] Q4_K weight view of bytes b, rows ws bytes apart.
Tensor weight_view(std::vector<uint8_t>& b, int64_t m, int64_t k, size_t ws) {
  Tensor src;
  src.dtype = DType::Q4_K;
  src.ndim = 1;
  src.shape[0] = 0;
  src.data = b.data();
  src.base = b.data();
  src.base_bytes = b.size();
  int64_t shape[2] = {m, k};
  int64_t strides[2] = {int64_t(ws), int64_t(sizeof(BlockQ4_K))};
  return make_view(src, 2, shape, strides, 0);
}

// The bound 2 (T + 2) u sum_i |t_i| of one output (see the top), from the row's blocks and
// the Q8 activation row.
double sum_abs_terms(const uint8_t* row, const uint8_t* act, int64_t k) {
  const int8_t* qs = q8_act_qs(act);
  const float* da = q8_act_d(act, k);
  const int32_t* asum = q8_act_sum(act, k);
  auto* b = reinterpret_cast<const BlockQ4_K*>(row);
  double s = 0;
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    uint8_t sc[8], mn[8];
    kquant_scales(b[sb].scales, sc, mn);
    const double d = f16_to_f32(b[sb].d), dmin = f16_to_f32(b[sb].dmin);
    for (int j = 0; j < 8; ++j) {
      int64_t isum = 0;
      for (int l = 0; l < 32; ++l) isum += int64_t(ref_nibble(b[sb].qs, 32 * j + l)) * qs[sb * 256 + 32 * j + l];
      s += std::fabs(d * sc[j] * da[sb * 8 + j] * double(isum)) +
           std::fabs(dmin * mn[j] * da[sb * 8 + j] * double(asum[sb * 8 + j]));
    }
  }
  const double terms = double(2 * k / 32);
  return 2 * (terms + 2) * std::ldexp(1.0, -24) * s + 1e-30;
}

struct Case {
  int64_t m, k, n;
  bool strided;
  int threads;
};

class Q4KKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  }
};

// The op (active ISA) against the generic kernel (derived bound above) and a double
// reference; dot path (N < matmul_gemm_min_rows()) and GEMM path; odd M, strided rows,
// 2 and 3 threads (row splits that end mid-chunk).
TEST_F(Q4KKernel, MatmulAgreesWithGenericAndReference) {
  const std::vector<Case> cases = {
      {37, 256, 1, false, 2},  {67, 1024, 1, true, 3},  {33, 4096, 2, false, 2}, {19, 768, 3, true, 3},
      {130, 1024, 7, true, 2}, {65, 512, 300, true, 3}, {40, 256, 9, false, 2},
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "M=" << c.m << " K=" << c.k << " N=" << c.n
                                    << " isa=" << isa_name(active_isa()));
    GemmPrecisionScope exact(GemmPrecision::F32);
    std::mt19937 rng(seed += 7);
    std::normal_distribution<float> nd(0.f, 1.f);
    const size_t rb = dtype_row_bytes(DType::Q4_K, c.k), ws = rb + (c.strided ? 144 : 0);
    std::vector<uint8_t> wb(ws * size_t(c.m));
    std::vector<float> deq(size_t(c.m * c.k)), row(size_t(c.k));
    for (int64_t i = 0; i < c.m; ++i) {
      for (auto& v : row) v = nd(rng) * 0.05f + (i % 5 == 0 ? 0.03f : 0.f);
      type_traits(DType::Q4_K).from_float(row.data(), wb.data() + size_t(i) * ws, c.k);
      type_traits(DType::Q4_K).to_float(wb.data() + size_t(i) * ws, deq.data() + i * c.k, c.k);
    }
    Tensor w = weight_view(wb, c.m, c.k, ws);
    std::vector<float> xv(size_t(c.n * c.k)), yv(size_t(c.n * c.m), -1.f), yg(yv.size(), -2.f);
    for (auto& v : xv) v = nd(rng);
    Tensor x = make_tensor(DType::F32, {c.n, c.k}, xv.data(), xv.size() * 4);
    Tensor y = make_tensor(DType::F32, {c.n, c.m}, yv.data(), yv.size() * 4);
    Tensor ygt = make_tensor(DType::F32, {c.n, c.m}, yg.data(), yg.size() * 4);
    matmul(pool(c.threads), w, x, y);
    matmul_with(matmul_kernels(Isa::Generic), pool(2), w, nullptr, x, ygt);
    const bool gemm = c.n >= matmul_gemm_min_rows();
    std::vector<uint8_t> act(act_row_bytes(ActFormat::Q8, c.k));
    double max_ref = 0, sq = 0;
    for (int64_t r = 0; r < c.n; ++r) {
      const float* xr = xv.data() + r * c.k;
      matmul_kernels(Isa::Generic).to_q8(xr, c.k, act.data());
      double xn = 0;
      for (int64_t i = 0; i < c.k; ++i) xn += double(xr[i]) * xr[i];
      for (int64_t j = 0; j < c.m; ++j) {
        const float* wr = deq.data() + j * c.k;
        double ref = 0, wn = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          ref += double(wr[i]) * xr[i];
          wn += double(wr[i]) * wr[i];
        }
        const double e = std::fabs(yv[size_t(r * c.m + j)] - ref) / std::sqrt(wn * xn);
        max_ref = std::max(max_ref, e);
        sq += e * e;
        const float got = yv[size_t(r * c.m + j)], gen = yg[size_t(r * c.m + j)];
        if (gemm) {
          // GEMM path: dequantized weights, f32 x, f32 accumulation (as every weight type).
          EXPECT_NEAR(got, gen, 1e-5 * std::sqrt(wn * xn)) << r << "," << j;
        } else {
          const double bound = sum_abs_terms(wb.data() + size_t(j) * ws, act.data(), c.k);
          EXPECT_LE(std::fabs(double(got) - gen), bound) << r << "," << j;
        }
      }
    }
    EXPECT_LE(max_ref, gemm ? 1e-5 : 2.5e-2);
    EXPECT_LE(std::sqrt(sq / double(c.n * c.m)), gemm ? 1e-5 : 2e-3);
  }
}

// RowLinear (the fused T3 decode's projection): on AVX-512 with K % 512 == 0 it reads q4kp
// rows (a copy made at construction), elsewhere the GGUF rows in place; any row split gives
// the one-call values, and every output is within the derived bound of the generic GGUF dot.
TEST_F(Q4KKernel, RowLinearSplitsAndLayouts) {
  for (int64_t k : {int64_t(768), int64_t(1024), int64_t(4096)}) {
    SCOPED_TRACE(testing::Message() << "K=" << k << " isa=" << isa_name(active_isa()));
    const int64_t m = 75;
    std::mt19937 rng(3 + uint32_t(k));
    std::normal_distribution<float> nd(0.f, 0.05f);
    std::vector<float> wf(static_cast<size_t>(m * k)), xv(static_cast<size_t>(2 * k));
    for (auto& v : wf) v = nd(rng);
    for (auto& v : xv) v = nd(rng) * 20.f;
    const size_t rb = dtype_row_bytes(DType::Q4_K, k);
    std::vector<uint8_t> wb(rb * size_t(m));
    type_traits(DType::Q4_K).from_float(wf.data(), wb.data(), m * k);
    Tensor w = weight_view(wb, m, k, rb);
    RowLinear rl(w, Tensor{}, "t3 test proj");
    const bool q4kp = q4kp_dot(active_isa()) && k % 512 == 0;
    EXPECT_EQ(rl.packed_bytes(), q4kp ? size_t(m) * q4kp_row_bytes(k) : 0u);
    EXPECT_EQ(RowLinear::pack_bytes(w), rl.packed_bytes());
    EXPECT_EQ(RowLinear::pack_bytes(w, active_isa(), false), 0u);
    std::vector<uint8_t> abuf(2 * rl.act_bytes() + 64);
    uint8_t* ab = abuf.data() + (64 - reinterpret_cast<uintptr_t>(abuf.data()) % 64) % 64;
    size_t as = 0;
    const void* a = rl.act_rows(xv.data(), k, 2, ab, &as);
    std::vector<float> one(static_cast<size_t>(2 * m), -7.f), split(one.size(), -9.f);
    rl.run_rows(0, m, a, as, 2, one.data(), m, RowEpilogue::Store);
    for (auto [m0, m1] : {std::pair<int64_t, int64_t>{0, 17}, {17, 18}, {18, 64}, {64, 75}})
      rl.run_rows(m0, m1, a, as, 2, split.data(), m, RowEpilogue::Store);
    EXPECT_EQ(one, split);
    std::vector<uint8_t> q8(act_row_bytes(ActFormat::Q8, k));
    for (int64_t r = 0; r < 2; ++r) {
      matmul_kernels(Isa::Generic).to_q8(xv.data() + r * k, k, q8.data());
      std::vector<float> ref(static_cast<size_t>(m));
      dot_q4_k_generic(wb.data(), rb, 0, m, q8.data(), 0, 1, k, ref.data(), 0);
      for (int64_t i = 0; i < m; ++i)
        EXPECT_LE(std::fabs(double(one[size_t(r * m + i)]) - ref[size_t(i)]),
                  sum_abs_terms(wb.data() + size_t(i) * rb, q8.data(), k))
            << r << "," << i;
    }
  }
}

// q4kp packing: the scalar q4kp dot (same arithmetic and order as the GGUF generic dot) gives
// the GGUF generic values exactly, so the layout holds every nibble, scale, min, d and dmin.
TEST_F(Q4KKernel, Q4kpLayoutMatchesGguf) {
  const int64_t m = 9, k = 1536;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> wf(static_cast<size_t>(m * k)), xv(static_cast<size_t>(k));
  for (auto& v : wf) v = nd(rng) + 0.02f;
  for (auto& v : xv) v = nd(rng);
  const size_t rb = dtype_row_bytes(DType::Q4_K, k), pb = q4kp_row_bytes(k);
  EXPECT_EQ(pb % 64, 0u);
  EXPECT_EQ(pb, (3 * kQ4kpGroupBytes + 63) / 64 * 64);
  std::vector<uint8_t> wb(rb * size_t(m)), pk(pb * size_t(m));
  type_traits(DType::Q4_K).from_float(wf.data(), wb.data(), m * k);
  q4kp_pack_rows(wb.data(), rb, m, k, pk.data());
  std::vector<uint8_t> q8(act_row_bytes(ActFormat::Q8, k)), lane(q8.size());
  matmul_kernels(Isa::Generic).to_q8(xv.data(), k, q8.data());
  q4kp_dot_generic().convert(xv.data(), k, lane.data());
  std::vector<float> ref(static_cast<size_t>(m)), got(ref.size());
  dot_q4_k_generic(wb.data(), rb, 0, m, q8.data(), 0, 1, k, ref.data(), 0);
  q4kp_dot_generic().fn(pk.data(), pb, 0, m, lane.data(), 0, 1, k, got.data(), 0);
  EXPECT_EQ(got, ref);
  if (const DotKernel* simd = active_isa() == Isa::Avx512 ? q4kp_dot(Isa::Avx512) : nullptr) {
    simd->convert(xv.data(), k, lane.data());
    simd->fn(pk.data(), pb, 0, m, lane.data(), 0, 1, k, got.data(), 0);
    for (int64_t i = 0; i < m; ++i)
      EXPECT_LE(std::fabs(double(got[size_t(i)]) - ref[size_t(i)]),
                sum_abs_terms(wb.data() + size_t(i) * rb, q8.data(), k))
          << i;
  }
}

// K not a multiple of 256 is refused with the weight (and, for RowLinear, its name) in the message.
TEST_F(Q4KKernel, RefusesKNotMultipleOf256) {
  // Built by hand: the tensor views (core/tensor) and the GGUF reader refuse this shape
  // already; the kernels' front ends must not rely on that.
  std::vector<uint8_t> wb(4096, 0);
  Tensor w;
  w.dtype = DType::Q4_K;
  w.ndim = 2;
  w.shape[0] = 4;
  w.shape[1] = 288;
  w.stride[0] = int64_t(dtype_row_bytes(DType::Q4_K, 512));
  w.stride[1] = 144;
  w.data = wb.data();
  w.base = wb.data();
  w.base_bytes = wb.size();
  std::vector<float> xv(288), yv(4);
  Tensor x = make_tensor(DType::F32, {1, 288}, xv.data(), xv.size() * 4);
  Tensor y = make_tensor(DType::F32, {1, 4}, yv.data(), yv.size() * 4);
  try {
    matmul(pool(2), w, x, y);
    ADD_FAILURE() << "matmul accepted K = 288";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  try {
    RowLinear rl(w, Tensor{}, "t3.layers.0.odd");
    ADD_FAILURE() << "RowLinear accepted K = 288";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t3.layers.0.odd"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

}  // namespace
