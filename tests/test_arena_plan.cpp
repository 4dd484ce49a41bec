// ArenaPlan: the capacity it computes for a sequence of allocations (tensors of odd row
// sizes, block-quantized rows, byte requests at alignments up to 4096, marks and rewinds,
// op scratch) is what an Arena replaying the same calls reaches, and one 64-byte step less
// fails with the arena's out-of-memory error instead of writing past the store.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/arena.h"
#include "core/arena_plan.h"
#include "core/error.h"

using namespace cbx;

namespace {

// The same calls on a plan and on an arena: each call site below runs on both.
template <class A>
void replay(A& a) {
  a.alloc(DType::F32, {3, 5});    // 60 bytes: the next one starts at 64
  a.alloc(DType::F16, {7});       // 14 bytes
  a.alloc(DType::Q8_0, {2, 64});  // two rows of two 34-byte blocks
  a.alloc(DType::I32, {1});
  const size_t m = a.mark();
  a.alloc(DType::F32, {100, 3});  // a transient scope larger than what follows it
  a.alloc_bytes(10, 16);
  a.rewind(m);
  a.alloc_bytes(200, 4096);  // worst case padding planned for a big alignment
  a.alloc_bytes(1, 1);
  a.alloc_bytes(5, 8);
}

}  // namespace

TEST(ArenaPlan, TensorBytesMatchArena) {
  const int64_t shape[3] = {2, 3, 64};
  EXPECT_EQ(arena_tensor_bytes(DType::F32, 3, shape), size_t(2 * 3 * 64 * 4));
  EXPECT_EQ(arena_tensor_bytes(DType::Q8_0, 3, shape), size_t(2 * 3 * 2 * 34));
  EXPECT_EQ(arena_tensor_bytes(DType::F32, 0, nullptr), 4u);
  ArenaPlan plan;  // the plan's tensors have the shape and no data
  const Tensor planned = plan.alloc(DType::Q4_0, 3, shape, "planned");
  EXPECT_EQ(planned.data, nullptr);
  EXPECT_EQ(planned.shape[2], 64);
  EXPECT_EQ(plan.alloc_bytes(8, 64, "bytes"), nullptr);
  Arena a(4096);
  Tensor t = a.alloc(DType::Q4_0, 3, shape);
  EXPECT_EQ(a.used(), arena_tensor_bytes(DType::Q4_0, 3, shape));
  (void)t;
}

TEST(ArenaPlan, CapacityIsTheHighWaterMark) {
  ArenaPlan plan;
  replay(plan);
  // A store aligned to 64 only: the 4096-aligned request may need up to 4032 bytes of padding.
  Arena a(plan.bytes(), /*huge_pages=*/false);
  replay(a);
  EXPECT_LE(a.high_water(), a.capacity());
  EXPECT_LE(a.capacity() - a.high_water(), size_t(4096 - 64) + 63);

  // Without big alignments the plan is exact.
  ArenaPlan exact;
  Arena b(1 << 16);
  exact.alloc(DType::F32, {3, 5});
  exact.alloc_bytes(7, 8);
  exact.scratch(1000);
  exact.alloc(DType::F16, {9});
  b.alloc(DType::F32, {3, 5});
  b.alloc_bytes(7, 8);
  const size_t m = b.mark();
  b.alloc_bytes(1000, 64);
  b.rewind(m);
  b.alloc(DType::F16, {9});
  EXPECT_EQ(exact.bytes(), b.high_water());
  EXPECT_EQ(exact.used(), b.used());
}

TEST(ArenaPlan, TooSmallPlanFailsClearly) {
  ArenaPlan plan;
  plan.alloc(DType::F32, {16});
  plan.alloc(DType::F32, {100});
  plan.scratch(512);
  ASSERT_EQ(plan.bytes(), size_t(64 + 448 + 512));
  Arena a(plan.bytes() - 64);  // one 64-byte step short
  a.alloc(DType::F32, {16});
  a.alloc(DType::F32, {100});
  try {
    a.alloc_bytes(512, 64, "op scratch");
    FAIL() << "the arena accepted more than its capacity";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("op scratch"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.used(), size_t(64 + 400));  // the failed request took nothing
  EXPECT_LE(a.high_water(), a.capacity());
}

// reserve_stage_arenas: without a shared arena the stage's own one takes both plans' need (the
// per-call plan was made on top of the persistent one); with one, the own arena takes only the
// persistent buffers and the shared one grows to the largest per-call need, never shrinks.
TEST(ArenaPlan, StageArenasOwnOrShared) {
  ArenaPlan keep;
  keep.alloc(DType::F32, {100});  // 448 bytes
  ArenaPlan on_top = keep;
  on_top.alloc(DType::F32, {1000});  // + 4032
  Arena own;
  EXPECT_EQ(reserve_stage_arenas(own, nullptr, keep, on_top), &own);
  EXPECT_EQ(own.capacity(), size_t(448 + 4032));

  ArenaPlan small, big;
  small.scratch(1024);
  big.scratch(8192);
  Arena own1, own2, shared;
  EXPECT_EQ(reserve_stage_arenas(own1, &shared, keep, big), &shared);
  EXPECT_EQ(own1.capacity(), size_t(448));
  EXPECT_EQ(shared.capacity(), size_t(8192));
  EXPECT_EQ(reserve_stage_arenas(own2, &shared, keep, small), &shared);  // a smaller need keeps it
  EXPECT_EQ(shared.capacity(), size_t(8192));
}
