// A typed, strided view of at most 4 dimensions over memory someone else owns
// (an arena, a mmapped GGUF file, a std::vector). Shapes are row-major as in NumPy /
// PyTorch: shape[ndim-1] is the innermost, contiguous dimension. Strides are in bytes.
// Quantized tensors keep whole blocks along the innermost dimension; only their rows
// can be strided.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace cbx {

constexpr int kMaxDims = 4;

struct Tensor {
  DType dtype = DType::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {1, 1, 1, 1};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};  // bytes
  void* data = nullptr;
  // The storage the data lies in; every view is checked against it.
  const void* base = nullptr;
  size_t base_bytes = 0;

  int64_t numel() const;
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t rows() const;      // product of all but the last dimension
  int64_t cols() const { return ndim ? shape[ndim - 1] : 1; }
  size_t row_bytes() const;  // bytes of one contiguous innermost row
  size_t nbytes() const;     // bytes of a contiguous tensor
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }
  std::string shape_str() const;  // "[3, 1024]"

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Pointer to row r of the tensor seen as [rows(), cols()] (requires contiguity
  // of all leading dims or ndim <= 2).
  void* row(int64_t r) const;
};

// A contiguous tensor over `data` holding `bytes`; throws if the shape needs more.
Tensor make_tensor(DType dtype, std::initializer_list<int64_t> shape, void* data, size_t bytes);
Tensor make_tensor(DType dtype, int ndim, const int64_t* shape, void* data, size_t bytes);

// A view of `src` with a new shape/strides starting `offset` bytes into src.data.
// Throws unless every byte the view can reach lies inside src's storage.
Tensor make_view(const Tensor& src, int ndim, const int64_t* shape, const int64_t* stride, int64_t offset_bytes);
// Same elements, new shape (src must be contiguous, numel must match).
Tensor reshape(const Tensor& src, std::initializer_list<int64_t> shape);
// Elements [start, start+len) along dimension d.
Tensor slice(const Tensor& src, int d, int64_t start, int64_t len);
// Swap two dimensions (a strided view; not allowed on quantized innermost dims).
Tensor transpose(const Tensor& src, int d0, int d1);

bool same_shape(const Tensor& a, const Tensor& b);

}  // namespace cbx
