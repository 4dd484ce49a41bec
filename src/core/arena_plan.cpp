#include "core/arena_plan.h"

#include <algorithm>

#include "core/arena.h"
#include "core/error.h"

namespace cbx {

size_t arena_tensor_bytes(DType dtype, int ndim, const int64_t* shape) {
  if (ndim <= 0) return type_traits(dtype).block_bytes;
  int64_t rows = 1;
  for (int i = 0; i + 1 < ndim; ++i) rows *= shape[i];
  return size_t(rows) * dtype_row_bytes(dtype, shape[ndim - 1]);
}

void* ArenaPlan::alloc_bytes(size_t bytes, size_t align, const char*) {
  CBX_ASSERT(align && (align & (align - 1)) == 0 && align <= 4096);
  const size_t a = std::min<size_t>(align, 64);
  size_t start = (used_ + a - 1) & ~(a - 1);
  if (align > 64) start += align - 64;
  used_ = start + bytes;
  peak_ = std::max(peak_, used_);
  return nullptr;
}

Tensor ArenaPlan::alloc(DType dtype, int ndim, const int64_t* shape, const char*) {
  const size_t bytes = arena_tensor_bytes(dtype, ndim, shape);
  alloc_bytes(bytes);
  return make_tensor(dtype, ndim, shape, nullptr, bytes);
}

void ArenaPlan::scratch(size_t bytes) {
  const size_t m = used_;
  alloc_bytes(bytes);
  used_ = m;
}

Arena* reserve_stage_arenas(Arena& own, Arena* shared, const ArenaPlan& keep, const ArenaPlan& call) {
  if (!shared) {
    own.reserve(call.bytes());
    return &own;
  }
  own.reserve(keep.bytes());
  shared->reserve_at_least(call.bytes());
  return shared;
}

}  // namespace cbx
