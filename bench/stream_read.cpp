#include "stream_read.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CBX_BENCH_X86 1
#else
#define CBX_BENCH_X86 0  // plain C++ reads (the compiler's vectors), no AVX-512 FMA chains
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/huge_buffer.h"
#include "core/thread_pool.h"

namespace cbx::bench {
namespace {

// The reads below without AVX2 (another architecture, or an x86 CPU without it): eight
// accumulators, which the compiler keeps in vector registers.
float sum_plain(const float* p, size_t n) {
  float a[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + size_t(j)];
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

float sum4_plain(const float* p, size_t n) {
  const size_t part = n / 4 / 16 * 16;
  float a[4][8] = {};
  for (size_t i = 0; i < part; i += 16)
    for (size_t s = 0; s < 4; ++s) {
      const float* q = p + s * part + i;
      __builtin_prefetch(q + 512, 0, 2);
      for (int j = 0; j < 8; ++j) a[s][j] += q[j] + q[j + 8];
    }
  float t = 0.f;
  for (const auto& v : a)
    for (float x : v) t += x;
  return t;
}

#if CBX_BENCH_X86
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float t[8];
  _mm256_storeu_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// Four interleaved sequential streams with an L2 software prefetch ahead of each: on
// some CPUs one core gets ~25% more DRAM bandwidth this way.
__attribute__((target("avx2"))) float sum4_avx2(const float* p, size_t n) {
  const size_t part = n / 4 / 16 * 16;
  __m256 a[4];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (size_t i = 0; i < part; i += 16)
    for (int s = 0; s < 4; ++s) {
      const float* q = p + s * part + i;
      _mm_prefetch(reinterpret_cast<const char*>(q + 512), _MM_HINT_T1);
      a[s] = _mm256_add_ps(a[s], _mm256_add_ps(_mm256_load_ps(q), _mm256_load_ps(q + 8)));
    }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif  // CBX_BENCH_X86

// fma_chains_avx512 with scalar multiply-adds (a CPU without AVX-512).
__attribute__((noinline)) float fma_chains_scalar(long n) {
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = float(i);
  float x = 1.f;
  const float y = 0.5f;
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = a[i] * x + y;
    __asm__ volatile("" : "+r"(x));
  }
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += a[i];
  return s;
}

// sum_avx2 / sum4_avx2 where the CPU has AVX2, else the plain ones.
float sum_read(const float* p, size_t n, bool four_streams) {
#if CBX_BENCH_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return four_streams ? sum4_avx2(p, n) : sum_avx2(p, n);
#endif
  return four_streams ? sum4_plain(p, n) : sum_plain(p, n);
}

}  // namespace

#if CBX_BENCH_X86
__attribute__((target("avx512f"), noinline)) float fma_chains_avx512(long n) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  __m512 x = _mm512_set1_ps(1.f);
  const __m512 y = _mm512_set1_ps(0.5f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
    __asm__ volatile("" : "+v"(x));
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  float t[16];
  _mm512_storeu_ps(t, s);
  return t[0] + t[15];
}
#endif  // CBX_BENCH_X86

double core_fma_per_cycle() {
#if CBX_BENCH_X86
  float (*const chains)(long) = __builtin_cpu_supports("avx512f") ? fma_chains_avx512 : fma_chains_scalar;
#else
  float (*const chains)(long) = fma_chains_scalar;
#endif
  const double ghz = core_clock_ghz();
  constexpr long kIters = 1 << 13;  // x 16 FMAs: ~65 us a pass at 2 a cycle and 3.5 GHz
  volatile float sink = 0.f;
  double best = 0.0;
  for (int rep = 0; rep < 15; ++rep) {  // the best of ~1 ms of passes
    const double t0 = wall_seconds();
    sink = sink + chains(kIters);
    const double dt = wall_seconds() - t0;
    if (dt > 0) best = std::max(best, double(kIters) * 16 / dt);
  }
  return ghz > 0 ? best / (ghz * 1e9) : 0.0;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double core_clock_ghz() {
  constexpr long kIters = 1 << 18, kAdds = 8;  // 2 M dependent adds
  long x = 0;
  const double t0 = wall_seconds();
  for (long i = 0; i < kIters; ++i) {
#if CBX_BENCH_X86
    asm volatile(
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
        : "+r"(x));
#elif defined(__aarch64__)
    asm volatile(
        "add %0, %0, #1\n\tadd %0, %0, #1\n\tadd %0, %0, #1\n\tadd %0, %0, #1\n\t"
        "add %0, %0, #1\n\tadd %0, %0, #1\n\tadd %0, %0, #1\n\tadd %0, %0, #1"
        : "+r"(x));
#else
    return 0.0;  // no dependent-add chain written for this architecture
#endif
  }
  const double dt = wall_seconds() - t0;
  return dt > 0 && x == kIters * kAdds ? double(kIters * kAdds) / dt / 1e9 : 0.0;
}

double stream_read_gbps(ThreadPool& pool, const uint8_t* buf, size_t bytes, int reps, double (*clock_s)()) {
  const size_t nf = bytes / 4;
  volatile float sink = 0.f;
  double best = 0;
  for (int variant = 0; variant < 2; ++variant)
    for (int r = 0; r < reps + 1; ++r) {  // the first pass of each variant warms up
      float part[1024] = {};
      const double t0 = clock_s();
      pool.run([&](int ith, int nth) {
        int64_t b, e;
        ThreadPool::split(int64_t(nf / 64), ith, nth, &b, &e);
        const float* p = reinterpret_cast<const float*>(buf) + b * 64;
        const size_t n = size_t(e - b) * 64;
        part[ith] = sum_read(p, n, variant == 1);
      });
      const double dt = clock_s() - t0;
      sink = sink + part[0];
      if (r > 0 && dt > 0) best = std::max(best, double(nf / 64 * 64 * 4) / dt / 1e9);
    }
  return best;
}

double stream_read_gbps(ThreadPool& pool, size_t mb, int reps, bool huge_pages) {
  // On huge pages where the kernel allows them, like the decode's re-laid-out weights: the
  // reference is the best read the machine gives, not one slowed by 4 KB page walks.
  const size_t bytes = mb << 20;
  HugeBuffer buf(bytes, huge_pages);
  CBX_CHECK(buf.data(), "bench: cannot allocate %zu MB for the stream read", mb);
  std::memset(buf.data(), 1, bytes);
  return stream_read_gbps(pool, buf.data(), bytes, reps);
}

StreamSampler::StreamSampler(ThreadPool& pool, size_t mb) : pool_(pool), buf_(mb << 20) {
  CBX_CHECK(mb > 0 && buf_.data(), "bench: cannot allocate %zu MB for the stream samples", mb);
  std::memset(buf_.data(), 1, buf_.size());
  gbps_.reserve(64);
  ghz_.reserve(64);
  fma_.reserve(64);
}

void StreamSampler::sample() {
  auto process_cpu = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
  };
  const double t0 = wall_seconds(), c0 = process_cpu();
  gbps_.push_back(stream_read_gbps(pool_, buf_.data(), buf_.size(), 1));
  ghz_.push_back(core_clock_ghz());
  fma_.push_back(core_fma_per_cycle());
  last_s_ = wall_seconds() - t0;
  elapsed_s_ += last_s_;
  cpu_s_ += process_cpu() - c0;
}

double StreamSampler::mean_gbps() const {
  double s = 0;
  for (double g : gbps_) s += g;
  return gbps_.empty() ? 0.0 : s / double(gbps_.size());
}

double StreamSampler::mean_clock_ghz() const {
  double s = 0;
  for (double g : ghz_) s += g;
  return ghz_.empty() ? 0.0 : s / double(ghz_.size());
}

double StreamSampler::mean_fma_per_cycle() const {
  double s = 0;
  for (double g : fma_) s += g;
  return fma_.empty() ? 0.0 : s / double(fma_.size());
}

double StreamSampler::min_gbps() const { return gbps_.empty() ? 0.0 : *std::min_element(gbps_.begin(), gbps_.end()); }

double StreamSampler::max_gbps() const { return gbps_.empty() ? 0.0 : *std::max_element(gbps_.begin(), gbps_.end()); }

double peak_rss_without(const StreamSampler& s, double before_mb, double now_mb) {
  return std::max(before_mb, now_mb - double(s.bytes()) / double(1 << 20));
}

}  // namespace cbx::bench
