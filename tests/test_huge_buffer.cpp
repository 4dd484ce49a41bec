// HugeBuffer: alignment and rounding by size, the memory is usable end to end, moves hand
// the allocation over; on a kernel with THP in "always"/"madvise" mode a touched big buffer
// is (normally) backed by huge pages: reported, not asserted (the kernel may not find any);
// populate_pages backs exactly the pages under a range.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_buffer.h"

using namespace cbx;

namespace {

// AnonHugePages (kB) of the /proc/self/smaps entry that contains p, or -1.
long anon_huge_kb(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = a >= lo && a < hi;
      continue;
    }
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

}  // namespace

TEST(HugeBuffer, AlignmentContentMove) {
  HugeBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);

  HugeBuffer small(1000);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  EXPECT_FALSE(small.huge());
  std::memset(small.data(), 0x5a, 1000);

  const size_t n = 3 * HugeBuffer::kHugePage + 12345;  // not a whole number of pages
  HugeBuffer big(n);
  ASSERT_NE(big.data(), nullptr);
  EXPECT_EQ(big.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % HugeBuffer::kHugePage, 0u);
  for (size_t i = 0; i < n; ++i) big.data()[i] = uint8_t(i * 7);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += big.data()[i] != uint8_t(i * 7);
  EXPECT_EQ(bad, 0u);
  std::printf("huge buffer: madvise %s, AnonHugePages of its mapping %ld kB\n", big.huge() ? "accepted" : "refused",
              anon_huge_kb(big.data()));

  HugeBuffer under(HugeBuffer::kHugePage - 4096);  // no whole huge page inside: none asked for
  EXPECT_FALSE(under.huge());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(under.data()) % 64, 0u);

  HugeBuffer plain(n, false);  // huge pages not asked for
  ASSERT_NE(plain.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plain.data()) % 64, 0u);
  EXPECT_FALSE(plain.huge());
  plain.data()[n - 1] = 1;

  uint8_t* p = big.data();
  HugeBuffer moved(std::move(big));
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(moved.size(), n);
  EXPECT_EQ(big.data(), nullptr);
  EXPECT_EQ(big.size(), 0u);
  small = std::move(moved);
  EXPECT_EQ(small.data(), p);
  EXPECT_EQ(small.data()[n - 1], uint8_t((n - 1) * 7));
}

// huge_piece: 64-byte aligned, non-overlapping pieces cut from shared chunks, usable end to
// end, alive while any holder is; a zero-byte piece is still a valid pointer; a big one gets
// a buffer of its own.
TEST(HugeBuffer, Pieces) {
  std::vector<std::shared_ptr<uint8_t>> ps;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 40; ++i) {
    const size_t n = 1000 + i * 77777;  // up to ~3 MB: several chunks
    ps.push_back(huge_piece(n));
    sizes.push_back(n);
    ASSERT_NE(ps.back(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ps.back().get()) % 64, 0u);
    std::memset(ps.back().get(), int(i), n);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    const uint8_t* p = ps[i].get();
    EXPECT_EQ(p[0], uint8_t(i));
    EXPECT_EQ(p[sizes[i] - 1], uint8_t(i));  // no later piece overlapped it
  }
  std::shared_ptr<uint8_t> zero = huge_piece(0);
  EXPECT_NE(zero, nullptr);
  std::shared_ptr<uint8_t> big = huge_piece(9 * HugeBuffer::kHugePage);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.get()) % HugeBuffer::kHugePage, 0u);
  big.get()[9 * HugeBuffer::kHugePage - 1] = 7;
  // Dropping the holders of the first pieces leaves the later ones intact.
  const uint8_t last = ps.back().get()[0];
  ps.erase(ps.begin(), ps.end() - 1);
  EXPECT_EQ(ps.back().get()[0], last);
}

TEST(HugeBuffer, HugePieceKeepsItsSizeAndData) {
  HugePiece none;
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.size(), 0u);
  std::vector<HugePiece> v;
  for (size_t i = 0; i < 20; ++i) {
    v.emplace_back(4096 * (i + 1));
    std::memset(v.back().data(), int(i + 1), v.back().size());
  }
  for (size_t i = 0; i < v.size(); ++i) {  // vector growth moved the holders, not the bytes
    EXPECT_EQ(v[i].size(), 4096 * (i + 1));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v[i].data()) % 64, 0u);
    EXPECT_EQ(v[i].data()[0], uint8_t(i + 1));
    EXPECT_EQ(v[i].data()[v[i].size() - 1], uint8_t(i + 1));
  }
  HugePiece copy = v[3];  // copies share the piece
  v.clear();
  EXPECT_EQ(copy.data()[0], uint8_t(4));
}

// populate_pages backs exactly the 4 KB pages under the range (widened to whole pages) and
// leaves the contents alone; a kernel without MADV_POPULATE_WRITE (before 5.14) skips.
TEST(HugeBuffer, PopulatePagesBacksExactlyTheRange) {
  constexpr size_t kPage = 4096, kPages = 64;
  void* m = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* p = static_cast<uint8_t*>(m);
  auto resident = [&] {
    std::vector<unsigned char> v(kPages);
    EXPECT_EQ(mincore(p, kPages * kPage, v.data()), 0);
    std::vector<int> r;
    for (size_t i = 0; i < kPages; ++i)
      if (v[i] & 1) r.push_back(int(i));
    return r;
  };
  EXPECT_TRUE(populate_pages(p, 0));
  EXPECT_TRUE(resident().empty());
  p[40 * kPage + 7] = 42;  // touched before: stays as it is
  // Bytes 100 of page 5 .. 10 of page 8: pages 5, 6, 7 and 8.
  if (!populate_pages(p + 5 * kPage + 100, 3 * kPage - 90)) {
    munmap(m, kPages * kPage);
    GTEST_SKIP() << "MADV_POPULATE_WRITE not supported by this kernel";
  }
  EXPECT_EQ(resident(), (std::vector<int>{5, 6, 7, 8, 40}));
  EXPECT_EQ(p[40 * kPage + 7], 42);
  EXPECT_EQ(p[5 * kPage], 0);
  EXPECT_TRUE(populate_pages(p + 6 * kPage, kPage));  // again: no change
  EXPECT_EQ(resident(), (std::vector<int>{5, 6, 7, 8, 40}));
  munmap(m, kPages * kPage);
}
