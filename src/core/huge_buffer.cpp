#include "core/huge_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "core/error.h"

namespace cbx {

HugeBuffer::HugeBuffer(size_t bytes, bool huge_pages) : n_(bytes) {
  if (bytes == 0) return;
  const bool big = huge_pages && bytes >= kHugePage;
  const size_t align = big ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  p_ = static_cast<uint8_t*>(std::aligned_alloc(align, rounded));
  CBX_CHECK(p_ != nullptr, "huge buffer: cannot allocate %zu bytes", rounded);
#ifdef MADV_HUGEPAGE
  if (big) huge_ = madvise(p_, bytes / kHugePage * kHugePage, MADV_HUGEPAGE) == 0;
#endif
}

HugeBuffer::~HugeBuffer() { std::free(p_); }

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), huge_(std::exchange(o.huge_, false)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    huge_ = std::exchange(o.huge_, false);
  }
  return *this;
}

bool populate_pages(void* p, size_t bytes) {
  if (bytes == 0) return true;
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) / kPage * kPage;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + kPage - 1) / kPage * kPage;
  return madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE) == 0;
#else
  (void)p;
  return false;
#endif
}

std::shared_ptr<uint8_t> huge_piece(size_t bytes) {
  constexpr size_t kChunk = 16 * HugeBuffer::kHugePage;
  const size_t need = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;  // a piece is never null
  if (need > kChunk / 4) {
    auto own = std::make_shared<HugeBuffer>(need);
    return std::shared_ptr<uint8_t>(own, own->data());
  }
  static std::mutex mu;
  static std::weak_ptr<HugeBuffer> current;  // weak: a chunk dies with its last piece
  static size_t used = 0;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<HugeBuffer> chunk = current.lock();
  if (!chunk || used + need > chunk->size()) {
    chunk = std::make_shared<HugeBuffer>(kChunk);
    current = chunk;
    used = 0;
  }
  uint8_t* p = chunk->data() + used;
  used += need;
  return std::shared_ptr<uint8_t>(chunk, p);
}

}  // namespace cbx
