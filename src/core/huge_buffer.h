// Large read-mostly buffers (KV caches, re-laid-out weights) on transparent huge pages where
// the kernel allows them (THP "always" or "madvise" mode): 2 MB pages cut the TLB misses
// of a decode step that streams a few hundred MB, and the page walks are dearer still under
// a hypervisor (a sequential read streams faster through huge pages). Without THP support this
// is a plain aligned buffer.
// The memory is not zeroed; pages are only backed once touched, but with huge pages a touch
// backs the whole 2 MB around it: a buffer reserved much larger than the part written (a
// head-major KV cache sized for far more keys than a generation uses) costs its full size
// in RSS. Only the whole 2 MB pages inside the requested size are advised, so a buffer
// never holds more than it asked for; under 2 MB nothing is (one slab for many small
// arrays gets the most out of it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cbx {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // huge_pages and bytes >= kHugePage: 2 MB aligned, MADV_HUGEPAGE asked for the whole
  // 2 MB pages inside [0, bytes) (failure to get it is not an error); else 64-byte aligned.
  explicit HugeBuffer(size_t bytes, bool huge_pages = true);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }   // bytes asked for
  bool huge() const { return huge_; }  // whether MADV_HUGEPAGE was accepted

  static constexpr size_t kHugePage = size_t(2) << 20;

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
  bool huge_ = false;
};

// Backs the pages under [p, p + bytes) as writable in one call (Linux 5.14+
// MADV_POPULATE_WRITE; the range is widened to whole 4 KB pages; contents unchanged) instead
// of one page fault per page at first touch. False where the kernel cannot (then nothing
// happened: the pages are backed on first touch as before). Under a hypervisor a fault is
// dear: the Multilingual decode's 4 KB-page KV cache would take ~60 fresh pages a step, so
// models/t3_llama.cpp (back_kv) backs it ahead this way.
bool populate_pages(void* p, size_t bytes);

// A 64-byte aligned piece of `bytes` for one of the many buffers under 2 MB a model makes at
// load (packed weight panels): pieces are cut from shared 32 MB HugeBuffer chunks, so they sit
// on huge pages where a buffer of their own never would; each piece keeps its chunk alive
// and a chunk is freed with its last piece. Pieces over 8 MB get a HugeBuffer of their own.
// Thread-safe. Loading is faster this way (fewer page faults while the panels are written),
// for a few MB of RSS.
std::shared_ptr<uint8_t> huge_piece(size_t bytes);

// A huge_piece and its size: a buffer made once at load that would otherwise get its own 4 KB
// pages (PackedWeight panels, as above; CAMPPlus's folded conv copies; the f32 copies of f16
// conv weights and the packed convs of CFM and HiFT: fewer minor faults and a faster load for
// a few MB of peak RSS). Copies share the piece.
class HugePiece {
 public:
  HugePiece() = default;
  explicit HugePiece(size_t bytes) : p_(huge_piece(bytes)), n_(bytes) {}
  uint8_t* data() const { return p_.get(); }
  size_t size() const { return n_; }  // bytes asked for

 private:
  std::shared_ptr<uint8_t> p_;
  size_t n_ = 0;
};

}  // namespace cbx
