// Q4_0 weights re-laid out for the decode dot path ("q4p", planar Q4_0; ours, not a
// GGUF type): the same blocks (32 weights, f16 d, 16 bytes of nibbles with element j in
// the low nibble of byte j and element j + 16 in the high one), stored by row pairs so
// that a dot over two rows reads one sequential stream:
//   pair p (rows 2p, 2p + 1) = 2 * q4p_row_bytes(k) bytes from row 2p's slot on;
//   per full group g of 16 blocks (576 bytes): row 2p's 256 nibble bytes, row 2p + 1's,
//     then row 2p's 16 f16 scales (32 bytes), row 2p + 1's;
//   after the G = nb / 16 groups (nb = k / 32), the t = nb % 16 remaining blocks: row 2p's
//     16 t nibble bytes (block order), row 2p + 1's, row 2p's t scales, row 2p + 1's;
//   zero padding to the pair's end. A matrix with an odd row count ends in a pair whose
//   second row is zeros (q4p_matrix_bytes counts it).
// Inside every full group the 256 nibble bytes of a row are interleaved by block as 4
// chunks of 64: chunk s, 4-byte lane b = bytes 4s .. 4s+3 of block b (so the low nibbles
// of chunk s are elements 4s .. 4s+3 of each block, the high ones elements 16+4s ..
// 16+4s+3). Against Q8Lane activations (kernels/matmul.h) a VNNI dot then leaves each
// block's integer sum in its own 32-bit lane: no horizontal reduction, 16 scales per
// 32-byte load (the GGUF layout, 18-byte blocks, needs per-block inserts, a gather of
// scales and a lane reduction per 16 blocks). Pairs, not rows: a two-row pass reading two
// rows' nibbles and scales from four places a row apart streams from DRAM ~15-30% slower
// on Zen 5 than the same work on one sequential stream (docs/benchmarks.md). Made at load
// time from GGUF Q4_0 rows (q4p_pack_rows); the GGUF file and every other path keep the
// GGUF layout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "kernels/matmul.h"

namespace cbx {

// Bytes of one q4p row slot of k weights (k % 32 == 0), a multiple of 64; a pair takes two.
size_t q4p_row_bytes(int64_t k);
// Bytes of m rows of k weights in q4p (m rounded up to whole pairs).
size_t q4p_matrix_bytes(int64_t m, int64_t k);
// m GGUF Q4_0 rows of k weights (src_stride bytes apart) -> q4p_matrix_bytes(m, k) bytes.
void q4p_pack_rows(const void* q4_0_rows, size_t src_stride, int64_t m, int64_t k, void* dst);

// Byte offsets inside a pair of nb-block rows, for row i (0 or 1) of the pair: group g's
// nibbles and scales, and the start of the remaining blocks' nibbles and scales.
constexpr size_t kQ4pGroupBytes = 2 * 16 * 18;
inline size_t q4p_group_nibbles(int64_t g, int i) { return size_t(g) * kQ4pGroupBytes + size_t(i) * 256; }
inline size_t q4p_group_scales(int64_t g, int i) { return size_t(g) * kQ4pGroupBytes + 512 + size_t(i) * 32; }
inline size_t q4p_rest_nibbles(int64_t nb, int i) {
  return size_t(nb / 16) * kQ4pGroupBytes + size_t(i) * 16 * size_t(nb % 16);
}
inline size_t q4p_rest_scales(int64_t nb, int i) {
  return size_t(nb / 16) * kQ4pGroupBytes + 32 * size_t(nb % 16) + size_t(i) * 2 * size_t(nb % 16);
}

// Dot kernel for q4p weights (DotRowsFn semantics with w at the start of a pair, rows
// w_stride = q4p_row_bytes(k) apart; m0 and m1 may be odd). q4p_dot(isa) is nullptr where
// no SIMD kernel exists for isa (callers then keep the GGUF layout, whose dot is SIMD
// there); q4p_dot_generic() is the reference.
const DotKernel* q4p_dot(Isa isa);
const DotKernel& q4p_dot_generic();
const DotKernel& q4p_dot_avx512();  // prefetching into stream_prefetch_level()
const DotKernel& q4p_dot_avx512(PrefetchLevel level);

}  // namespace cbx
