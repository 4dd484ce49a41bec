// The stream-read bandwidth every bench divides by, measured one way for all of them so
// their ratios compare: the better of one sequential stream and four interleaved streams
// with an L2 prefetch per thread (how the matvec kernels read weights), best of reps,
// over a buffer on transparent huge pages where the kernel allows them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/huge_buffer.h"

namespace cbx {
class ThreadPool;
}

namespace cbx::bench {

double wall_seconds();

// The calling core's clock (GHz) as a chain of dependent integer adds runs it (one add a
// cycle on every x86 core this targets), over ~1 ms. On a shared host the clock a guest's
// vCPU gets moves too (the Zen 5 dev VM: 3.4 GHz, and 2.5-2.7 in a contended hour, when
// every compute stage ran ~1.4x slower): printed next to the timings so that runs of
// different hours can be told apart.
double core_clock_ghz();

// Vector FMAs a cycle the calling core retires (16 independent FMA chains, 512-bit on
// AVX-512, else scalar multiply-adds), over ~1 ms at the clock core_clock_ghz reads
// just before. The clock alone does not show a vCPU whose physical core is shared with
// another busy thread (SMT): its dependent adds still run one a cycle, but its throughput
// halves. On the Zen 5 dev VM: ~2 (two 512-bit FMA pipes) when the core is its own; runs
// in which CFM and HiFT took ~1.6x their usual time at an unchanged clock are what this
// tells apart. Zen 4 issues one 512-bit FMA a cycle.
double core_fma_per_cycle();
// n x 16 independent 512-bit FMAs (AVX-512F only; x86-64 builds only); returns a value of
// every chain, so none is optimized away. core_fma_per_cycle and bench peak time it.
#if defined(__x86_64__)
float fma_chains_avx512(long n);
#endif

// Read bandwidth (GB/s) of `bytes` at `buf` (64-byte aligned) with the pool's threads.
// `clock_s` measures time (wall by default; bench kernels can pass its CPU clock).
double stream_read_gbps(ThreadPool& pool, const uint8_t* buf, size_t bytes, int reps,
                        double (*clock_s)() = wall_seconds);
// The same over a freshly allocated and touched buffer of `mb` MiB (freed on return), on
// huge pages where the kernel allows them (the default, like the decode's re-laid-out
// weights) or on plain 4 KB pages (what a malloc'd STREAM-style buffer gets with THP madvise).
double stream_read_gbps(ThreadPool& pool, size_t mb, int reps, bool huge_pages = true);

// Stream reads sampled between the segments of a timed run (every few decode steps), so the
// reference sees the machine in the state the measured work saw. On a shared host the
// bandwidth a process gets can switch between levels within seconds (the 2-vCPU dev VM:
// ~30 and ~60 GB/s), and a reference taken once before or after the run can then be off
// by 2x in either direction. The buffer (huge pages, touched) stays resident from the
// constructor on: benches that report peak RSS subtract bytes() (see peak_rss_without).
class StreamSampler {
 public:
  StreamSampler(ThreadPool& pool, size_t mb);
  // One read of the buffer (the better of the two ways stream_read_gbps reads, each after a
  // warm-up pass) and one core_clock_ghz(); adds its wall time to elapsed_s() and its process
  // CPU time to cpu_s().
  void sample();
  int count() const { return int(gbps_.size()); }
  double mean_gbps() const;  // 0 without samples
  double min_gbps() const;
  double max_gbps() const;
  double last_gbps() const { return gbps_.empty() ? 0 : gbps_.back(); }  // the latest sample's
  double mean_clock_ghz() const;                                         // 0 without samples
  double mean_fma_per_cycle() const;               // core_fma_per_cycle() at the samples; 0 without
  double elapsed_s() const { return elapsed_s_; }  // wall time spent in sample()
  double last_s() const { return last_s_; }        // that of the latest sample()
  double cpu_s() const { return cpu_s_; }          // process CPU time (all threads) in sample()
  size_t bytes() const { return buf_.size(); }

 private:
  ThreadPool& pool_;
  HugeBuffer buf_;
  std::vector<double> gbps_, ghz_, fma_;
  double elapsed_s_ = 0, last_s_ = 0, cpu_s_ = 0;
};

// Peak RSS (MB) of the process without a StreamSampler's buffer: `before_mb` is the peak read
// just before the sampler was made (covers a higher peak during loading), the current peak
// minus the buffer covers the rest of its life (it stays resident throughout).
double peak_rss_without(const StreamSampler& s, double before_mb, double now_mb);

}  // namespace cbx::bench
