// Q4_0 weights re-laid out for the decode dot path ("q4p", planar Q4_0; ours, not a
// GGUF type): the same blocks (32 weights, f16 d, 16 bytes of nibbles with element j in
// the low nibble of byte j and element j + 16 in the high one), but each row stores all
// its nibble bytes first, block after block, then all its scales:
//   uint8 qs[nb][16]; f16 d[nb]        (nb = k / 32), row stride q4p_row_bytes(k)
// So 4 blocks of nibbles are one aligned 64-byte load and 16 scales one 32-byte load,
// where the GGUF layout (18-byte blocks) needs a 128-bit insert per block and a gather
// per 16 scales. Made at load time from GGUF Q4_0 rows (q4p_pack_row); the GGUF file
// and every other path keep the GGUF layout.
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
const DotKernel& q4p_dot_avx512();

}  // namespace cbx
