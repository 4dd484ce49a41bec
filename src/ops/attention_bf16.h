// Fused bidirectional attention in bf16 on AMX tiles, or on vdpbf16ps where the bf16 GEMM
// runs on it (kernels/attention_amx.h): one pass per block of 32 queries, the score matrix
// never leaves the thread's cache.
//
//   out[b, h, i, :] = sum_j softmax_j(scale q[b, h, i, :] . k[b, h, j, :] (+ bias[.., i, j])) v[b, h, j, :]
//
// q, out: F32 [B, H, Tq, D] (or [H, Tq, D]); k, v: F32 [B, H, Tk, D] (or [H, Tk, D]). Any
// strides (e.g. heads of a [B, T, 3 H D] projection buffer), innermost dim contiguous.
// No mask: every query sees keys [0, Tk) (pass a shorter k / v for a length mask); an
// optional additive bias (second overload).
// D % 32 == 0, D <= 128; Tk >= 1.
//
// Numerics (the BF16 GEMM precision of ops/matmul.h): q, k, v and the probabilities are
// rounded to bf16 (round to nearest even, relative 2^-9), both products accumulate in f32;
// the row max is exact, exp uses a cubic for 2^f (relative error <= 7.5e-5, far below the
// bf16 rounding of p), the sum and 1 / sum stay f32. Same rounding points as running q k^T
// and P v through gemm_f32 at GemmPrecision::BF16 with an f32 softmax between.
//
// Work: K and V of each (b, h) are packed to bf16 tile layouts once per call, then blocks of
// 32 queries are split over the pool. Scratch comes from `scratch` (rewound on return):
// attention_bf16_scratch_bytes for the largest call; nothing is allocated.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"

namespace cbx {

// Which kernel a model's bidirectional attention (e.g. the CFM transformer's or the flow
// encoder's conformer attention) runs, from what it computes: its GEMM precision and head dim.
//   F32:        the f32 attention path (ops/attention, or gemm_f32 at `prec` and a softmax);
//   Bf16:       attention_bf16 below (AMX tiles or vdpbf16ps): at the BF16 precision where
//               attention_bf16_available(head_dim);
//   Bf16Relpos: attention_bf16_relpos: as Bf16, when the caller has a relative-position term
//               (relpos) and attention_bf16_relpos_available(head_dim).
// Models branch on this answer instead of on the ISA; the scratch they reserve follows it.
enum class AttentionKernel : int { F32 = 0, Bf16 = 1, Bf16Relpos = 2 };
AttentionKernel attention_kernel(GemmPrecision prec, int64_t head_dim, bool relpos = false);
const char* attention_kernel_name(AttentionKernel k);  // "f32", "bf16", "bf16_relpos"

// Whether attention_bf16 runs here for head dim D: the AVX-512 ISA is active (CBX_DEBUG_FORCE_ISA),
// the CPU and OS give AMX-BF16 tiles (CBX_DEBUG_NO_AMX unset) or the vdpbf16ps bf16 GEMM is chosen
// (CBX_DEBUG_VDPBF16; AMD by default), and D is supported.
bool attention_bf16_available(int64_t head_dim);

// Scratch bytes for B x H heads of Tk keys with head dim D on n_threads threads.
size_t attention_bf16_scratch_bytes(int64_t B, int64_t H, int64_t Tk, int64_t D, int n_threads);

// Throws cbx::Error when unavailable, on bad shapes, or when scratch is too small.
void attention_bf16(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale,
                    Arena& scratch);

// The same with an additive f32 score bias, softmax_j(scale q[i] . k[j] + bias[i, j]) (e.g. the
// relative-position term of a conformer): bias F32 [Tq, Tk] for every head, or [H, Tq, Tk] /
// [B, H, Tq, Tk] per head; any row / head strides (a rel-shift view of a wider buffer works),
// innermost dim contiguous, finite values. The bias is added in f32 (one fma with the scale),
// so it keeps its precision; only q k^T and P v are bf16 products.
void attention_bf16(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                    Tensor& out, float scale, Arena& scratch);

// The same with the relative-position term of a conformer (Transformer-XL / ESPnet rel_shift)
// computed inside the kernel instead of passed as a [Tq, 2 Tk - 1] bias:
//   softmax_j(scale q[i] . k[j] + qv[i] . p[Tk - 1 - i + j])
// qv: like q (e.g. (q + pos_bias_v) / sqrt(D)); p: F32 [B, H, 2 Tk - 1, D] (or [H, ...]), the
// projected positions of each head; Tq == Tk. The bd term has the bits a BF16 gemm_f32 of
// qv p^T gives (qv and p rounded to bf16, the dim pairs summed in order), added with the same
// fma as the bias overload, so it matches that overload on the rel-shift view of that GEMM bit
// for bit, without writing the 4 Tk^2 bytes per head. Only where
// attention_bf16_relpos_available (the vdpbf16ps kernel; not the AMX one); scratch:
// attention_bf16_relpos_scratch_bytes.
bool attention_bf16_relpos_available(int64_t head_dim);
size_t attention_bf16_relpos_scratch_bytes(int64_t B, int64_t H, int64_t Tk, int64_t D, int n_threads);
void attention_bf16_relpos(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qv,
                           const Tensor& p, Tensor& out, float scale, Arena& scratch);

}  // namespace cbx
