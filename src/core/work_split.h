// Units [0, n) of one barrier-separated phase of a pool run, shared out so that each thread
// reads one forward stream and a slow thread still gets help. Thread i owns the i-th of nth
// contiguous blocks (boundaries at multiples of `align`) and works through it front to back;
// when its block is done it takes pieces from the back of the other blocks. Unlike
// counter-claimed chunks, the threads' rows do not interleave (each thread's stream stays
// sequential for the prefetchers); unlike fixed halves, a thread the OS or the memory system
// stalls is not left alone with its block (docs/benchmarks.md, "Tried and not kept").
// Every unit is handed out exactly once: a block is a (front, back) pair in one 64-bit word
// changed by compare-exchange. Pieces start at multiples of `align` (the last may end at n).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "core/error.h"

namespace cbx {

class WorkSplit {
 public:
  WorkSplit() = default;
  explicit WorkSplit(int max_threads)
      : blocks_(std::make_unique<Block[]>(size_t(std::max(max_threads, 1)))), cap_(std::max(max_threads, 1)) {}

  // Before the pool run (one thread): n units (< 2^31) for nth threads (<= max_threads).
  void reset(int64_t n, int nth, int64_t align) {
    CBX_ASSERT(n >= 0 && n < (int64_t(1) << 31) && nth >= 1 && nth <= cap_ && align >= 1);
    nth_ = nth;
    align_ = align;
    const int64_t per = ((n + nth - 1) / nth + align - 1) / align * align;
    for (int i = 0; i < nth; ++i)
      blocks_[size_t(i)].fb.store(pack(std::min(n, i * per), std::min(n, (i + 1) * per)), std::memory_order_relaxed);
  }

  // Thread ith of the run: fn(u0, u1) for every piece it takes: its own block in pieces of
  // `chunk` units from the front, then the others' from the back in pieces of `steal` units
  // (both multiples of align).
  template <class F>
  void run(int ith, int64_t chunk, int64_t steal, F&& fn) {
    Block& own = blocks_[size_t(ith)];
    for (uint64_t v = own.fb.load(std::memory_order_relaxed);;) {
      const int64_t f = front(v), b = back(v);
      if (f >= b) break;
      const int64_t e = std::min(b, f + chunk);
      if (own.fb.compare_exchange_weak(v, pack(e, b), std::memory_order_relaxed)) {
        fn(f, e);
        v = own.fb.load(std::memory_order_relaxed);
      }
    }
    for (int k = 1; k < nth_; ++k) {
      Block& o = blocks_[size_t((ith + k) % nth_)];
      for (uint64_t v = o.fb.load(std::memory_order_relaxed);;) {
        const int64_t f = front(v), b = back(v);
        if (f >= b) break;
        const int64_t s = std::max(f, (b - 1) / align_ * align_ - (steal - align_));
        if (o.fb.compare_exchange_weak(v, pack(f, s), std::memory_order_relaxed)) {
          fn(s, b);
          v = o.fb.load(std::memory_order_relaxed);
        }
      }
    }
  }

 private:
  struct alignas(64) Block {
    std::atomic<uint64_t> fb{0};  // front | back << 32
  };
  static uint64_t pack(int64_t f, int64_t b) { return uint64_t(f) | uint64_t(b) << 32; }
  static int64_t front(uint64_t v) { return int64_t(v & 0xffffffffu); }
  static int64_t back(uint64_t v) { return int64_t(v >> 32); }

  std::unique_ptr<Block[]> blocks_;
  int cap_ = 0, nth_ = 1;
  int64_t align_ = 1;
};

}  // namespace cbx
