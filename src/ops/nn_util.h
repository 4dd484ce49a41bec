// Internal helpers shared by the nn op front-ends (validation and row partitioning).
// Not for model code.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx::nn_detail {

// Work below this many elements runs on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;

inline bool inner_contiguous(const Tensor& t) {
  return t.ndim == 0 || t.shape[t.ndim - 1] <= 1 || t.stride[t.ndim - 1] == int64_t(type_traits(t.dtype).block_bytes);
}

// F32, 1..4 dims, innermost dim contiguous, data present.
inline void check_f32(const char* op, const char* name, const Tensor& t) {
  CBX_CHECK(t.data != nullptr, "%s: %s is empty", op, name);
  CBX_CHECK(t.dtype == DType::F32, "%s: %s must be f32, got %s %s", op, name, dtype_name(t.dtype),
            t.shape_str().c_str());
  CBX_CHECK(t.ndim >= 1 && t.ndim <= kMaxDims, "%s: %s has %d dims", op, name, t.ndim);
  CBX_CHECK(inner_contiguous(t), "%s: %s %s must be contiguous in its last dim", op, name, t.shape_str().c_str());
}

inline void check_same_shape(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  CBX_CHECK(same_shape(a, b), "%s: %s %s and %s %s differ in shape", op, an, a.shape_str().c_str(), bn,
            b.shape_str().c_str());
}

// Pointer to row r (all dims but the last, row-major) without the bounds check of
// Tensor::row (callers validated the shape).
inline float* row_ptr(const Tensor& t, int64_t r) {
  int64_t off = 0;
  for (int i = t.ndim - 2; i >= 0; --i) {
    off += (r % t.shape[i]) * t.stride[i];
    r /= t.shape[i];
  }
  return reinterpret_cast<float*>(static_cast<uint8_t*>(t.data) + off);
}

// Calls fn(row, c0, c1) over rows x cols, split into row pieces across the pool when
// the work is large; long rows are cut into column chunks so one-row tensors parallelise
// too (only for ops whose result is per element: chunkable = true).
template <typename F>
void parallel_rows(ThreadPool& pool, int64_t rows, int64_t cols, bool chunkable, F&& fn) {
  const int64_t total = rows * cols;
  if (total < kParallelMin || pool.size() <= 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r, int64_t(0), cols);
    return;
  }
  int64_t pieces = 1;
  if (chunkable && rows < 4 * pool.size()) pieces = (cols + 8191) / 8192;
  const int64_t piece = (cols + pieces - 1) / pieces;
  const int64_t items = rows * pieces;
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(items, ith, nth, &b, &e);
    for (int64_t it = b; it < e; ++it) {
      int64_t r = it / pieces, p = it % pieces;
      int64_t c0 = p * piece, c1 = c0 + piece < cols ? c0 + piece : cols;
      if (c0 < c1) fn(r, c0, c1);
    }
  });
}

}  // namespace cbx::nn_detail
