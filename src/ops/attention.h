// Fused scaled dot-product attention (flash style: online softmax over tiles of 64 keys,
// 4 queries at a time; the Tq x Tk score matrix is never materialised).
//
//   out[h, i, :] = sum_j softmax_j(scale * q[h, i, :] . k[h / (H / H_kv), j, :] + mask[i, j]) v[.., j, :]
//
// Layouts (all tensors may be strided views; only the innermost dim must be contiguous):
//   q:    F32 [H, Tq, D]
//   k, v: [H_kv, Tk, D], both F32 or both F16; H % H_kv == 0 (GQA / MQA). Because any
//         head/row strides are accepted, k/v can be a [.., 0:Tk, ..] slice of a larger
//         preallocated KV cache, and [T, H*D] projections can be passed as
//         transpose(reshape(x, {T, H, D}), 0, 1) without copying.
//   mask: empty, or F32 [Tq, Tk] (broadcast over heads) or [H, Tq, Tk] (per head, e.g.
//         a relative-position bias already divided as the caller needs). Added after scaling.
//   out:  F32 [H, Tq, D] (may be a transposed view of a [Tq, H*D] buffer).
// causal: query i sees keys j <= q_offset + i (q_offset = number of cached keys before
// the first query in a decode step). A query row that sees no key, or only -inf
// scores, gets zeros (PyTorch would give NaN). D <= 512.
// Scratch: with 8+ queries the SIMD kernels work from an F32 copy of K transposed,
// H_kv * D * round_up(Tk, 64) floats, taken from `scratch` (rewound) or the heap.
#pragma once
#include <cstdint>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx {

struct AttentionParams {
  float scale = 0.f;  // 0 means 1 / sqrt(D)
  bool causal = false;
  int64_t q_offset = 0;
};

void attention(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, Tensor& out,
               const AttentionParams& p, Arena* scratch = nullptr, Isa isa = active_isa());
// The most arena scratch attention() takes for Hkv key/value heads of Tk keys of width D
// (f32 K^T copies, rows padded to whole key tiles; 0 when it needs none: few queries or the
// generic kernel), one 64-byte aligned block.
size_t attention_scratch_bytes(int64_t Hkv, int64_t Tk, int64_t D);

// For a caller already inside ThreadPool::run (decode steps that fuse a whole layer into
// one run): the same validation and result as attention(), for the heads [h0, h1) taken
// round robin by thread ith of nth (h1 < 0: all heads). No scratch, no barrier, no pool:
// only for Tq < kAttnPartMaxQueries (the multi-query path needs a shared K^T copy).
constexpr int64_t kAttnPartMaxQueries = 8;
void attention_part(int ith, int nth, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                    Tensor& out, const AttentionParams& p, int64_t h0 = 0, int64_t h1 = -1, Isa isa = active_isa());

// attention_part for one query (Tq = 1) whose keys are in two segments: the first k0 / v0
// ([H_kv, T0, D], e.g. a voice prefix shared by several sequences), then k / v ([H_kv, T1, D],
// the sequence's own keys); causal positions count over both (key j of k is position T0 + j).
// The result has the bits attention_part gives for one cache holding both segments in order.
void attention_part_split(int ith, int nth, const Tensor& q, const Tensor& k0, const Tensor& v0, const Tensor& k,
                          const Tensor& v, Tensor& out, const AttentionParams& p, int64_t h0 = 0, int64_t h1 = -1,
                          Isa isa = active_isa());

// attention_part_split for several one-query sequences sharing the first segment k0 / v0:
// query r has its own q, second segment k / v (its T1 may differ from the others'), out and
// q_offset (p.q_offset is not used); p.scale / p.causal apply to all. Every query's output
// has the bits attention_part_split gives it alone; the shared rows are read once per group
// of queries (a batched decode's voice prefix).
struct AttnSplitQuery {
  const Tensor* q = nullptr;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  Tensor* out = nullptr;
  int64_t q_offset = 0;
};
constexpr int kAttnSplitMaxQueries = 64;
void attention_part_split_multi(int ith, int nth, const Tensor& k0, const Tensor& v0, const AttnSplitQuery* qs, int nq,
                                const AttentionParams& p, int64_t h0 = 0, int64_t h1 = -1, Isa isa = active_isa());

}  // namespace cbx
