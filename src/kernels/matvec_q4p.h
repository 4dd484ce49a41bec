// Q4_0 and Q8_0 weights re-laid out for the decode dot path: planar row pairs, "q4p" and
// "q8p" (ours, not GGUF types). The same blocks (32 weights and an f16 d; Q4_0: 16 nibble
// bytes, element j in the low nibble of byte j and element j + 16 in the high one; Q8_0:
// 32 bytes, stored here as unsigned w + 128), qb quant bytes a block (16 / 32), stored by
// row pairs so that a dot over two rows reads one sequential stream:
//   pair p (rows 2p, 2p + 1) = 2 * planar_row_bytes bytes from row 2p's slot on;
//   per full group g of 16 blocks (2 * 16 * (qb + 2) bytes): row 2p's 16 qb quant bytes,
//     row 2p + 1's, then row 2p's 16 f16 scales (32 bytes), row 2p + 1's;
//   after the G = nb / 16 groups (nb = k / 32), the t = nb % 16 remaining blocks: row 2p's
//     t qb quant bytes (block order), row 2p + 1's, row 2p's t scales, row 2p + 1's;
//   zero padding to the pair's end. A matrix with an odd row count ends in a pair whose
//   second row is zeros (planar_matrix_bytes counts it).
// Inside every full group a row's quant bytes are interleaved by block in chunks of 64:
// chunk s, 4-byte lane b = bytes 4s .. 4s+3 of block b (q8p: elements 4s .. 4s+3 of each
// block, 8 chunks; q4p: 4 chunks, low nibbles elements 4s .. 4s+3, high ones 16+4s ..
// 16+4s+3). Against Q8Lane activations (kernels/matmul.h) a VNNI dot then leaves each
// block's integer sum in its own 32-bit lane: no horizontal reduction, 16 scales per
// 32-byte load (the GGUF layouts, 18- and 34-byte blocks, need per-block inserts, a gather
// of scales and a lane reduction per 16 blocks). Pairs, not rows: a two-row pass reading
// two rows' quants and scales from four places a row apart streams from DRAM slower than the
// same work on one sequential stream (the hardware prefetchers follow fewer streams better;
// docs/benchmarks.md). Made at load
// time from GGUF rows (planar_pack_rows); the GGUF file and every other path keep the GGUF
// layout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernels/matmul.h"

namespace cbx {

// Whether t has a planar layout (Q4_0 -> q4p, Q8_0 -> q8p), and its quant bytes a block.
inline bool planar_type(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }
inline int planar_quant_bytes(DType t) { return t == DType::Q8_0 ? 32 : 16; }

// Bytes of one row slot of k weights (k % 32 == 0), a multiple of 64; a pair takes two.
size_t planar_row_bytes(DType t, int64_t k);
// Bytes of m rows of k weights (m rounded up to whole pairs).
size_t planar_matrix_bytes(DType t, int64_t m, int64_t k);
// m GGUF rows of type t and k weights (src_stride bytes apart) -> planar_matrix_bytes bytes.
void planar_pack_rows(DType t, const void* rows, size_t src_stride, int64_t m, int64_t k, void* dst);

// Byte offsets inside a pair of nb-block rows with qb quant bytes a block, for row i (0 or
// 1) of the pair: group g's quants and scales, and the start of the remaining blocks'.
inline size_t planar_group_bytes(int qb) { return size_t(2 * 16 * (qb + 2)); }
inline size_t planar_group_quants(int qb, int64_t g, int i) {
  return size_t(g) * planar_group_bytes(qb) + size_t(i) * 16 * size_t(qb);
}
inline size_t planar_group_scales(int qb, int64_t g, int i) {
  return size_t(g) * planar_group_bytes(qb) + 32 * size_t(qb) + size_t(i) * 32;
}
inline size_t planar_rest_quants(int qb, int64_t nb, int i) {
  return size_t(nb / 16) * planar_group_bytes(qb) + size_t(i) * size_t(qb) * size_t(nb % 16);
}
inline size_t planar_rest_scales(int qb, int64_t nb, int i) {
  return size_t(nb / 16) * planar_group_bytes(qb) + 2 * size_t(qb) * size_t(nb % 16) + size_t(i) * 2 * size_t(nb % 16);
}

// A Q8 activation row of k weights (kernels/matmul.h) -> Q8Lane in place: each full group of
// 16 blocks interleaved (4-byte piece t of block b to chunk t, lane b); d and sum unchanged.
void q8_to_lane_in_place(void* row, int64_t k);

// How the SIMD planar kernels walk rows [m0, m1) of a planar matrix (rows ws bytes apart,
// pairs from even rows): first a prefetch (hint kHint) of the range's first pf bytes, which the
// kernels' in-loop prefetch, pf bytes ahead, does not cover (the fused decode's claimed pieces
// and per-head ranges start cold, so without it their first pf bytes wait on DRAM); then one(m)
// for a lone row (an odd first row, a last row without its partner) and
// two(m) for each whole pair (m even).
template <int kHint, class One, class Two>
inline void planar_walk(const uint8_t* wb, size_t ws, int64_t m0, int64_t m1, int64_t pf, One&& one, Two&& two) {
  const int64_t p0 = m0 & ~int64_t(1);
  const char* first = reinterpret_cast<const char*>(wb + p0 * int64_t(ws));
  const int64_t end = ((m1 + 1) / 2 * 2 - p0) * int64_t(ws);
  for (int64_t l = 0; l < pf && l < end; l += 64) __builtin_prefetch(first + l, 0, kHint);
  int64_t m = m0;
  if (m < m1 && (m & 1)) one(m++);
  for (; m + 2 <= m1; m += 2) two(m);
  if (m < m1) one(m);
}

// Dot kernel for planar weights of type t (DotRowsFn semantics with w at the start of a
// pair, rows w_stride = planar_row_bytes(t, k) apart; m0 and m1 may be odd).
// planar_dot(t, isa) is nullptr where no SIMD kernel exists for isa (callers then keep the
// GGUF layout, whose dot is SIMD there); planar_dot_generic(t) is the reference.
const DotKernel* planar_dot(DType t, Isa isa);
const DotKernel& planar_dot_generic(DType t);
const DotKernel& planar_dot_avx512(DType t);  // prefetching into stream_prefetch_level()
const DotKernel& planar_dot_avx512(DType t, PrefetchLevel level);
const DotKernel& planar_dot_avx2(DType t);  // prefetching into stream_prefetch_level()
const DotKernel& planar_dot_avx2(DType t, PrefetchLevel level);

}  // namespace cbx
