#include "core/arena.h"

#include <cstdlib>
#include <utility>

#include "core/arena_plan.h"
#include "core/error.h"

namespace cbx {

Arena::~Arena() = default;

Arena::Arena(Arena&& o) noexcept
    : store_(std::move(o.store_)),
      used_(std::exchange(o.used_, 0)),
      high_water_(std::exchange(o.high_water_, 0)),
      huge_pages_(o.huge_pages_) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    store_ = std::move(o.store_);
    used_ = std::exchange(o.used_, 0);
    high_water_ = std::exchange(o.high_water_, 0);
    huge_pages_ = o.huge_pages_;
  }
  return *this;
}

void Arena::reserve(size_t capacity_bytes, bool huge_pages) {
  CBX_CHECK(used_ == 0, "arena: reserve(%zu) while %zu bytes are in use", capacity_bytes, used_);
  if (capacity_bytes == capacity() && huge_pages == huge_pages_) return;
  store_ = HugeBuffer();
  huge_pages_ = huge_pages;
  if (capacity_bytes == 0) return;
  store_ = HugeBuffer((capacity_bytes + 63) & ~size_t(63), huge_pages);
}

void* Arena::alloc_bytes(size_t bytes, size_t align, const char* what) {
  CBX_ASSERT(align && (align & (align - 1)) == 0 && align <= 4096);
  uint8_t* buf = store_.data();
  const size_t capacity = store_.size();
  uintptr_t base = reinterpret_cast<uintptr_t>(buf);
  size_t start = ((base + used_ + align - 1) & ~(uintptr_t(align) - 1)) - base;
  CBX_CHECK(buf && bytes <= capacity && start <= capacity - bytes,
            "arena: out of memory allocating %zu bytes for '%s' (%zu of %zu used)", bytes, what, used_, capacity);
  used_ = start + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return buf + start;
}

Tensor Arena::alloc(DType dtype, int ndim, const int64_t* shape, const char* what) {
  const size_t bytes = arena_tensor_bytes(dtype, ndim, shape);
  void* p = alloc_bytes(bytes, 64, what);
  return make_tensor(dtype, ndim, shape, p, bytes);
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> shape, const char* what) {
  return alloc(dtype, int(shape.size()), shape.begin(), what);
}

}  // namespace cbx
