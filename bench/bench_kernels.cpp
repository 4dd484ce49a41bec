// chatterbox-bench kernels [--threads N] [--reps R] [--mb MB] [--clock wall|cpu]
//
// 1. Stream read bandwidth (a buffer of --mb MB, default 1024, summed with AVX loads by N
//    threads as one or four interleaved streams each; best of both and of R reps):
//    `kernels op=stream threads=N gbps=...`.
// 2. Matvec (decode, N = 1) through ops/matmul for every weight dtype and shape M x K:
//    weights are cycled through enough copies to exceed the same working set, so each call
//    reads DRAM as a real decode step does. gbps = weight bytes / time, ratio = gbps /
//    stream gbps of the same thread count, measured just before.
// 3. GEMM for f32 and bf16 weights, against OpenBLAS sgemm on the same shapes when built
//    with it (CBX_HAVE_OPENBLAS); bf16 also reports ratio_f32 = bf16 gflops / our f32 gflops.
// Every figure is the median of R repetitions (default 5) unless stated.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
#include "ops/matmul.h"
#include "stream_read.h"

#ifdef CBX_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace cbx::bench {
namespace {

// --clock wall (default): wall-clock seconds. --clock cpu: process CPU seconds divided by
// the thread count, an estimate of the unloaded wall time on a machine shared with other
// work (a descheduled thread accrues no CPU time; the pool's workers spin only briefly).
bool g_cpu_clock = false;
int g_threads = 1;

double now_s() { return clock_seconds(g_cpu_clock, g_threads); }

struct Buffer {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit Buffer(size_t bytes) : n((bytes + 4095) & ~size_t(4095)) {
    p = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    CBX_CHECK(p, "bench kernels: cannot allocate %zu bytes", n);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

void fill_random(float* p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < n; ++i) p[i] = nd(rng);
}

// Weight [m, k] of type t at dst, from random values.
void make_weight(DType t, int64_t m, int64_t k, uint8_t* dst, uint32_t seed) {
  std::vector<float> row(static_cast<size_t>(k));
  const TypeTraits& tr = type_traits(t);
  const size_t rb = dtype_row_bytes(t, k);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : row) v = nd(rng);
    tr.from_float(row.data(), dst + size_t(i) * rb, k);
  }
}

double matvec_gbps(ThreadPool& pool, DType t, int64_t m, int64_t k, Buffer& wbuf, size_t working_set, int reps) {
  const size_t bytes = dtype_row_bytes(t, k) * size_t(m);
  const size_t stride = (bytes + 4095) & ~size_t(4095);
  const size_t copies = std::max<size_t>(2, std::min(wbuf.n / stride, (working_set + bytes - 1) / bytes));
  make_weight(t, m, k, wbuf.p, 1234);
  for (size_t c = 1; c < copies; ++c) std::memcpy(wbuf.p + c * stride, wbuf.p, bytes);
  std::vector<Tensor> w;
  for (size_t c = 0; c < copies; ++c) w.push_back(make_tensor(t, {m, k}, wbuf.p + c * stride, bytes));
  std::vector<float> xv(static_cast<size_t>(k)), yv(static_cast<size_t>(m));
  fill_random(xv.data(), xv.size(), 5);
  Tensor x = make_tensor(DType::F32, {1, k}, xv.data(), xv.size() * 4);
  Tensor y = make_tensor(DType::F32, {1, m}, yv.data(), yv.size() * 4);
  std::vector<double> g;
  for (int r = 0; r < reps + 1; ++r) {
    double t0 = now_s();
    for (size_t c = 0; c < copies; ++c) matmul(pool, w[c], x, y);
    double dt = now_s() - t0;
    if (r > 0) g.push_back(double(bytes) * double(copies) / dt / 1e9);  // first pass warms up
  }
  return median(g);
}

double gemm_gflops(ThreadPool& pool, DType t, int64_t m, int64_t k, int64_t n, int reps) {
  std::vector<uint8_t> wb(dtype_row_bytes(t, k) * size_t(m));
  make_weight(t, m, k, wb.data(), 77);
  std::vector<float> xv(size_t(n * k)), yv(size_t(n * m));
  fill_random(xv.data(), xv.size(), 6);
  Tensor w = make_tensor(t, {m, k}, wb.data(), wb.size());
  Tensor x = make_tensor(DType::F32, {n, k}, xv.data(), xv.size() * 4);
  Tensor y = make_tensor(DType::F32, {n, m}, yv.data(), yv.size() * 4);
  std::vector<double> g;
  for (int r = 0; r < reps + 1; ++r) {
    double t0 = now_s();
    matmul(pool, w, x, y);
    double dt = now_s() - t0;
    if (r > 0) g.push_back(2.0 * double(m) * double(n) * double(k) / dt / 1e9);
  }
  return median(g);
}

#ifdef CBX_HAVE_OPENBLAS
double openblas_gflops(int threads, int64_t m, int64_t k, int64_t n, int reps) {
  openblas_set_num_threads(threads);
  std::vector<float> wv(size_t(m * k)), xv(size_t(n * k)), yv(size_t(n * m));
  fill_random(wv.data(), wv.size(), 7);
  fill_random(xv.data(), xv.size(), 8);
  std::vector<double> g;
  for (int r = 0; r < reps + 1; ++r) {
    double t0 = now_s();
    // y[n, m] = x[n, k] . w[m, k]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(m), int(k), 1.f, xv.data(), int(k), wv.data(),
                int(k), 0.f, yv.data(), int(m));
    double dt = now_s() - t0;
    if (r > 0) g.push_back(2.0 * double(m) * double(n) * double(k) / dt / 1e9);
  }
  return median(g);
}
#endif

int run_kernels(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int reps = 5;
  size_t mb = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench kernels: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--threads")
      threads = {int(int_arg("bench kernels: " + a, next(), 1, 1024))};
    else if (a == "--reps")
      reps = int(int_arg("bench kernels: " + a, next(), 3, 1000));
    else if (a == "--mb")
      mb = size_t(int_arg("bench kernels: " + a, next(), 64, 65536));
    else if (a == "--clock")
      g_cpu_clock = cpu_clock_arg("bench kernels: " + a, next());
    else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "chatterbox-bench kernels: unknown option '%s'\n", a.c_str());
      std::fprintf(help ? stdout : stderr,
                   "usage: chatterbox-bench kernels [--threads N] [--reps R] [--mb MB] [--clock wall|cpu]\n");
      return help ? 0 : 1;
    }
  }
  std::printf("kernels isa=%s reps=%d working_set_mb=%zu clock=%s\n", isa_name(active_isa()), reps, mb,
              g_cpu_clock ? "cpu" : "wall");
  const size_t working_set = mb << 20;
  Buffer buf(working_set + (64u << 20));
  std::memset(buf.p, 0, buf.n);  // fault the pages in once

  struct Shape {
    int64_t m, k;
  };
  const Shape shapes[] = {{1024, 1024}, {3072, 1024}, {4096, 1024}, {1024, 4096}, {6563, 1024}};
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K};
  for (int nt : threads) {
    ThreadPool pool(nt);
    g_threads = nt;
    Buffer sbuf(working_set);
    std::memset(sbuf.p, 1, sbuf.n);
    const double stream = stream_read_gbps(pool, sbuf.p, sbuf.n, reps, now_s);
    std::printf("kernels op=stream threads=%d gbps=%.1f\n", nt, stream);
    std::fflush(stdout);
    for (const Shape& s : shapes)
      for (DType t : types) {
        double g = matvec_gbps(pool, t, s.m, s.k, buf, working_set, reps);
        std::printf("kernels op=matvec dtype=%s shape=%lldx%lld threads=%d gbps=%.1f ratio=%.2f\n", dtype_name(t),
                    (long long)s.m, (long long)s.k, nt, g, g / stream);
        std::fflush(stdout);
      }
  }

  struct GemmShape {
    int64_t m, k, n;
  };
  const GemmShape gshapes[] = {{512, 512, 1000}, {256, 1024, 1000}, {1024, 1024, 500}};
  // Ours first for every thread count, then OpenBLAS: its idle workers keep spinning for a
  // while after a call and would take a core from the next measurement.
  struct GemmResult {
    double f32, bf16, openblas;
  };
  std::vector<GemmResult> res;
  for (int nt : threads) {
    ThreadPool pool(nt);
    g_threads = nt;
    for (const GemmShape& s : gshapes)
      res.push_back({gemm_gflops(pool, DType::F32, s.m, s.k, s.n, reps),
                     gemm_gflops(pool, DType::BF16, s.m, s.k, s.n, reps), 0.0});
  }
#ifdef CBX_HAVE_OPENBLAS
  size_t ri = 0;
  for (int nt : threads) {
    g_threads = nt;
    for (const GemmShape& s : gshapes) res[ri++].openblas = openblas_gflops(nt, s.m, s.k, s.n, reps);
  }
#endif
  size_t i = 0;
  for (int nt : threads)
    for (const GemmShape& s : gshapes) {
      const GemmResult& r = res[i++];
      if (r.openblas > 0)
        std::printf(
            "kernels op=gemm dtype=f32 m=%lld k=%lld n=%lld threads=%d gflops=%.1f openblas_gflops=%.1f "
            "ratio_openblas=%.2f\n",
            (long long)s.m, (long long)s.k, (long long)s.n, nt, r.f32, r.openblas, r.f32 / r.openblas);
      else
        std::printf("kernels op=gemm dtype=f32 m=%lld k=%lld n=%lld threads=%d gflops=%.1f\n", (long long)s.m,
                    (long long)s.k, (long long)s.n, nt, r.f32);
      std::printf("kernels op=gemm dtype=bf16 m=%lld k=%lld n=%lld threads=%d gflops=%.1f ratio_f32=%.2f\n",
                  (long long)s.m, (long long)s.k, (long long)s.n, nt, r.bf16, r.bf16 / r.f32);
    }
  return 0;
}

RegisterBench reg("kernels", "stream bandwidth, matvec per weight dtype, GEMM vs OpenBLAS", run_kernels);

}  // namespace
}  // namespace cbx::bench
