// Sizes an Arena before it exists, by the arena's own rules: a model feeds the plan the
// allocations its calls will make (the same dtype + shape or byte count and alignment, in
// the same order, with mark/rewind around transient scopes, and an op's scratch need as
// one transient block), and bytes() is the capacity that makes those calls fit: the high-
// water mark an Arena reaches replaying them, with no per-allocation slack terms.
// Alignments up to 64 are exact (the arena's store is at least 64-byte aligned); a larger
// one is planned at its worst case over a 64-byte aligned store (align - 64 extra bytes).
// alloc / alloc_bytes have Arena's signatures and return a tensor with no data / nullptr,
// so allocation code written as a generic lambda (auto& a) runs once on the plan, to size
// the arena, and then on the arena itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cbx {

class Arena;

// Bytes Arena::alloc takes for a tensor of this dtype and shape (rows of whole blocks).
size_t arena_tensor_bytes(DType dtype, int ndim, const int64_t* shape);

class ArenaPlan {
 public:
  // An allocation of `bytes` at `align` (a power of two <= 4096, as Arena::alloc_bytes).
  void* alloc_bytes(size_t bytes, size_t align = 64, const char* what = "buffer");
  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape, const char* what = "tensor") {
    return alloc(dtype, int(shape.size()), shape.begin(), what);
  }
  Tensor alloc(DType dtype, int ndim, const int64_t* shape, const char* what = "tensor");
  // A transient need at the current offset that is rewound afterwards: an op's scratch
  // (its *_scratch_bytes answer, taken from the arena as 64-byte aligned blocks).
  void scratch(size_t bytes);
  // Mark/rewind as on the Arena, for scoped temporaries.
  size_t mark() const { return used_; }
  void rewind(size_t m) { used_ = m; }

  size_t used() const { return used_; }
  size_t bytes() const { return peak_; }  // the capacity to reserve

 private:
  size_t used_ = 0;
  size_t peak_ = 0;
};

// A stage's arenas from its two plans: `own` holds the persistent buffers (keep) and, when no
// shared work arena is given, the per-call buffers after them (call then was planned on top of
// keep); with a shared one (call planned from empty), that arena grows to the per-call need,
// as much as the largest of the stages sharing it asks. Returns where the per-call buffers go.
Arena* reserve_stage_arenas(Arena& own, Arena* shared, const ArenaPlan& keep, const ArenaPlan& call);

}  // namespace cbx
