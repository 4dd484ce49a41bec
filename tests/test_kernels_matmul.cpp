// Matmul kernels: the op (following CBX_DEBUG_FORCE_ISA through active_isa()) against the generic
// kernel table called directly and against a double-precision reference on the
// dequantized weights, for every weight dtype, dot path (N < matmul_gemm_min_rows()) and
// GEMM path.
//
// Errors are normalised per output by ||w_m|| * ||x_n|| (Cauchy-Schwarz scale of a dot):
//   e[n, m] = |y[n, m] - ref[n, m]| / (||w_m||_2 * ||x_n||_2)
// Tolerances (max e) against the double reference:
//   f32, f16: 1e-5   f32 accumulation of exact products (observed ~1e-7).
//   bf16:     4e-3   AVX-512 rounds x to bf16 (relative 2^-9 per element, so the dot moves
//                    by at most 2^-9 ||w|| ||x||); generic and AVX2 keep x in f32.
//   q8_0, q4_0: 2.5e-2 on the dot path: x is quantized per 32-block with step amax/127, so
//                    ||dx|| <= sqrt(32)/254 ||x|| = 0.0223 ||x||. The GEMM path keeps x f32.
//                    Also the RMS of e must stay below 2e-3 (random rounding errors cancel).
// Against the generic kernels (same quantization of x, only the summation order differs):
//   1e-5 for all types, except bf16 on AVX-512 (x in bf16 there, f32 in generic): 4e-3.
// These run in F32 GEMM precision (a GemmPrecisionScope); the BF16 GEMM precision
// (ops/matmul.h) is checked separately: x and the weights are rounded to bf16 (each by a
// relative 2^-9 at most), so |y - ref| <= (2 * 2^-9 + 2^-18) sum_k |w_k x_k| (+ the f32
// accumulation, ~1e-6): asserted per output as 4e-3 of sum_k |w_k x_k|. Where the BF16
// GEMM does not exist (no AMX, CBX_DEBUG_NO_AMX=1, other ISAs) a BF16 request must give exactly
// the F32 result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/x86_kernels.h"
#include "kernels/matmul.h"
#include "ops/matmul.h"

using namespace cbx;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

struct Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [m][k] dequantized
  Tensor t;
};

// w: [m, k] of dtype t, rows row_pad bytes apart beyond their size (strided view).
Weight make_weight(DType t, int64_t m, int64_t k, uint32_t seed, size_t row_pad = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const TypeTraits& tr = type_traits(t);
  const size_t rb = dtype_row_bytes(t, k), stride = rb + row_pad;
  Weight w;
  w.bytes.assign(stride * size_t(m) + 64, 0);
  w.deq.resize(size_t(m * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : row) v = nd(rng) * 0.5f;
    tr.from_float(row.data(), w.bytes.data() + i * stride, k);
    tr.to_float(w.bytes.data() + i * stride, w.deq.data() + i * k, k);
  }
  int64_t shape[2] = {m, k};
  int64_t strides[2] = {int64_t(stride), int64_t(tr.block_bytes)};
  Tensor src;
  src.dtype = t;
  src.ndim = 1;
  src.shape[0] = 0;
  src.data = w.bytes.data();
  src.base = w.bytes.data();
  src.base_bytes = w.bytes.size();
  w.t = make_view(src, 2, shape, strides, 0);
  return w;
}

struct Mat {
  std::vector<float> v;
  Tensor t;
  int64_t rows, cols, ld;
  float& at(int64_t r, int64_t c) { return v[size_t(r * ld + c)]; }
};

Mat make_mat(int64_t rows, int64_t cols, int64_t pad, uint32_t seed) {
  Mat a;
  a.rows = rows;
  a.cols = cols;
  a.ld = cols + pad;
  a.v.assign(size_t(rows * a.ld + 16), 0.f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : a.v) x = nd(rng);
  Tensor base = make_tensor(DType::F32, {int64_t(a.v.size())}, a.v.data(), a.v.size() * 4);
  int64_t shape[2] = {rows, cols};
  int64_t strides[2] = {a.ld * 4, 4};
  a.t = make_view(base, 2, shape, strides, 0);
  return a;
}

double tol_ref(DType t, bool gemm_path) {
  switch (t) {
    case DType::BF16:
      return 4e-3;
    case DType::Q8_0:
    case DType::Q4_0:
      return gemm_path ? 1e-5 : 2.5e-2;
    default:
      return 1e-5;
  }
}
double tol_generic(DType t) { return (t == DType::BF16 && active_isa() == Isa::Avx512) ? 4e-3 : 1e-5; }

struct Errors {
  double max_ref = 0, rms_ref = 0, max_gen = 0;
};

// The op under test is matmul/matmul_bias (active ISA), or matmul_with(*op) when op is given.
Errors run_case(DType t, int64_t m, int64_t k, int64_t n, bool bias, bool strided, uint32_t seed,
                const MatmulKernels* op = nullptr) {
  Weight w = make_weight(t, m, k, seed, strided ? 64 : 0);
  Mat x = make_mat(n, k, strided ? 5 : 0, seed + 1);
  Mat y = make_mat(n, m, strided ? 3 : 0, seed + 2);
  Mat yg = make_mat(n, m, 0, seed + 3);
  std::vector<float> bv(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) bv[size_t(i)] = 0.1f * float(i % 7) - 0.3f;
  Tensor bt = make_tensor(DType::F32, {m}, bv.data(), bv.size() * 4);

  if (op)
    matmul_with(*op, pool(), w.t, bias ? &bt : nullptr, x.t, y.t);
  else if (bias)
    matmul_bias(pool(), w.t, bt, x.t, y.t);
  else
    matmul(pool(), w.t, x.t, y.t);
  matmul_with(matmul_kernels(Isa::Generic), pool(), w.t, bias ? &bt : nullptr, x.t, yg.t);

  Errors e;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double xn = 0;
    for (int64_t c = 0; c < k; ++c) xn += double(x.at(i, c)) * x.at(i, c);
    for (int64_t j = 0; j < m; ++j) {
      double ref = bias ? bv[size_t(j)] : 0.0, wn = 0;
      const float* wr = w.deq.data() + j * k;
      for (int64_t c = 0; c < k; ++c) {
        ref += double(wr[c]) * x.at(i, c);
        wn += double(wr[c]) * wr[c];
      }
      const double scale = std::sqrt(wn * xn) + 1e-30;
      const double er = std::fabs(y.at(i, j) - ref) / scale;
      const double eg = std::fabs(double(y.at(i, j)) - yg.at(i, j)) / scale;
      e.max_ref = std::max(e.max_ref, er);
      e.max_gen = std::max(e.max_gen, eg);
      sq += er * er;
    }
  }
  e.rms_ref = std::sqrt(sq / double(n * m));
  return e;
}

class MatmulTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (forced_isa_unavailable()) GTEST_SKIP() << "CBX_DEBUG_FORCE_ISA asks for more than this CPU has";
  }
};

TEST_P(MatmulTest, AgreesWithGenericAndReference) {
  const DType t = GetParam();
  GemmPrecisionScope exact(GemmPrecision::F32);
  const bool quant = type_traits(t).is_quantized;
  struct Shape {
    int64_t m, k, n;
    bool bias, strided;
  };
  std::vector<Shape> shapes = {
      {37, 64, 1, false, false},                              // odd M, tail blocks only
      {67, 1024, 1, true, true},                              // 2 full 16-block groups, strided rows
      {33, 544, 7, false, true},                              // group + tail blocks, N = 7 (dot path)
      {19, 160, 3, true, false},  {21, 1056, 2, true, true},  // N = 2 (a CFG decode step): 2 groups + 1 tail block
      {65, 576, 300, true, true},                             // GEMM path, K > one k block, edge tiles
      {40, 96, 9, false, false},                              // GEMM path, small
  };
  if (!quant) {
    shapes.push_back({13, 37, 1, true, false});   // odd K: masked / scalar tails
    shapes.push_back({29, 45, 11, false, true});  // odd K on the GEMM path (bf16 pairs)
  }
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " M=" << s.m << " K=" << s.k << " N=" << s.n
                                    << " isa=" << isa_name(active_isa()));
    const bool gemm = s.n >= matmul_gemm_min_rows();
    Errors e = run_case(t, s.m, s.k, s.n, s.bias, s.strided, seed += 10);
    if (std::getenv("CBX_TEST_VERBOSE"))
      std::printf("%s M=%lld K=%lld N=%lld: max_ref %.3g rms_ref %.3g max_generic %.3g\n", dtype_name(t),
                  (long long)s.m, (long long)s.k, (long long)s.n, e.max_ref, e.rms_ref, e.max_gen);
    EXPECT_LE(e.max_ref, tol_ref(t, gemm));
    EXPECT_LE(e.max_gen, tol_generic(t));
    if (quant) {
      EXPECT_LE(e.rms_ref, 2e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0),
                         [](const testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// On AMX machines the AVX-512 table's BF16 GEMM uses tiles; the vdpbf16ps GEMM it falls
// back to elsewhere is checked here through the table without AMX (same tolerances).
TEST(Matmul, Bf16GemmWithoutAmx) {
  if (forced_isa_unavailable() || active_isa() != Isa::Avx512) GTEST_SKIP() << "AVX-512 only";
#if CBX_X86_KERNELS
  uint32_t seed = 900;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{65, 576, 300}, {29, 45, 11}, {40, 96, 9}}) {
    Errors e = run_case(DType::BF16, m, k, n, true, true, seed += 10, &matmul_kernels_avx512_no_amx());
    EXPECT_LE(e.max_ref, 4e-3) << "M=" << m << " K=" << k << " N=" << n;
    EXPECT_LE(e.max_gen, 4e-3) << "M=" << m << " K=" << k << " N=" << n;
  }
#endif
}

// BF16 GEMM precision for every weight type: per-output bound (see the top), and either a
// result that differs from the F32 GEMM (the bf16 kernel ran) or, without one, the F32
// result bit for bit.
TEST_P(MatmulTest, Bf16PrecisionBoundAndFallback) {
  const DType t = GetParam();
  const MatmulKernels& kern = matmul_kernels(active_isa());
  const bool have = gemm_bf16_available();
  uint32_t seed = 2000;
  for (auto [m, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{65, 576, 300}, {40, 96, 9}, {33, 1088, 70}, {100, 64, 33}}) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " M=" << m << " K=" << k << " N=" << n
                                    << " isa=" << isa_name(active_isa()) << " bf16 gemm=" << have);
    Weight w = make_weight(t, m, k, seed += 10, 64);
    Mat x = make_mat(n, k, 5, seed + 1);
    Mat y = make_mat(n, m, 3, seed + 2), yf = make_mat(n, m, 0, seed + 3);
    std::vector<float> bv(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) bv[size_t(i)] = 0.05f * float(i % 5) - 0.1f;
    Tensor bt = make_tensor(DType::F32, {m}, bv.data(), bv.size() * 4);
    matmul_with_precision(kern, GemmPrecision::BF16, pool(), w.t, &bt, x.t, y.t);
    matmul_with_precision(kern, GemmPrecision::F32, pool(), w.t, &bt, x.t, yf.t);
    double worst = 0;
    bool differs = false, same_bits = true;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double ref = bv[size_t(j)], mag = 0;
        const float* wr = w.deq.data() + j * k;
        for (int64_t c = 0; c < k; ++c) {
          ref += double(wr[c]) * x.at(i, c);
          mag += std::fabs(double(wr[c]) * x.at(i, c));
        }
        worst = std::max(worst, std::fabs(y.at(i, j) - ref) / (mag + 1e-30));
        differs |= y.at(i, j) != yf.at(i, j);
        same_bits &= std::memcmp(&y.at(i, j), &yf.at(i, j), 4) == 0;
      }
    EXPECT_LE(worst, 4e-3);
    if (t == DType::BF16) {
      EXPECT_TRUE(same_bits) << "BF16 weights run one GEMM in either precision";
    } else if (have) {
      EXPECT_TRUE(differs) << "BF16 precision gave the F32 result: the bf16 GEMM did not run";
    } else {
      EXPECT_TRUE(same_bits) << "without a bf16 GEMM, BF16 precision must run the F32 GEMM";
    }
  }
}

TEST(Matmul, PrecisionPolicy) {
  EXPECT_EQ(parse_gemm_precision("f32", "t"), GemmPrecision::F32);
  EXPECT_EQ(parse_gemm_precision("bf16", "t"), GemmPrecision::BF16);
  EXPECT_EQ(parse_gemm_precision("auto", "t"), GemmPrecision::Auto);
  EXPECT_THROW(parse_gemm_precision("fp16", "t"), Error);
  EXPECT_THROW(parse_gemm_precision(nullptr, "t"), Error);
  EXPECT_EQ(resolve_gemm_precision(GemmPrecision::F32, true), GemmPrecision::F32);
  EXPECT_EQ(resolve_gemm_precision(GemmPrecision::BF16, false), GemmPrecision::BF16);
  // Auto: from the weights; the environment plays no part (no CBX_GEMM any more).
  EXPECT_EQ(resolve_gemm_precision(GemmPrecision::Auto, true), GemmPrecision::BF16);
  EXPECT_EQ(resolve_gemm_precision(GemmPrecision::Auto, false), GemmPrecision::F32);
  EXPECT_EQ(gemm_precision_for_f32_weights(), GemmPrecision::F32);
  EXPECT_FALSE(gemm_weight_is_lossy(DType::F32));
  EXPECT_TRUE(gemm_weight_is_lossy(DType::Q4_0));
  EXPECT_EQ(gemm_precision_scope(), GemmPrecision::Auto);
  {
    GemmPrecisionScope a(GemmPrecision::BF16);
    EXPECT_EQ(gemm_precision_scope(), GemmPrecision::BF16);
    EXPECT_EQ(gemm_precision_for_f32_weights(), GemmPrecision::BF16);
    {
      GemmPrecisionScope b(GemmPrecision::F32);
      EXPECT_EQ(gemm_precision_scope(), GemmPrecision::F32);
      GemmPrecisionScope c(GemmPrecision::Auto);  // Auto keeps the enclosing scope
      EXPECT_EQ(gemm_precision_scope(), GemmPrecision::F32);
    }
    EXPECT_EQ(gemm_precision_scope(), GemmPrecision::BF16);
  }
  EXPECT_EQ(gemm_precision_scope(), GemmPrecision::Auto);
  // Q4_0 weights under a BF16 scope and under an F32 scope through the plain front-end.
  if (forced_isa_unavailable()) return;
  Weight w = make_weight(DType::Q4_0, 64, 256, 3);
  Mat x = make_mat(40, 256, 0, 4), y1 = make_mat(40, 64, 0, 5), y2 = make_mat(40, 64, 0, 6);
  {
    GemmPrecisionScope s(GemmPrecision::BF16);
    matmul(pool(), w.t, x.t, y1.t);
  }
  {
    GemmPrecisionScope s(GemmPrecision::F32);
    matmul(pool(), w.t, x.t, y2.t);
  }
  EXPECT_EQ(std::memcmp(y1.v.data(), y2.v.data(), 40 * 64 * 4) != 0, gemm_bf16_available());
}

// The k-major bf16 GEMM used by convolutions: C = bias + A B with B rows by offset and by
// stride, against a double reference (bound as above).
TEST(Matmul, Bf16KMajorGemm) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  for (auto [m, n, k, use_off] : {std::tuple<int64_t, int64_t, int64_t, bool>{70, 301, 600, true},
                                  {32, 64, 32, false},
                                  {5, 7, 1100, true},
                                  {64, 1000, 96, false}}) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " n=" << n << " k=" << k);
    Mat a = make_mat(m, k, 3, uint32_t(m + n));
    const int64_t b_rs = n + 9;
    Mat b = make_mat(k + 2, b_rs, 0, uint32_t(k));
    std::vector<int64_t> off(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) off[size_t(i)] = ((i * 7) % k) * b_rs + 1;  // a permutation of rows, +1 col
    auto brow = [&](int64_t i) { return b.v.data() + (use_off ? off[size_t(i)] : i * b_rs); };
    std::vector<float> c(size_t(m * (n + 4)), 7.f), bias(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) bias[size_t(i)] = 0.01f * float(i);
    KMajorGemm q;
    q.a = a.v.data();
    q.a_rs = a.ld;
    q.b = b.v.data();
    q.b_off = use_off ? off.data() : nullptr;
    q.b_rs = b_rs;
    q.c = c.data();
    q.c_rs = n + 4;
    q.bias = bias.data();
    q.m = m;
    q.n = n;
    q.k = k;
    Arena arena(gemm_bf16_kmajor_scratch_bytes(m, k, pool().size()) + 64);
    const bool ran = gemm_bf16_kmajor(pool(), q, &arena);
    EXPECT_EQ(ran, gemm_bf16_available());
    EXPECT_EQ(arena.used(), 0u);
    if (!ran) continue;
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = bias[size_t(i)], mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = double(a.at(i, kk)) * brow(kk)[j];
          ref += p;
          mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(c[size_t(i * (n + 4) + j)] - ref) / (mag + 1e-30));
      }
    EXPECT_LE(worst, 4e-3);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = n; j < n + 4; ++j) EXPECT_EQ(c[size_t(i * (n + 4) + j)], 7.f);  // untouched
  }
}

TEST(Matmul, ArenaScratchAndLeadingDims) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  Weight w = make_weight(DType::Q4_0, 48, 256, 7);
  Mat x = make_mat(10, 256, 0, 8);
  std::vector<float> y3(10 * 48), y2(10 * 48);
  Tensor x3 = reshape(x.t, {2, 5, 256});
  Tensor yt3 = make_tensor(DType::F32, {2, 5, 48}, y3.data(), y3.size() * 4);
  Tensor yt2 = make_tensor(DType::F32, {10, 48}, y2.data(), y2.size() * 4);
  Arena arena(matmul_scratch_bytes(DType::Q4_0, 10, 48, 256, pool().size()));
  matmul(pool(), w.t, x3, yt3, &arena);
  EXPECT_EQ(arena.used(), 0u);
  matmul(pool(), w.t, x.t, yt2);
  for (size_t i = 0; i < y2.size(); ++i) EXPECT_EQ(y3[i], y2[i]);
  // N = 1 from a 1-D x.
  Tensor x1 = make_tensor(DType::F32, {256}, x.v.data(), 256 * 4);
  std::vector<float> y1(48);
  Tensor yt1 = make_tensor(DType::F32, {48}, y1.data(), y1.size() * 4);
  matmul(pool(), w.t, x1, yt1, &arena);
  Mat x0 = make_mat(1, 256, 0, 0);
  std::memcpy(x0.v.data(), x.v.data(), 256 * 4);
  std::vector<float> y0(48);
  Tensor yt0 = make_tensor(DType::F32, {1, 48}, y0.data(), y0.size() * 4);
  matmul(pool(), w.t, x0.t, yt0);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(y1[size_t(i)], y0[size_t(i)]);
}

TEST(Matmul, GemmF32ActivationsTimesActivations) {
  if (forced_isa_unavailable()) GTEST_SKIP();
  Mat a = make_mat(50, 70, 2, 1), b = make_mat(23, 70, 0, 2), c = make_mat(50, 23, 0, 3);
  gemm_f32(pool(), a.t, b.t, c.t);
  for (int64_t i = 0; i < 50; ++i)
    for (int64_t j = 0; j < 23; ++j) {
      double ref = 0, an = 0, bn = 0;
      for (int64_t q = 0; q < 70; ++q) {
        ref += double(a.at(i, q)) * b.at(j, q);
        an += double(a.at(i, q)) * a.at(i, q);
        bn += double(b.at(j, q)) * b.at(j, q);
      }
      EXPECT_LE(std::fabs(c.at(i, j) - ref), 1e-5 * std::sqrt(an * bn));
    }
  // BF16 on request (CFM attention): within 4e-3 sum |a b| (see the top), f32 bits without AMX.
  Mat c16 = make_mat(50, 23, 0, 4);
  gemm_f32(pool(), a.t, b.t, c16.t, nullptr, GemmPrecision::BF16);
  bool same = true;
  for (int64_t i = 0; i < 50; ++i)
    for (int64_t j = 0; j < 23; ++j) {
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < 70; ++q) {
        ref += double(a.at(i, q)) * b.at(j, q);
        mag += std::fabs(double(a.at(i, q)) * b.at(j, q));
      }
      EXPECT_LE(std::fabs(c16.at(i, j) - ref), 4e-3 * mag);
      same &= c16.at(i, j) == c.at(i, j);
    }
  EXPECT_EQ(same, !gemm_bf16_available());
}

TEST(Matmul, ShapeErrorsThrow) {
  Weight w = make_weight(DType::F32, 8, 64, 1);
  Mat x = make_mat(3, 64, 0, 2), y = make_mat(3, 8, 0, 3);
  Mat xbad = make_mat(3, 63, 0, 4), ybad = make_mat(3, 9, 0, 5), yrows = make_mat(4, 8, 0, 6);
  EXPECT_NO_THROW(matmul(pool(), w.t, x.t, y.t));
  EXPECT_THROW(matmul(pool(), w.t, xbad.t, y.t), Error);
  EXPECT_THROW(matmul(pool(), w.t, x.t, ybad.t), Error);
  EXPECT_THROW(matmul(pool(), w.t, x.t, yrows.t), Error);
  std::vector<float> b(9);
  Tensor bias = make_tensor(DType::F32, {9}, b.data(), b.size() * 4);
  EXPECT_THROW(matmul_bias(pool(), w.t, bias, x.t, y.t), Error);
  std::vector<int32_t> iv(64 * 8);
  Tensor wi = make_tensor(DType::I32, {8, 64}, iv.data(), iv.size() * 4);
  EXPECT_THROW(matmul(pool(), wi, x.t, y.t), Error);
  Tensor xt = transpose(x.t, 0, 1);  // innermost not contiguous
  Mat y64 = make_mat(64, 8, 0, 7);
  Weight w3 = make_weight(DType::F32, 8, 3, 1);
  EXPECT_THROW(matmul(pool(), w3.t, xt, y64.t), Error);
  try {
    matmul(pool(), w.t, xbad.t, y.t);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 63]"), std::string::npos) << e.what();
  }
}

}  // namespace
