// Core: dtype traits and conversions, tensor views (bounds checks), arena, thread pool, work split.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/work_split.h"

using namespace cbx;

TEST(DType, GgufTypeIds) {
  EXPECT_EQ(uint32_t(DType::F32), 0u);
  EXPECT_EQ(uint32_t(DType::F16), 1u);
  EXPECT_EQ(uint32_t(DType::Q4_0), 2u);
  EXPECT_EQ(uint32_t(DType::Q8_0), 8u);
  EXPECT_EQ(uint32_t(DType::BF16), 30u);
  EXPECT_EQ(type_traits(DType::Q4_0).block_bytes, 18u);
  EXPECT_EQ(type_traits(DType::Q8_0).block_bytes, 34u);
  EXPECT_THROW(type_traits(DType(77)), Error);
  EXPECT_EQ(dtype_from_name("Q4_0"), DType::Q4_0);
  EXPECT_EQ(dtype_from_name("q5_k"), DType::Q5_K);
  EXPECT_THROW(dtype_from_name("q3_k"), Error);
}

TEST(DType, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), uint16_t(h)) << h;
  }
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(65519.f), 0x7bff);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -25)), 0);              // tie to even -> 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);        // above the tie
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.f, -11)), 0x3c00);  // tie to even
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  float x = 1.0f + std::ldexp(1.f, -8);  // exactly halfway -> even (down)
  EXPECT_EQ(f32_to_bf16(x), 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

// Quantization error bounds. Q8_0: step d = amax/127, |err| <= d/2. Q4_0: step amax/8,
// |err| <= one step (the positive side clamps at +7 steps). Storing d as f16 (relative
// error 2^-11) moves a value q*d by up to |q|*d*2^-11: +127*2^-11 and +8*2^-11 steps.
TEST(DType, QuantRoundTripWithinBounds) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(32 * 64), y(x.size());
  for (auto& v : x) v = nd(rng);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const TypeTraits& tr = type_traits(t);
    std::vector<uint8_t> q(dtype_row_bytes(t, int64_t(x.size())));
    tr.from_float(x.data(), q.data(), int64_t(x.size()));
    tr.to_float(q.data(), y.data(), int64_t(y.size()));
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      float step = t == DType::Q8_0 ? amax / 127.f : amax / 8.f;
      float bound = (t == DType::Q8_0 ? 0.5f + 127.f / 2048 : 1.0f + 8.f / 2048) * step + 1e-6f;
      for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound);
    }
  }
}

TEST(Tensor, ContiguousAndShape) {
  std::vector<float> buf(24);
  Tensor t = make_tensor(DType::F32, {2, 3, 4}, buf.data(), buf.size() * 4);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.stride[0], 48);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 3, 4]");
  EXPECT_THROW(make_tensor(DType::F32, {5, 5}, buf.data(), buf.size() * 4), Error);
  EXPECT_THROW(make_tensor(DType::Q4_0, {2, 31}, buf.data(), 1000), Error);
}

TEST(Tensor, ViewsAreBoundsChecked) {
  std::vector<float> buf(24);
  Tensor t = make_tensor(DType::F32, {6, 4}, buf.data(), buf.size() * 4);
  Tensor s = slice(t, 0, 2, 3);
  EXPECT_EQ(s.ptr<float>(), buf.data() + 8);
  EXPECT_THROW(slice(t, 0, 4, 3), Error);
  Tensor tt = transpose(t, 0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  // A view whose strides reach past the buffer is refused even if numel fits.
  int64_t shape[2] = {2, 4}, stride[2] = {64, 4};
  EXPECT_NO_THROW(make_view(t, 2, shape, stride, 0));
  EXPECT_THROW(make_view(t, 2, shape, stride, 40), Error);
  // Views of views keep the original storage as their bound.
  Tensor inner = slice(s, 1, 1, 2);
  int64_t shape2[1] = {16};
  int64_t stride2[1] = {4};
  EXPECT_THROW(make_view(inner, 1, shape2, stride2, 0), Error);  // 9 + 16 > 24 floats
  EXPECT_THROW(reshape(tt, {24}), Error);
  EXPECT_EQ(reshape(t, {2, 12}).shape[1], 12);
}

TEST(Tensor, QuantizedRows) {
  std::vector<uint8_t> buf(18 * 4);
  Tensor t = make_tensor(DType::Q4_0, {2, 64}, buf.data(), buf.size());
  EXPECT_EQ(t.row_bytes(), 36u);
  EXPECT_EQ(static_cast<uint8_t*>(t.row(1)), buf.data() + 36);
  EXPECT_THROW(slice(t, 1, 0, 16), Error);
  EXPECT_EQ(slice(t, 1, 32, 32).ptr<uint8_t>(), buf.data() + 18);
}

TEST(Arena, ReuseAndOverflow) {
  Arena a(1024);
  Tensor x = a.alloc(DType::F32, {4, 16});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data) % 64, 0u);
  size_t m = a.mark();
  a.alloc(DType::F32, {64});
  a.rewind(m);
  Tensor y = a.alloc(DType::F32, {64});
  EXPECT_EQ(a.used(), 512u);
  EXPECT_THROW(a.alloc(DType::F32, {1000}), Error);
  a.reset();
  Tensor z = a.alloc(DType::F32, {4, 16});
  EXPECT_EQ(z.data, x.data);
  (void)y;
}

// Large arenas sit on a HugeBuffer (2 MB aligned, huge pages where the kernel grants them);
// huge_pages = false keeps 4 KB pages and survives reserve_at_least and moves.
TEST(Arena, HugePageStore) {
  const size_t big = 5 * HugeBuffer::kHugePage + 100;
  const bool granted = HugeBuffer(big).huge();  // what this kernel gives a buffer that size
  Arena a(big);
  EXPECT_EQ(a.huge(), granted);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.alloc_bytes(64)) % HugeBuffer::kHugePage, 0u);
  Tensor t = a.alloc(DType::F32, {1024, 1024});
  t.ptr<float>()[1024 * 1024 - 1] = 1.f;
  Arena moved(std::move(a));
  EXPECT_EQ(moved.huge(), granted);
  EXPECT_EQ(moved.used(), 64u + 4u * 1024 * 1024);
  EXPECT_EQ(a.capacity(), 0u);

  Arena small(3 * HugeBuffer::kHugePage, /*huge_pages=*/false);
  EXPECT_FALSE(small.huge());
  small.reserve_at_least(big);
  EXPECT_FALSE(small.huge());
  EXPECT_GE(small.capacity(), big);
  Arena tiny(4096);  // under one huge page: never advised
  EXPECT_FALSE(tiny.huge());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tiny.alloc_bytes(8)) % 64, 0u);
}

TEST(ThreadPool, RunsEveryThreadAndBarrier) {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<int> hits(size_t(n), 0);
      std::atomic<int> phase1{0};
      bool ok = true;
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        hits[size_t(ith)]++;
        phase1.fetch_add(1);
        pool.barrier();
        if (phase1.load() != n) ok = false;
        pool.barrier();
      });
      EXPECT_TRUE(ok);
      for (int h : hits) EXPECT_EQ(h, 1);
    }
  }
}

TEST(ThreadPool, SplitCoversRange) {
  for (int nth : {1, 2, 3, 7})
    for (int64_t n : {0, 1, 5, 100}) {
      int64_t covered = 0, prev_end = 0;
      for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        ThreadPool::split(n, i, nth, &b, &e);
        EXPECT_EQ(b, prev_end);
        covered += e - b;
        prev_end = e;
      }
      EXPECT_EQ(covered, n);
    }
}

// Every unit of every phase handed out exactly once, pieces starting at multiples of align,
// for any thread count, unit count and chunk sizes; one thread held back at the start of
// some phases, so the others must take units from its block (and do).
TEST(WorkSplit, EveryUnitOnceWithStealing) {
  for (int nth : {1, 2, 3, 4}) {
    ThreadPool pool(nth);
    WorkSplit ws(nth);
    for (int64_t align : {1, 16})
      for (int64_t n : {0, 1, 15, 16, 17, 100, 1024, 3000}) {
        for (int rep = 0; rep < 6; ++rep) {
          const bool stall = rep % 2 == 1 && nth > 1;
          ws.reset(n, nth, align);
          std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
          std::vector<int64_t> by_thread(size_t(nth), 0);
          std::atomic<bool> misaligned{false};
          std::atomic<int> others_done{0};
          pool.run([&](int ith, int) {
            // Stalled: thread 0 starts only when every other thread has finished its run, so the
            // others must have taken its whole block (an order of events, not a sleep).
            if (stall && ith == 0)
              while (others_done.load() < nth - 1) std::this_thread::yield();
            ws.run(ith, align * (1 + rep / 2), align * (1 + rep % 3), [&](int64_t u0, int64_t u1) {
              if (u0 % align != 0 || u0 >= u1 || u1 > n) misaligned = true;
              for (int64_t u = u0; u < u1; ++u) hits[size_t(u)].fetch_add(1);
              by_thread[size_t(ith)] += u1 - u0;
            });
            if (ith != 0) others_done.fetch_add(1);
          });
          EXPECT_FALSE(misaligned.load()) << "nth " << nth << " n " << n << " align " << align;
          for (int64_t u = 0; u < n; ++u)
            ASSERT_EQ(hits[size_t(u)].load(), 1) << "unit " << u << " of " << n << ", " << nth << " threads";
          // The held-back thread's own block went wholly to the others: stealing took it all.
          if (stall) {
            EXPECT_EQ(by_thread[0], 0) << nth << " threads, n " << n;
          }
        }
      }
  }
}
