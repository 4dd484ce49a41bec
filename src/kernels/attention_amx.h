// Fused bidirectional attention of one head on AMX-BF16 tiles (Sapphire Rapids and later),
// for the BF16 GEMM precision (ops/attention_bf16.h is the front end):
//
//   out[i, :] = sum_j softmax_j(scale q[i, :] . k[j, :] + bias[i, j]) v[j, :]      i < Tq, j < Tk
//   (bias optional, f32, AttnAmxHead::bias)
//
// Per block of 32 queries: q rounded to bf16, S = q k^T on tiles (f32) for all keys into a
// per-thread buffer (32 x Tk f32 stays in L2), then per row the exact max, p = exp(scale
// (s - max)) with an AVX-512 polynomial, the sum in f32 and p rounded to bf16 in place, then
// O = P v on tiles and out = O / sum. Because the whole score row block is in cache no online
// rescaling is needed; the score matrix never goes to memory. A thread runs a range of blocks
// as a pipeline: the tile multiplies of the next block's S are issued between the softmax
// rows of the current one (two score buffers), so the AMX unit works while AVX-512 does exp.
//
// Operand layouts (bf16 as uint16, round to nearest even; zero past Tk):
//   kp: [ceil(Tk / 16)][D / 2][16][2]   kp[t][p][j][e] = k[16 t + j][2 p + e]
//       (one B tile of S per 16 keys and 32 dims: 16 dim pairs x 16 keys)
//   vp: [ceil(Tk / 32)][D / 16][16][16][2]   vp[c][t][r][j][e] = v[32 c + 2 r + e][16 t + j]
//       (one B tile of O per 32 keys and 16 dims: 16 key pairs x 16 dims)
// D must be a multiple of 32, at most kAttnAmxMaxHeadDim.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cbx {

constexpr int64_t kAttnAmxQueryBlock = 32;  // queries per block
constexpr int64_t kAttnAmxMaxHeadDim = 128;

struct AttnAmxHead {
  const float* q = nullptr;  // [Tq, D], rows q_rs floats apart
  int64_t q_rs = 0;
  float* o = nullptr;  // [Tq, D], rows o_rs floats apart
  int64_t o_rs = 0;
  const uint16_t* kp = nullptr;
  const uint16_t* vp = nullptr;
  int64_t Tq = 0, Tk = 0, D = 0;
  float scale = 1.f;
  // Optional additive score bias (e.g. a relative-position term): query i's scores become
  // scale q[i] . k[j] + bias[i bias_rs + j], added in f32 before the softmax. nullptr: none.
  const float* bias = nullptr;
  int64_t bias_rs = 0;
  // Optional relative-position term computed in the kernel (vdpbf16ps kernel only, Tq == Tk):
  // query i's scores become scale q[i] . k[j] + bd[i, j] with
  //   bd[i, j] = qv[i] . p[Tk - 1 - i + j]   (bf16 products, f32 sums over the dim pairs in
  // order, as a bf16 GEMM tile computes qv p^T), i.e. the rel_shift of qv p^T without the
  // [Tq, 2 Tk - 1] matrix. relp: p pair-major (attention_bf16_pack_relpos), relp_rs pairs
  // per dim pair; qv: [Tq, D] f32, rows qv_rs floats apart. nullptr: none.
  const uint32_t* relp = nullptr;
  int64_t relp_rs = 0;
  const float* qv = nullptr;
  int64_t qv_rs = 0;
};

struct AttentionAmxKernels {
  // k / v: [Tk, D] f32, rows k_rs / v_rs floats apart -> kp / vp (attention_amx_kp_elems /
  // attention_amx_vp_elems uint16 each, padding included).
  void (*pack_k)(const float* k, int64_t k_rs, int64_t Tk, int64_t D, uint16_t* kp);
  void (*pack_v)(const float* v, int64_t v_rs, int64_t Tk, int64_t D, uint16_t* vp);
  // Blocks [i0, i1) of heads[0 .. n_heads) x nqb blocks of 32 queries: block i is rows
  // [32 (i % nqb), min(32 (i % nqb) + 32, Tq)) of heads[i / nqb]. All heads share Tq, Tk, D
  // and scale. ws: attention_amx_ws_bytes(Tk, D) bytes, 64-byte aligned, private to the thread.
  void (*run)(const AttnAmxHead* heads, int64_t nqb, int64_t i0, int64_t i1, void* ws);
  // Position rows p [P, D] f32 (rows p_rs floats apart) -> relp [D / 2][rows] bf16 pairs
  // (round to nearest even; element 2 d in the low half), zero in rows [P, rows). nullptr
  // where run does not take AttnAmxHead::relp (the AMX kernel).
  void (*pack_relpos)(const float* p, int64_t p_rs, int64_t P, int64_t D, int64_t rows, uint32_t* relp);
};

// relp rows for Tk keys: the 2 Tk - 1 positions, padded so that 64-key windows never read
// past them.
inline int64_t attention_relpos_rows(int64_t Tk) { return 2 * Tk - 1 + 64; }

// Sizes (inline: callable without AVX-512). The score rows of the workspace are padded by 16
// floats so that 16 rows never share one L1 set (Tk a multiple of 1024).
inline int64_t attention_amx_score_stride(int64_t Tk) { return (Tk + 31) / 32 * 32 + 16; }
inline size_t attention_amx_kp_elems(int64_t Tk, int64_t D) { return size_t((Tk + 15) / 16 * 16 * D); }
inline size_t attention_amx_vp_elems(int64_t Tk, int64_t D) { return size_t((Tk + 31) / 32 * 32 * D); }
inline size_t attention_amx_ws_bytes(int64_t Tk, int64_t D) {
  // two scores / probabilities buffers [32][stride] f32, q [32][D] bf16, one output block [32][32] f32
  return size_t(2 * kAttnAmxQueryBlock * attention_amx_score_stride(Tk) * 4 + kAttnAmxQueryBlock * D * 2 +
                kAttnAmxQueryBlock * 32 * 4 + 3 * 64);
}

// The kernels, or nullptr when AMX tiles are not usable (no AMX-BF16, the OS does not grant
// the tile state, or CBX_DEBUG_NO_AMX=1). Call only when the AVX-512 ISA is active.
const AttentionAmxKernels* attention_amx_kernels();
// The same operands and numerics on vdpbf16ps (attention_vdpbf16_avx512.cpp), or nullptr
// where the vdpbf16ps bf16 GEMM is not chosen (kernels/matmul.h, CBX_DEBUG_VDPBF16). Call only
// when the AVX-512 ISA is active.
const AttentionAmxKernels* attention_vdpbf16_kernels();

}  // namespace cbx
