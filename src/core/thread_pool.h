// One library-owned pool of persistent workers. run(fn) calls fn(ith, nth) on every
// thread (the caller is ith = 0) and returns when all have finished. Workers spin
// briefly between jobs and then sleep, so ~300 small ops per decode step stay cheap.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/work_split.h"

namespace cbx {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  template <typename F>
  void run(F&& f) {
    using Fn = std::remove_reference_t<F>;
    run_impl([](void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); }, &f);
  }
  // Inside run(): all nth threads wait until each has arrived.
  void barrier();
  // A WorkSplit sized for this pool, for ops whose run is one shared-out phase: reset it
  // (n, size(), align) before run(), take pieces inside (core/work_split.h). One op at a time.
  WorkSplit& work_split() { return split_; }

  // [begin, end) share of n items for thread ith of nth (contiguous chunks).
  static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    int64_t chunk = (n + nth - 1) / nth;
    *begin = std::min<int64_t>(n, chunk * ith);
    *end = std::min<int64_t>(n, *begin + chunk);
  }

 private:
  using JobFn = void (*)(void*, int, int);
  void run_impl(JobFn fn, void* ctx);
  void worker_main(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  JobFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  // barrier state
  std::atomic<int> barrier_count_{0};
  std::atomic<uint32_t> barrier_phase_{0};
  WorkSplit split_;
};

}  // namespace cbx
