#include "core/thread_pool.h"

#include "core/error.h"

namespace cbx {
namespace {

// One spin-wait iteration's hint to the core (a sibling hyper-thread gets the pipeline).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

// Spin this many pause iterations (~tens of microseconds) before sleeping on the
// atomic: decode steps issue ops back to back, so a worker is usually re-armed soon.
constexpr int kSpinIters = 1 << 14;

template <typename Pred>
void spin_then_wait(const std::atomic<uint32_t>& word, uint32_t old, Pred done) {
  for (int i = 0; i < kSpinIters; ++i) {
    if (done()) return;
    cpu_relax();
  }
  while (!done()) word.wait(old, std::memory_order_acquire);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads), split_(n_threads_) {
  CBX_CHECK(n_threads <= 1024, "thread pool: %d threads requested (at most 1024)", n_threads);
  workers_.reserve(size_t(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_impl(JobFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  job_fn_ = fn;
  job_ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(ctx, 0, n_threads_);
  // Wait for the workers; pending_ is an int, waited on through its own futex.
  for (int i = 0; i < kSpinIters; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    cpu_relax();
  }
  int p;
  while ((p = pending_.load(std::memory_order_acquire)) != 0) pending_.wait(p, std::memory_order_acquire);
}

void ThreadPool::worker_main(int ith) {
  // Generation 0 is the one the pool was built with; a run may start before this
  // thread does, so never read the starting value here.
  uint32_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, seen, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    job_fn_(job_ctx_, ith, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_acq_rel);
    barrier_phase_.notify_all();
    return;
  }
  spin_then_wait(barrier_phase_, phase, [&] { return barrier_phase_.load(std::memory_order_acquire) != phase; });
}

}  // namespace cbx
