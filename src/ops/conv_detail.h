// What the conv ops' files (conv.cpp, conv_transpose.cpp) share: tile sizes, arena scratch,
// the f32 GEMM job over the nn kernel's GemmTile, the bf16 switch and argument checks.
// Internal to src/ops; see ops/conv.h for the ops themselves.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/nn.h"
#include "ops/conv.h"
#include "ops/nn_util.h"

namespace cbx::conv_detail {

constexpr int64_t kTileM = 48, kTileN = 256;
constexpr int64_t kChunkFloats = int64_t(1) << 20;

// Scratch from the caller's arena (rewound on scope exit) or the heap.
class Scratch {
 public:
  explicit Scratch(Arena* a) : arena_(a), mark_(a ? a->mark() : 0) {}
  ~Scratch() {
    if (arena_) arena_->rewind(mark_);
  }
  template <class T>
  T* get(int64_t n, const char* what) {
    size_t bytes = size_t(std::max<int64_t>(n, 1)) * sizeof(T);
    if (arena_) return static_cast<T*>(arena_->alloc_bytes(bytes, 64, what));
    heap_.emplace_back((bytes + 7) / 8);
    return reinterpret_cast<T*>(heap_.back().data());
  }

 private:
  Arena* arena_;
  size_t mark_;
  std::vector<std::vector<uint64_t>> heap_;
};

struct GemmJob {
  GemmTile t;  // group 0, whole m x n
  int64_t groups = 1;
  int64_t a_gs = 0, b_gs = 0, c_gs = 0;  // per-group offsets in floats
  const float* bias = nullptr;           // per output row over all groups
};

// Threads run_threads uses for `work` multiply-adds: 1 below nn_detail::kParallelMin.
inline int threads_for(const ThreadPool& pool, int64_t work) {
  return work < nn_detail::kParallelMin ? 1 : pool.size();
}

template <class F>
void run_threads(ThreadPool& pool, int64_t work, F&& f) {
  if (threads_for(pool, work) <= 1) {
    f(0, 1);
  } else {
    pool.run(f);
  }
}

inline int64_t round32(int64_t v) { return (v + 31) / 32 * 32; }

// Output positions per im2col chunk of a strided conv1d (rows = C_in K B rows): ~kChunkFloats
// floats, at least 16 columns, at most all of them.
inline int64_t conv1d_chunk_cols(int64_t rows, int64_t t_out) {
  return std::min(std::max<int64_t>(kChunkFloats / rows, 16), t_out);
}
// Input positions per chunk of conv_transpose1d's columns Z (mk = C_out K rows), the same way.
inline int64_t conv_transpose1d_chunk_cols(int64_t mk, int64_t t_in) {
  return std::min(std::max<int64_t>(kChunkFloats / mk, 8), t_in);
}
// Time tiles (32 steps) per packed input chunk of the bf16 direct conv (conv.cpp).
int64_t direct_chunk_tiles(int64_t cin_pad, int64_t halo, int64_t n_tt);

// Every tile sets its C block to the bias (or zero) and then accumulates A B.
void run_job(const NnKernels& k, const GemmJob& j, int ith, int nth);
// bias: empty (nullptr) or a contiguous f32 [cout]; errors name op.
const float* check_bias(const char* op, const Tensor& bias, int64_t cout);
// Row stride of t along dim in floats (a whole, non-negative number of them).
int64_t row_stride_floats(const char* op, const char* name, const Tensor& t, int dim);
// The conv GEMMs of one call run in bf16 (see ops/conv.cpp's header comment).
bool conv_uses_bf16(Isa isa);
// conv1d runs on the bf16 direct conv (Bf16Gemm::Conv): bf16 GEMMs, stride 1, one group and
// few enough output channels.
bool conv1d_runs_direct(int64_t cout, const Conv1dParams& p, Isa isa);
// j's GEMM (every group, bias as the initial value) on the bf16 kernel.
void run_job_bf16(ThreadPool& pool, const GemmJob& j, Arena* arena);
// The AVX-512 bf16 kernels (direct conv, k-major GEMM), or nullptr on other ISAs.
const Bf16Gemm* bf16_kernels();
// CBX_DEBUG_NO_PREPACK=1 (as for ops/matmul.h pack_weight): the conv packs stay empty, every call
// packs its weights itself (A/B, or less memory).
bool prepack_disabled();

}  // namespace cbx::conv_detail
