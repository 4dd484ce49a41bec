#include "core/arena.h"

#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace cbx {

Arena::~Arena() { std::free(buf_); }

Arena::Arena(Arena&& o) noexcept
    : buf_(std::exchange(o.buf_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      used_(std::exchange(o.used_, 0)),
      high_water_(std::exchange(o.high_water_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    std::free(buf_);
    buf_ = std::exchange(o.buf_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
    high_water_ = std::exchange(o.high_water_, 0);
  }
  return *this;
}

void Arena::reserve(size_t capacity_bytes) {
  CBX_CHECK(used_ == 0, "arena: reserve(%zu) while %zu bytes are in use", capacity_bytes, used_);
  if (capacity_bytes == capacity_) return;
  std::free(buf_);
  buf_ = nullptr;
  capacity_ = 0;
  if (capacity_bytes == 0) return;
  size_t rounded = (capacity_bytes + 63) & ~size_t(63);
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  CBX_CHECK(buf_ != nullptr, "arena: cannot allocate %zu bytes", rounded);
  capacity_ = rounded;
}

void* Arena::alloc_bytes(size_t bytes, size_t align, const char* what) {
  CBX_ASSERT(align && (align & (align - 1)) == 0 && align <= 4096);
  uintptr_t base = reinterpret_cast<uintptr_t>(buf_);
  size_t start = ((base + used_ + align - 1) & ~(uintptr_t(align) - 1)) - base;
  CBX_CHECK(buf_ && bytes <= capacity_ && start <= capacity_ - bytes,
            "arena: out of memory allocating %zu bytes for '%s' (%zu of %zu used)", bytes, what,
            used_, capacity_);
  used_ = start + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return buf_ + start;
}

Tensor Arena::alloc(DType dtype, int ndim, const int64_t* shape, const char* what) {
  size_t bytes = type_traits(dtype).block_bytes;
  if (ndim > 0) {
    int64_t rows = 1;
    for (int i = 0; i + 1 < ndim; ++i) rows *= shape[i];
    bytes = size_t(rows) * dtype_row_bytes(dtype, shape[ndim - 1]);
  }
  void* p = alloc_bytes(bytes, 64, what);
  return make_tensor(dtype, ndim, shape, p, bytes);
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> shape, const char* what) {
  return alloc(dtype, int(shape.size()), shape.begin(), what);
}

}  // namespace cbx
