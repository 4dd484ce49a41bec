// Q4_0 weights re-laid out for the decode dot path ("q4p", planar Q4_0; ours, not a
// GGUF type): the same blocks (32 weights, f16 d, 16 bytes of nibbles with element j in
// the low nibble of byte j and element j + 16 in the high one), but each row stores all
// its nibble bytes first, then all its scales:
//   uint8 qs[nb * 16]; f16 d[nb]        (nb = k / 32), row stride q4p_row_bytes(k)
// Inside every full group of 16 blocks (256 nibble bytes) the bytes are interleaved by
// block as 4 chunks of 64: chunk s, 4-byte lane b = bytes 4s .. 4s+3 of block b (so the
// low nibbles of chunk s are elements 4s .. 4s+3 of each block, the high ones elements
// 16+4s .. 16+4s+3). Blocks after the last full group keep their 16 bytes in order.
// Against Q8Lane activations (kernels/matmul.h) a VNNI dot then leaves each block's
// integer sum in its own 32-bit lane: no horizontal reduction, 16 scales per 32-byte load
// (the GGUF layout, 18-byte blocks, needs per-block inserts, a gather of scales and a
// lane reduction per 16 blocks). Made at load time from GGUF Q4_0 rows (q4p_pack_row);
// the GGUF file and every other path keep the GGUF layout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "kernels/matmul.h"

namespace cbx {

// Bytes of one q4p row of k weights (k % 32 == 0), a multiple of 64.
size_t q4p_row_bytes(int64_t k);
// One GGUF Q4_0 row of k weights -> one q4p row (padding bytes zeroed).
void q4p_pack_row(const void* q4_0_row, int64_t k, void* dst);

// Dot kernel for q4p weights (DotRowsFn semantics, rows w_stride = q4p_row_bytes(k)
// apart). q4p_dot(isa) is nullptr where no SIMD kernel exists for isa (callers then keep
// the GGUF layout, whose dot is SIMD there); q4p_dot_generic() is the reference.
const DotKernel* q4p_dot(Isa isa);
const DotKernel& q4p_dot_generic();
const DotKernel& q4p_dot_avx512();  // prefetching into stream_prefetch_level()
const DotKernel& q4p_dot_avx512(PrefetchLevel level);

}  // namespace cbx
