// chatterbox-bench attention [--t T] [--tk TK] [--batch B] [--heads H] [--dim D] [--threads N]
//                            [--reps R] [--clock wall|cpu]
//
// One CFM-estimator attention (bidirectional, q/k/v heads of a [B, T, 3 H D] buffer, output
// into [B, T, H D]; defaults T = TK = 900, B = 1, H = 8, D = 64, 2 threads) two ways:
//   gemm:  the estimator's per-item path at the BF16 GEMM precision: q scaled, v transposed,
//          then per (b, head, 128 queries) gemm_f32(q k^T) -> softmax -> gemm_f32(P v) on
//          single-thread pools, items spread over the pool (models/cfm_estimator.cpp)
//   fused: ops/attention_bf16 (AMX tiles, one pass per 32 queries)
// Prints the median ms of each over R reps (default 7), their ratio, and the max |difference|
// of the outputs. --clock cpu divides process CPU time by the thread count (for a loaded
// machine: a descheduled thread accrues none; idle spinning of the pool still counts).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/attention_bf16.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx::bench {
namespace {

bool g_cpu = false;
int g_threads = 2;

double now_s() { return clock_seconds(g_cpu, g_threads); }

int run_attention(int argc, char** argv) {
  int64_t T = 900, Tk = -1, B = 1, H = 8, D = 64;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench attention: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--t")
      T = int_arg("bench attention: " + a, next(), 1, 1 << 20);
    else if (a == "--tk")
      Tk = int_arg("bench attention: " + a, next(), 1, 1 << 20);
    else if (a == "--batch")
      B = int_arg("bench attention: " + a, next(), 1, 1024);
    else if (a == "--heads")
      H = int_arg("bench attention: " + a, next(), 1, 1024);
    else if (a == "--dim")
      D = int_arg("bench attention: " + a, next(), 1, 4096);
    else if (a == "--threads")
      g_threads = int(int_arg("bench attention: " + a, next(), 1, 1024));
    else if (a == "--reps")
      reps = int(int_arg("bench attention: " + a, next(), 3, 1000));
    else if (a == "--clock")
      g_cpu = cpu_clock_arg("bench attention: " + a, next());
    else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "chatterbox-bench attention: unknown option '%s'\n", a.c_str());
      std::fprintf(help ? stdout : stderr,
                   "usage: chatterbox-bench attention [--t T] [--tk TK] [--batch B] [--heads H] [--dim D] "
                   "[--threads N] [--reps R] [--clock wall|cpu]\n");
      return help ? 0 : 1;
    }
  }
  if (Tk < 0 || Tk > T) Tk = T;
  const int64_t inner = H * D, kChunk = 128;
  ThreadPool pool(g_threads);
  std::vector<float> qkv0(size_t(B * T * 3 * inner)), qkv(qkv0.size()), att_g(size_t(B * T * inner)),
      att_f(att_g.size()), vt_buf(size_t(B * inner * Tk));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& x : qkv0) x = nd(rng);
  const Tensor qkv_t = make_tensor(DType::F32, {B, T, 3 * inner}, qkv.data(), qkv.size() * 4);
  const Tensor att_gt = make_tensor(DType::F32, {B, T, inner}, att_g.data(), att_g.size() * 4);
  const Tensor att_ft = make_tensor(DType::F32, {B, T, inner}, att_f.data(), att_f.size() * 4);
  auto heads = [&](const Tensor& buf, int64_t col0, int64_t rows) {
    const int64_t sh[4] = {B, H, rows, D}, st[4] = {buf.stride[0], D * 4, buf.stride[1], 4};
    return make_view(buf, 4, sh, st, col0 * 4);
  };
  auto head2 = [&](const Tensor& buf, int64_t col0, int64_t b, int64_t h, int64_t r0, int64_t rows) {
    const int64_t sh[2] = {rows, D}, st[2] = {buf.stride[1], 4};
    return make_view(buf, 2, sh, st, b * buf.stride[0] + r0 * buf.stride[1] + (col0 + h * D) * 4);
  };

  // gemm path scratch, as the estimator reserves it
  std::vector<std::unique_ptr<ThreadPool>> solo;
  std::vector<Arena> solo_arena;
  const int64_t Qc = std::min(T, kChunk);
  const size_t per_thread =
      size_t(Qc * Tk) * 4 +
      std::max(matmul_scratch_bytes(DType::F32, Qc, Tk, D, 1), matmul_scratch_bytes(DType::F32, Qc, D, Tk, 1)) + 1024;
  for (int i = 0; i < g_threads; ++i) {
    solo.push_back(std::make_unique<ThreadPool>(1));
    solo_arena.emplace_back(per_thread);
  }
  const Tensor vt_t = make_tensor(DType::F32, {B, inner, Tk}, vt_buf.data(), vt_buf.size() * 4);
  auto run_gemm = [&]() {
    const int64_t qsh[3] = {B, T, inner}, qst[3] = {qkv_t.stride[0], qkv_t.stride[1], 4};
    Tensor q3 = make_view(qkv_t, 3, qsh, qst, 0);
    scale(pool, q3, q3, 1.f / std::sqrt(float(D)));
    pool.run([&](int ith, int nth) {  // v^T per (b, channel)
      int64_t r0, r1;
      ThreadPool::split(B * inner, ith, nth, &r0, &r1);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / inner, c = r % inner;
        const float* src = qkv.data() + b * T * 3 * inner + 2 * inner + c;
        float* dst = vt_buf.data() + r * Tk;
        for (int64_t j = 0; j < Tk; ++j) dst[j] = src[j * 3 * inner];
      }
    });
    const int64_t n_chunks = (T + kChunk - 1) / kChunk, items = B * H * n_chunks;
    pool.run([&](int ith, int nth) {
      ThreadPool& sp = *solo[size_t(ith)];
      Arena& ar = solo_arena[size_t(ith)];
      for (int64_t it = ith; it < items; it += nth) {
        const int64_t b = it / (H * n_chunks), h = (it / n_chunks) % H, q0 = (it % n_chunks) * kChunk;
        const int64_t nq = std::min(kChunk, T - q0);
        ar.reset();
        Tensor sc = ar.alloc(DType::F32, {nq, Tk}, "scores");
        const int64_t vsh[2] = {D, Tk}, vst[2] = {vt_t.stride[1], 4};
        const Tensor vth = make_view(vt_t, 2, vsh, vst, b * vt_t.stride[0] + h * D * vt_t.stride[1]);
        gemm_f32(sp, head2(qkv_t, 0, b, h, q0, nq), head2(qkv_t, inner, b, h, 0, Tk), sc, &ar, GemmPrecision::BF16);
        softmax(sp, sc, sc);
        Tensor oq = head2(att_gt, 0, b, h, q0, nq);
        gemm_f32(sp, sc, vth, oq, &ar, GemmPrecision::BF16);
      }
    });
  };
  Arena scratch(attention_bf16_scratch_bytes(B, H, Tk, D, g_threads));
  const bool fused_ok = attention_bf16_available(D);
  auto run_fused = [&]() {
    Tensor o = heads(att_ft, 0, T);
    attention_bf16(pool, heads(qkv_t, 0, T), heads(qkv_t, inner, Tk), heads(qkv_t, 2 * inner, Tk), o,
                   1.f / std::sqrt(float(D)), scratch);
  };

  std::vector<double> tg, tf;
  for (int r = 0; r < reps + 1; ++r) {
    qkv = qkv0;
    double t0 = now_s();
    run_gemm();
    double t1 = now_s();
    if (r) tg.push_back((t1 - t0) * 1e3);
    if (!fused_ok) continue;
    qkv = qkv0;
    t0 = now_s();
    run_fused();
    t1 = now_s();
    if (r) tf.push_back((t1 - t0) * 1e3);
  }
  double diff = 0;
  if (fused_ok)
    for (size_t i = 0; i < att_g.size(); ++i) diff = std::max(diff, double(std::fabs(att_g[i] - att_f[i])));
  std::printf("bench attention isa=%s threads=%d B=%lld H=%lld T=%lld Tk=%lld D=%lld reps=%d clock=%s gemm_ms=%.2f",
              isa_name(active_isa()), g_threads, (long long)B, (long long)H, (long long)T, (long long)Tk, (long long)D,
              reps, g_cpu ? "cpu" : "wall", median(tg));
  if (fused_ok)
    std::printf(" fused_ms=%.2f ratio=%.2f max_abs_diff=%.2e\n", median(tf), median(tg) / median(tf), diff);
  else
    std::printf(" fused=unavailable\n");
  return 0;
}

RegisterBench reg("attention", "CFM attention at T frames: per-item GEMM + softmax vs fused AMX bf16", run_attention);

}  // namespace
}  // namespace cbx::bench
