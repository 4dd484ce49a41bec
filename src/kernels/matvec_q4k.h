// Q4_K weights (core/dtype.h: 256-weight super-blocks, 8 sub-blocks of 32 with 6-bit scales
// and mins) against Q8 activation rows (kernels/matmul.h: 32-element blocks, f32 d, int32
// block sums). Sub-block j of super-block s meets activation block 8s + j, so every
// sub-block's dot is exact in integers:
//   sum_l (d sc_j q_l - dmin m_j) (da a_l) = (d sc_j) da isum_j - (dmin m_j) da asum_j
// with isum_j = sum_l q_l a_l (q unsigned 0..15: vpdpbusd / vpmaddubsw directly) and
// asum_j the activation block sum. The kernels differ only in the float summation order of
// those per-sub-block terms (tests/test_kernels_q4k.cpp bounds it). The GGUF layout is read
// in place: no load-time re-layout. K must be a multiple of 256 (the callers check it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"

namespace cbx {

// DotRowsFn (kernels/matmul.h) for Q4_K weight rows against Q8 activation rows.
void dot_q4_k_generic(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                      int64_t k, float* y, int64_t ldy);
void dot_q4_k_avx2(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                   int64_t k, float* y, int64_t ldy);
void dot_q4_k_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy);

// The 8 scales and mins of a Q4_K scales field as two little-endian 8-byte groups (byte j =
// sub-block j): the bit form of kquant_scales for the SIMD kernels.
inline void q4_k_scale_bytes(const uint8_t* b, uint64_t* sc, uint64_t* mn) {
  uint32_t w0, w1, w2;
  __builtin_memcpy(&w0, b, 4);
  __builtin_memcpy(&w1, b + 4, 4);
  __builtin_memcpy(&w2, b + 8, 4);
  const uint32_t s_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t s_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
  *sc = uint64_t(s_lo) | uint64_t(s_hi) << 32;
  *mn = uint64_t(m_lo) | uint64_t(m_hi) << 32;
}

}  // namespace cbx

namespace cbx {

// "q4kp": Q4_K rows re-laid out at load for the decode (ours, not a GGUF type), made where a
// SIMD kernel for it exists (AVX-512) and K % 512 == 0. Per group of two super-blocks (16
// sub-blocks b = 8 s + j, 512 weights), 296 bytes:
//   sc[16] (uint8, sub-block scales), mn[16] (uint8, mins), d[2], dmin[2] (f16 bits of the two
//   super-blocks), then 4 chunks of 64 quant bytes: chunk c, 4-byte lane b = the nibbles of
//   sub-block b's elements 4c .. 4c+3 (low) and 16+4c .. 16+4c+3 (high): the q4p order
//   (kernels/matvec_q4p.h), so a VNNI dot against Q8Lane activations leaves sub-block b's
//   integer sum in lane b. 4.625 bits a weight (Q4_K: 4.5): the unpacked scales spare the
//   kernel the 6-bit unpacking, the lanes its per-sub-block reductions.
// Rows are q4kp_row_bytes apart (a multiple of 64). Same integer sums and per-sub-block float
// terms as the GGUF-layout dot; only the summation order differs.
constexpr size_t kQ4kpGroupBytes = 296;
inline bool q4kp_shape_ok(int64_t k) { return k > 0 && k % 512 == 0; }
size_t q4kp_row_bytes(int64_t k);
// m GGUF Q4_K rows (src_stride bytes apart) -> m * q4kp_row_bytes(k) bytes.
void q4kp_pack_rows(const void* rows, size_t src_stride, int64_t m, int64_t k, void* dst);
// The q4kp dot for isa (nullptr where none: the GGUF layout is kept), and the scalar
// reference (the GGUF generic dot's arithmetic and order, on the q4kp bytes).
const DotKernel* q4kp_dot(Isa isa);
const DotKernel& q4kp_dot_generic();

}  // namespace cbx
