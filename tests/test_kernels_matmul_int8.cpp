// The int8 GEMM (GemmPrecision::Int8 PackedWeight, kernels/matmul_int8.h), run per ISA (ctest
// .generic / .avx2 / .avx512; the VNNI kernel on AVX-512 VNNI CPUs, else the generic one):
//   - against a scalar reference of the same quantization, written here from the header's
//     definition: the integer sums are exact, so y may differ from double(S) * d_x * d_w only by
//     the kernel's three f32 roundings (float(S), * d_x, * d_w): |y - ref| <= 3.01 * 2^-24 |ref|;
//   - against the f32 product within the quantization bound: |x_k - d_x q_x| <= d_x / 2 and the
//     same for w, so |x.w - y| <= sum_k (d_x |w_k| + d_w |x_k| + d_x d_w / 2) / 2 (+ roundings);
//   - the active ISA's kernel bit for bit against the generic one, thread counts 1 / 2 / 3;
//   - fused epilogues, the LayerNorm prologue and matmul_mlp against the unfused ops on the
//     same int8 GEMM, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
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
#include "kernels/matmul_int8.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

using namespace cbx;

namespace {

ThreadPool& pool(int n = 2) {
  static ThreadPool p1(1), p2(2), p3(3);
  return n == 1 ? p1 : n == 3 ? p3 : p2;
}

struct Buf {
  std::vector<uint8_t> bytes;
  Tensor t;
};

// [m, k] weight of dtype t (f32 values drawn, then stored as t); one all-zero row when zero_row.
Buf make_weight(DType t, int64_t m, int64_t k, uint32_t seed, bool zero_row = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.5f);
  const size_t rb = dtype_row_bytes(t, k);
  Buf w;
  w.bytes.assign(rb * size_t(m) + 64, 0);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : row) v = zero_row && i == m / 2 ? 0.f : nd(rng);
    type_traits(t).from_float(row.data(), w.bytes.data() + i * rb, k);
  }
  w.t = make_tensor(t, {m, k}, w.bytes.data(), w.bytes.size());
  return w;
}

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return make_tensor(DType::F32, shape, v.data(), v.size() * 4);
}

// The header's quantization of one row: d and q.
void quantize(const float* r, int64_t k, float* d, std::vector<int>& q) {
  float amax = 0.f;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(r[i]));
  *d = amax / 127.f;
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  q.resize(size_t(k));
  for (int64_t i = 0; i < k; ++i) q[size_t(i)] = int(std::min(127.f, std::max(-127.f, std::nearbyint(r[i] * inv))));
}

std::vector<float> widen(const Tensor& w) {
  const int64_t m = w.shape[0], k = w.shape[1];
  std::vector<float> out(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const auto* src = static_cast<const uint8_t*>(w.data) + i * w.stride[0];
    if (w.dtype == DType::F32)
      std::memcpy(out.data() + i * k, src, size_t(k) * 4);
    else
      type_traits(w.dtype).to_float(src, out.data() + i * k, k);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class Int8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  }
};

TEST_F(Int8Test, PrecisionNameAndParse) {
  EXPECT_EQ(parse_gemm_precision("int8", "test"), GemmPrecision::Int8);
  EXPECT_STREQ(gemm_precision_name(GemmPrecision::Int8), "int8");
  EXPECT_THROW(parse_gemm_precision("int4", "test"), Error);
  const std::string kind = gemm_int8_kind();
  EXPECT_EQ(kind, active_isa() == Isa::Avx512 && cpu_has_avx512_vnni() ? "vpdpbusd" : "generic");
}

// Odd shapes (M, N, K off the 14 / 32 / 4 tiles), weight types, thread counts: the exact-sum
// reference and the f32 bound; the generic kernel gives the same bits.
TEST_F(Int8Test, MatchesReferenceOfSameQuantization) {
  const Isa isa = active_isa();
  uint32_t seed = 7;
  struct Case {
    DType t;
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {{DType::F32, 1, 1, 8},      {DType::F32, 17, 3, 13},   {DType::F16, 33, 37, 29},
                                   {DType::BF16, 70, 130, 45}, {DType::F32, 64, 256, 14}, {DType::Q8_0, 40, 96, 31},
                                   {DType::F16, 96, 1024, 57}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << dtype_name(c.t) << " M=" << c.m << " K=" << c.k << " N=" << c.n
                                    << " isa=" << isa_name(isa) << " kernel=" << matmul_int8_kind(isa));
    Buf w = make_weight(c.t, c.m, c.k, seed += 3, c.m > 2);
    std::vector<float> xv = randn(size_t(c.n * c.k), seed + 1);
    for (int64_t j = 0; j < c.k; ++j) xv[size_t(c.k + j)] = 0.f;  // an all-zero activation row
    Tensor x = f32(xv, {c.n, c.k});
    const PackedWeight pw = pack_weight(pool(), {&w.t}, GemmPrecision::Int8, "test");
    ASSERT_TRUE(pw.has_panels());
    ASSERT_TRUE(pw.int8());
    std::vector<float> y(size_t(c.n * c.m));
    Tensor yt = f32(y, {c.n, c.m});
    matmul_packed(pool(), pw, x, yt);

    const std::vector<float> wf = widen(w.t);
    std::vector<float> dw(size_t(c.m));
    std::vector<std::vector<int>> qw(size_t(c.m));
    for (int64_t j = 0; j < c.m; ++j) quantize(wf.data() + j * c.k, c.k, &dw[size_t(j)], qw[size_t(j)]);
    int bad_ref = 0, bad_f32 = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      float dx;
      std::vector<int> qx;
      quantize(xv.data() + i * c.k, c.k, &dx, qx);
      for (int64_t j = 0; j < c.m; ++j) {
        int64_t s = 0;
        double exact = 0, bound = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          const double xk = xv[size_t(i * c.k + k)], wk = wf[size_t(j * c.k + k)];
          s += int64_t(qx[size_t(k)]) * qw[size_t(j)][size_t(k)];
          exact += xk * wk;
          bound += (dx * std::fabs(wk) + dw[size_t(j)] * std::fabs(xk) + double(dx) * dw[size_t(j)] / 2) / 2;
        }
        const double ref = double(s) * dx * dw[size_t(j)], got = y[size_t(i * c.m + j)];
        if (std::fabs(got - ref) > 3.01 * std::ldexp(std::fabs(ref), -24) + 1e-30) ++bad_ref;
        if (std::fabs(got - exact) > bound * 1.0001 + 1e-6 * std::fabs(exact)) ++bad_f32;
      }
    }
    EXPECT_EQ(bad_ref, 0);
    EXPECT_EQ(bad_f32, 0);

    // The generic kernel and other thread counts: the same bits.
    const PackedWeight pg = pack_weight_with(matmul_kernels(Isa::Generic), pool(), {&w.t}, GemmPrecision::Int8, "g");
    for (int nt : {1, 2, 3}) {
      std::vector<float> y2(y.size(), -1.f);
      Tensor y2t = f32(y2, {c.n, c.m});
      matmul_packed(pool(nt), nt == 2 ? pg : pw, x, y2t);
      EXPECT_TRUE(same_bits(y, y2)) << "threads " << nt << (nt == 2 ? " (generic kernel)" : "");
    }
  }
}

// Bias + GELU, bias + residual aliasing y, the LayerNorm prologue, stacked parts, matmul_mlp:
// each equals the plain int8 GEMM followed by the unfused ops, bit for bit.
TEST_F(Int8Test, EpiloguesAndMlpEqualUnfused) {
  const int64_t n = 45, k = 96, m1 = 70, m2 = 33, f = 130;
  Buf wa = make_weight(DType::F16, m1, k, 11), wb = make_weight(DType::F16, m2, k, 12);
  const PackedWeight stacked = pack_weight(pool(), {&wa.t, &wb.t}, GemmPrecision::Int8, "ab");
  const PackedWeight pa = pack_weight(pool(), {&wa.t}, GemmPrecision::Int8, "a");
  const PackedWeight pb = pack_weight(pool(), {&wb.t}, GemmPrecision::Int8, "b");
  std::vector<float> xv = randn(size_t(n * k), 13);
  Tensor x = f32(xv, {n, k});
  // Stacked parts = each part on its own.
  std::vector<float> ys(size_t(n * (m1 + m2))), ya(size_t(n * m1)), yb(size_t(n * m2));
  Tensor yst = f32(ys, {n, m1 + m2}), yat = f32(ya, {n, m1}), ybt = f32(yb, {n, m2});
  matmul_packed(pool(), stacked, x, yst);
  matmul_packed(pool(), pa, x, yat);
  matmul_packed(pool(), pb, x, ybt);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::memcmp(&ys[size_t(i * (m1 + m2))], &ya[size_t(i * m1)], size_t(m1) * 4), 0) << i;
    EXPECT_EQ(std::memcmp(&ys[size_t(i * (m1 + m2) + m1)], &yb[size_t(i * m2)], size_t(m2) * 4), 0) << i;
  }
  // Bias + GELU + residual (y itself), with a LayerNorm prologue.
  std::vector<float> bias = randn(size_t(m1), 14, 0.1f), lw = randn(size_t(k), 15, 0.1f),
                     lb = randn(size_t(k), 16, 0.1f);
  for (auto& v : lw) v += 1.f;
  Tensor bt = f32(bias, {m1}), lwt = f32(lw, {k}), lbt = f32(lb, {k});
  std::vector<float> res = randn(size_t(n * m1), 17), fused = res, ref(size_t(n * m1)), xln(size_t(n * k));
  Tensor ft = f32(fused, {n, m1}), rt = f32(ref, {n, m1}), rest = f32(res, {n, m1}), xlt = f32(xln, {n, k});
  matmul_packed(pool(), pa, x, ft, MatmulEpilogue{&bt, MatmulAct::Gelu, &ft, &lwt, &lbt, 1e-5f});
  layer_norm(pool(), x, lwt, lbt, 1e-5f, xlt);
  matmul_packed(pool(), pa, xlt, rt, MatmulEpilogue{&bt});
  gelu(pool(), rt, rt);
  add(pool(), rest, rt, rt);
  EXPECT_TRUE(same_bits(fused, ref));
  // MLP: x -> SiLU(x . w1^T + b1) -> . w2^T + residual.
  Buf w1 = make_weight(DType::BF16, f, k, 18), w2 = make_weight(DType::BF16, k, f, 19);
  const PackedWeight p1 = pack_weight(pool(), {&w1.t}, GemmPrecision::Int8, "w1");
  const PackedWeight p2 = pack_weight(pool(), {&w2.t}, GemmPrecision::Int8, "w2");
  std::vector<float> b1 = randn(size_t(f), 20, 0.1f), h(size_t(n * f)), h2(size_t(n * f));
  std::vector<float> out = xv, out2(size_t(n * k));
  Tensor b1t = f32(b1, {f}), ht = f32(h, {n, f}), h2t = f32(h2, {n, f}), ot = f32(out, {n, k}), o2t = f32(out2, {n, k});
  matmul_mlp(pool(), p1, MatmulEpilogue{&b1t, MatmulAct::Silu}, p2, MatmulEpilogue{nullptr, MatmulAct::None, &ot}, ot,
             ht, ot);
  matmul_packed(pool(), p1, x, h2t, MatmulEpilogue{&b1t, MatmulAct::Silu});
  matmul_packed(pool(), p2, h2t, o2t, MatmulEpilogue{nullptr, MatmulAct::None, &x});
  EXPECT_TRUE(same_bits(out, out2));
}

TEST_F(Int8Test, KTooLargeIsAnError) {
  Buf w = make_weight(DType::F32, 1, kInt8MaxK + 1, 21);
  try {
    (void)pack_weight(pool(), {&w.t}, GemmPrecision::Int8, "huge");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("65536"), std::string::npos) << e.what();
  }
}

}  // namespace
