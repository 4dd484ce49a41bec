// chatterbox-bench cfm-linears [--t T] [--batch B] [--type f16|q8_0|q4_0|f32] [--threads N]
//                              [--reps R] [--clock wall|cpu] [--gemm f32|bf16|int8]
//
// The linears of one CFM-estimator transformer block (models/cfm_estimator.cpp; defaults
// T = 900, B = 2 (the Multilingual CFG pair), C = 256, inner = 512, F = 1024, q4_0 weights,
// BF16 GEMM precision, 2 threads) two ways, alternating within each repetition:
//   percall: layer_norm; matmul to_q, to_k, to_v into column slices of qkv; matmul_bias
//            to_out + add; layer_norm; matmul_bias ff1 + gelu; matmul_bias ff2 + add (weights
//            packed on every call)
//   packed:  matmul_packed on the PackedWeights (q|k|v stacked; the LayerNorms fused as
//            prologues; bias, GELU and the residual fused into the GEMM epilogues), the
//            feed-forward as one matmul_mlp (hidden rows kept per thread)
// Prints the median ms of each over R reps (default 9), their ratio, the panel bytes, and
// whether the outputs are bit-identical (they must be, except with --gemm int8: the packed
// side runs the int8 GEMM, the per-call side bf16). --clock cpu divides process CPU
// time by the thread count (for a loaded machine; the pool's idle spinning still counts).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx::bench {
namespace {

bool g_cpu = false;
int g_threads = 2;

double now_s() { return clock_seconds(g_cpu, g_threads); }

struct Buf {
  std::vector<float> v;
  Tensor t;
  Buf(std::initializer_list<int64_t> shape, std::mt19937& rng, float sd) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    v.resize(size_t(n));
    std::normal_distribution<float> nd(0.f, sd);
    for (auto& x : v) x = nd(rng);
    t = make_tensor(DType::F32, shape, v.data(), v.size() * 4);
  }
};

struct Mat {  // a weight of dtype t: [m, k]
  std::vector<uint8_t> bytes;
  Tensor t;
  Mat(DType dt, int64_t m, int64_t k, std::mt19937& rng) {
    bytes.resize(dtype_row_bytes(dt, k) * size_t(m));
    std::vector<float> row(static_cast<size_t>(k));
    std::normal_distribution<float> nd(0.f, 0.05f);
    for (int64_t i = 0; i < m; ++i) {
      for (auto& x : row) x = nd(rng);
      type_traits(dt).from_float(row.data(), bytes.data() + size_t(i) * dtype_row_bytes(dt, k), k);
    }
    t = make_tensor(dt, {m, k}, bytes.data(), bytes.size());
  }
};

int run_cfm_linears(int argc, char** argv) {
  int64_t T = 900, B = 2;
  const int64_t C = 256, inner = 512, F = 1024;
  int reps = 9;
  DType dt = DType::Q4_0;
  GemmPrecision prec = GemmPrecision::BF16;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "cfm-linears: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--t")
      T = int_arg("bench cfm-linears: " + a, next(), 1, 1 << 20);
    else if (a == "--batch")
      B = int_arg("bench cfm-linears: " + a, next(), 1, 1024);
    else if (a == "--threads")
      g_threads = int(int_arg("bench cfm-linears: " + a, next(), 1, 1024));
    else if (a == "--reps")
      reps = int(int_arg("bench cfm-linears: " + a, next(), 1, 1000));
    else if (a == "--clock")
      g_cpu = cpu_clock_arg("bench cfm-linears: " + a, next());
    else if (a == "--gemm")
      prec = parse_gemm_precision(next(), "--gemm");
    else if (a == "--type") {
      const std::string s = next();
      dt = s == "f32"    ? DType::F32
           : s == "f16"  ? DType::F16
           : s == "q8_0" ? DType::Q8_0
           : s == "q4_0" ? DType::Q4_0
                         : (fail("cfm-linears: --type %s is not f32, f16, q8_0, q4_0", s.c_str()), DType::F32);
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "chatterbox-bench cfm-linears: unknown option '%s'\n", a.c_str());
      std::fprintf(help ? stdout : stderr,
                   "usage: chatterbox-bench cfm-linears [--t T] [--batch B] [--type f16|q8_0|q4_0|f32] "
                   "[--threads N] [--reps R] [--clock wall|cpu] [--gemm f32|bf16|int8]\n");
      return help ? 0 : 2;
    }
  }
  ThreadPool pool(g_threads);
  GemmPrecisionScope scope(prec);
  std::mt19937 rng(7);
  Mat wq(dt, inner, C, rng), wk(dt, inner, C, rng), wv(dt, inner, C, rng), wo(dt, C, inner, rng);
  Mat w1(dt, F, C, rng), w2(dt, C, F, rng);
  Buf bo({C}, rng, 0.1f), b1({F}, rng, 0.1f), b2({C}, rng, 0.1f);
  Buf l1w({C}, rng, 0.1f), l1b({C}, rng, 0.1f), l3w({C}, rng, 0.1f), l3b({C}, rng, 0.1f);
  Buf norm({B, T, C}, rng, 1.f), att({B, T, inner}, rng, 1.f), x0({B, T, C}, rng, 1.f);
  Buf qkv_a({B, T, 3 * inner}, rng, 0), qkv_b({B, T, 3 * inner}, rng, 0), ff_a({B, T, F}, rng, 0),
      ff_b({B, T, F}, rng, 0), tmp({B, T, C}, rng, 0), xa({B, T, C}, rng, 0), xb({B, T, C}, rng, 0);

  const PackedWeight pqkv = pack_weight(pool, {&wq.t, &wk.t, &wv.t}, prec, "qkv");
  const PackedWeight po = pack_weight(pool, {&wo.t}, prec, "to_out");
  const PackedWeight p1 = pack_weight(pool, {&w1.t}, prec, "ff1");
  const PackedWeight p2 = pack_weight(pool, {&w2.t}, prec, "ff2");
  const size_t panel = pqkv.panel_bytes() + po.panel_bytes() + p1.panel_bytes() + p2.panel_bytes();

  auto percall = [&] {
    Tensor& q = qkv_a.t;
    Tensor qs = slice(q, 2, 0, inner), ks = slice(q, 2, inner, inner), vs = slice(q, 2, 2 * inner, inner);
    layer_norm(pool, xa.t, l1w.t, l1b.t, 1e-5f, norm.t);
    matmul(pool, wq.t, norm.t, qs);
    matmul(pool, wk.t, norm.t, ks);
    matmul(pool, wv.t, norm.t, vs);
    matmul_bias(pool, wo.t, bo.t, att.t, tmp.t);
    add(pool, xa.t, tmp.t, xa.t);
    layer_norm(pool, xa.t, l3w.t, l3b.t, 1e-5f, norm.t);
    matmul_bias(pool, w1.t, b1.t, norm.t, ff_a.t);
    gelu(pool, ff_a.t, ff_a.t);
    matmul_bias(pool, w2.t, b2.t, ff_a.t, tmp.t);
    add(pool, xa.t, tmp.t, xa.t);
  };
  auto packed = [&] {
    matmul_packed(pool, pqkv, xb.t, qkv_b.t, MatmulEpilogue{nullptr, MatmulAct::None, nullptr, &l1w.t, &l1b.t, 1e-5f});
    matmul_packed(pool, po, att.t, xb.t, MatmulEpilogue{&bo.t, MatmulAct::None, &xb.t});
    matmul_mlp(pool, p1, MatmulEpilogue{&b1.t, MatmulAct::Gelu, nullptr, &l3w.t, &l3b.t, 1e-5f}, p2,
               MatmulEpilogue{&b2.t, MatmulAct::None, &xb.t}, xb.t, ff_b.t, xb.t);
  };
  std::vector<double> ta, tb;
  bool same = true;
  for (int r = 0; r < reps + 1; ++r) {
    xa.v = x0.v;
    xb.v = x0.v;
    double t0 = now_s();
    percall();
    double t1 = now_s();
    packed();
    double t2 = now_s();
    if (r) {
      ta.push_back((t1 - t0) * 1e3);
      tb.push_back((t2 - t1) * 1e3);
    }
    auto eq = [](const Buf& a, const Buf& b) { return std::memcmp(a.v.data(), b.v.data(), a.v.size() * 4) == 0; };
    same &= eq(xa, xb) && eq(qkv_a, qkv_b);  // ff_b is not written on the MLP panel path
  }
  std::printf(
      "bench cfm-linears isa=%s threads=%d B=%lld T=%lld type=%s gemm=%s panels=%d reps=%d "
      "clock=%s "
      "percall_ms=%.2f packed_ms=%.2f ratio=%.3f panel_mb=%.2f identical=%d\n",
      isa_name(active_isa()), g_threads, (long long)B, (long long)T, dtype_name(dt), gemm_precision_name(prec),
      int(pqkv.has_panels()), reps, g_cpu ? "cpu" : "wall", median(ta), median(tb), median(ta) / median(tb),
      double(panel) / (1 << 20), int(same));
  return same || prec == GemmPrecision::Int8 ? 0 : 1;
}

const RegisterBench reg("cfm-linears",
                        "CFM transformer-block linears: per-call packing vs PackedWeight + fused epilogues",
                        run_cfm_linears);

}  // namespace
}  // namespace cbx::bench
