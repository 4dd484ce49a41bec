#include "core/tensor.h"

#include <cstdint>

#include "core/error.h"

namespace cbx {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::dim(int i) const {
  int j = i < 0 ? ndim + i : i;
  CBX_CHECK(j >= 0 && j < ndim, "tensor: dim %d out of range for %d-D tensor", i, ndim);
  return shape[j];
}

int64_t Tensor::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < ndim; ++i) n *= shape[i];
  return n;
}

size_t Tensor::row_bytes() const { return dtype_row_bytes(dtype, cols()); }

size_t Tensor::nbytes() const { return size_t(rows()) * row_bytes(); }

bool Tensor::is_contiguous() const {
  if (ndim == 0) return true;
  const TypeTraits& tr = type_traits(dtype);
  int64_t expect = tr.is_quantized ? int64_t(row_bytes()) : int64_t(tr.block_bytes);
  int last = ndim - 1;
  if (!tr.is_quantized && shape[last] > 1 && stride[last] != expect) return false;
  if (!tr.is_quantized) expect *= shape[last];
  for (int i = last - 1; i >= 0; --i) {
    if (shape[i] > 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void* Tensor::row(int64_t r) const {
  CBX_CHECK(r >= 0 && r < rows(), "tensor: row %lld out of range (%lld rows)", (long long)r, (long long)rows());
  if (ndim <= 1) return data;
  // Row r of the leading dims, walked with their strides.
  int64_t off = 0, rem = r;
  for (int i = ndim - 2; i >= 0; --i) {
    off += (rem % shape[i]) * stride[i];
    rem /= shape[i];
  }
  return static_cast<uint8_t*>(data) + off;
}

namespace {

void fill_contiguous_strides(Tensor& t) {
  if (t.ndim == 0) return;
  const TypeTraits& tr = type_traits(t.dtype);
  int last = t.ndim - 1;
  t.stride[last] = int64_t(tr.block_bytes);  // per element for plain types
  int64_t s = int64_t(dtype_row_bytes(t.dtype, t.shape[last]));
  for (int i = last - 1; i >= 0; --i) {
    t.stride[i] = s;
    s *= t.shape[i];
  }
}

// Highest byte offset (exclusive) a view can touch, relative to its data pointer, and
// the lowest (<= 0 with negative strides).
void reach(const Tensor& t, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = 0;
  if (t.numel() == 0) return;
  const TypeTraits& tr = type_traits(t.dtype);
  int last = t.ndim - 1;
  int64_t end = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (i == last && tr.is_quantized) continue;
    int64_t span = (t.shape[i] - 1) * t.stride[i];
    if (span < 0)
      *lo += span;
    else
      end += span;
  }
  end += tr.is_quantized ? int64_t(dtype_row_bytes(t.dtype, t.shape[last])) : int64_t(tr.block_bytes);
  *hi = end;
}

void check_shape(DType dtype, int ndim, const int64_t* shape) {
  CBX_CHECK(ndim >= 0 && ndim <= kMaxDims, "tensor: %d dimensions (at most %d)", ndim, kMaxDims);
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    CBX_CHECK(shape[i] >= 0, "tensor: negative dimension %lld", (long long)shape[i]);
    CBX_CHECK(shape[i] == 0 || n <= INT64_MAX / shape[i], "tensor: shape overflows");
    n *= shape[i];
  }
  const TypeTraits& tr = type_traits(dtype);
  if (ndim > 0)
    CBX_CHECK(shape[ndim - 1] % tr.block_size == 0,
              "tensor: innermost dimension %lld is not a multiple of the %s block size %lld",
              (long long)shape[ndim - 1], tr.name, (long long)tr.block_size);
}

}  // namespace

Tensor make_tensor(DType dtype, int ndim, const int64_t* shape, void* data, size_t bytes) {
  check_shape(dtype, ndim, shape);
  Tensor t;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.shape[i] = shape[i];
  fill_contiguous_strides(t);
  size_t need = ndim ? t.nbytes() : type_traits(dtype).block_bytes;
  CBX_CHECK(need <= bytes, "tensor: shape %s of %s needs %zu bytes, buffer has %zu", t.shape_str().c_str(),
            dtype_name(dtype), need, bytes);
  t.data = data;
  t.base = data;
  t.base_bytes = bytes;
  return t;
}

Tensor make_tensor(DType dtype, std::initializer_list<int64_t> shape, void* data, size_t bytes) {
  return make_tensor(dtype, int(shape.size()), shape.begin(), data, bytes);
}

Tensor make_view(const Tensor& src, int ndim, const int64_t* shape, const int64_t* stride, int64_t offset_bytes) {
  check_shape(src.dtype, ndim, shape);
  Tensor v;
  v.dtype = src.dtype;
  v.ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride[i];
  }
  if (ndim > 0 && type_traits(src.dtype).is_quantized) v.stride[ndim - 1] = int64_t(type_traits(src.dtype).block_bytes);
  v.base = src.base;
  v.base_bytes = src.base_bytes;
  int64_t start = (static_cast<const uint8_t*>(src.data) - static_cast<const uint8_t*>(src.base)) + offset_bytes;
  int64_t lo, hi;
  reach(v, &lo, &hi);
  CBX_CHECK(v.numel() == 0 || (start + lo >= 0 && start + hi <= int64_t(src.base_bytes)),
            "tensor: view %s at offset %lld reaches bytes [%lld, %lld) outside its source (%zu bytes)",
            v.shape_str().c_str(), (long long)start, (long long)(start + lo), (long long)(start + hi), src.base_bytes);
  v.data = static_cast<uint8_t*>(src.data) + offset_bytes;
  return v;
}

Tensor reshape(const Tensor& src, std::initializer_list<int64_t> shape) {
  CBX_CHECK(src.is_contiguous(), "reshape: source %s is not contiguous", src.shape_str().c_str());
  Tensor t;
  t.dtype = src.dtype;
  t.ndim = int(shape.size());
  check_shape(src.dtype, t.ndim, shape.begin());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  CBX_CHECK(t.numel() == src.numel(), "reshape: %s -> %s changes the element count", src.shape_str().c_str(),
            t.shape_str().c_str());
  fill_contiguous_strides(t);
  t.data = src.data;
  t.base = src.base;
  t.base_bytes = src.base_bytes;
  return t;
}

Tensor slice(const Tensor& src, int d, int64_t start, int64_t len) {
  int j = d < 0 ? src.ndim + d : d;
  CBX_CHECK(j >= 0 && j < src.ndim, "slice: dim %d out of range for %s", d, src.shape_str().c_str());
  CBX_CHECK(start >= 0 && len >= 0 && start + len <= src.shape[j], "slice: [%lld, %lld) outside dim %d of %s",
            (long long)start, (long long)(start + len), d, src.shape_str().c_str());
  int64_t shape[kMaxDims];
  for (int i = 0; i < src.ndim; ++i) shape[i] = src.shape[i];
  shape[j] = len;
  int64_t off;
  if (j == src.ndim - 1) {
    const TypeTraits& tr = type_traits(src.dtype);
    CBX_CHECK(start % tr.block_size == 0 && len % tr.block_size == 0, "slice: innermost slice not aligned to %s blocks",
              tr.name);
    off = (start / tr.block_size) * int64_t(tr.block_bytes);
  } else {
    off = start * src.stride[j];
  }
  return make_view(src, src.ndim, shape, src.stride, off);
}

Tensor transpose(const Tensor& src, int d0, int d1) {
  CBX_CHECK(d0 >= 0 && d0 < src.ndim && d1 >= 0 && d1 < src.ndim, "transpose: bad dims %d, %d for %s", d0, d1,
            src.shape_str().c_str());
  CBX_CHECK(!type_traits(src.dtype).is_quantized || (d0 != src.ndim - 1 && d1 != src.ndim - 1),
            "transpose: cannot move the innermost dim of a quantized tensor");
  Tensor t = src;
  std::swap(t.shape[d0], t.shape[d1]);
  std::swap(t.stride[d0], t.stride[d1]);
  return t;
}

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

}  // namespace cbx
