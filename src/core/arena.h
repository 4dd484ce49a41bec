// A bump allocator reserved once for the worst case and reset between calls, so that
// nothing is allocated during a decode step or a vocoder chunk. Running out is an
// error that names the request (the reservation was sized wrong), never a realloc.
// The store is a HugeBuffer: 2 MB pages where the kernel allows them, so the first call
// that touches a large arena takes one page fault per 2 MB instead of per 4 KB (Turbo's
// first S3Gen + HiFT call of a process takes some 20x fewer faults).
// An arena whose tensors are reserved far larger than the part a call writes (a cache sized
// for the longest generation) asks for 4 KB pages instead: huge pages would back it whole.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/huge_buffer.h"
#include "core/tensor.h"

namespace cbx {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t capacity_bytes, bool huge_pages = true) { reserve(capacity_bytes, huge_pages); }
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;

  // (Re)allocates the backing store (huge_pages: see above); only allowed while nothing is
  // allocated.
  void reserve(size_t capacity_bytes, bool huge_pages = true);
  // reserve(capacity_bytes) unless the capacity is already at least that (several users
  // sizing one shared arena, each for its own need; only while nothing is allocated).
  void reserve_at_least(size_t capacity_bytes) {
    if (capacity_bytes > capacity()) reserve(capacity_bytes, huge_pages_);
  }
  void* alloc_bytes(size_t bytes, size_t align = 64, const char* what = "buffer");
  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape, const char* what = "tensor");
  Tensor alloc(DType dtype, int ndim, const int64_t* shape, const char* what = "tensor");
  // Everything allocated so far becomes invalid; memory is reused.
  void reset() { used_ = 0; }
  // Mark/rewind for scoped temporaries.
  size_t mark() const { return used_; }
  void rewind(size_t m) { used_ = m; }

  size_t used() const { return used_; }
  size_t capacity() const { return store_.size(); }
  size_t high_water() const { return high_water_; }
  bool huge() const { return store_.huge(); }  // whether the store got MADV_HUGEPAGE

 private:
  HugeBuffer store_;  // capacity() bytes (a multiple of 64)
  size_t used_ = 0;
  size_t high_water_ = 0;
  bool huge_pages_ = true;
};

}  // namespace cbx
