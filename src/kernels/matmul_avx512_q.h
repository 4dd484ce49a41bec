// Helpers shared by the AVX-512 matmul translation units (matmul_avx512.cpp,
// matmul_q_avx512.cpp, matmul_amx_avx512.cpp, matmul_vdpbf16_avx512.cpp); nothing else
// includes this.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/matmul.h"

namespace cbx {

// f32 row -> Q8 / Q8Nib activation row (layouts in kernels/matmul.h).
void to_q8_avx512(const float* x, int64_t k, void* dst);
void to_q8_nib_avx512(const float* x, int64_t k, void* dst);
// DotRowsFn for Q8_0 weights against Q8 rows and Q4_0 weights against Q8Nib rows.
void dot_q8_0_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy);
void dot_q4_0_avx512(const void* w, size_t ws, int64_t m0, int64_t m1, const void* act, size_t as, int64_t n_rows,
                     int64_t k, float* y, int64_t ldy);
// Dequantizes elements [k0, k0 + len) of one Q8_0 / Q4_0 / Q4_K row (k0, len multiples of the block size).
void dequant_row_avx512(DType t, const uint8_t* row, int64_t k0, int64_t len, float* out);

// bf16 weight rows (rows <= 32) -> pairs [pad_pairs][32][2] for columns [k0, k0 + kc);
// pairs past the data are zero (matmul_avx512.cpp; the AMX kernels share it).
void pack_w_bf16_pairs(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst, int64_t pad_pairs);

// AMX-BF16 GEMM for BF16 weights (matmul_amx_avx512.cpp): usable when the CPU has the
// tiles, the OS enables them and CBX_DEBUG_NO_AMX is unset.
bool amx_bf16_usable();
GemmKernel amx_bf16_gemm_kernel();

// The vdpbf16ps GEMM of BF16 weights (matmul_avx512.cpp): 14 x 32 tiles, x panel
// [kp / 2][14][2] bf16, w panel [kcp / 2][32][2] bf16, k padded to an even count.
GemmKernel vdp_bf16_pairs_kernel();
// The bf16 GEMM for every weight type on vdpbf16ps (matmul_vdpbf16_avx512.cpp), or nullptr
// where it is not chosen: on by default only where vdpbf16ps runs at twice the f32 FMA
// rate (AMD Zen 4 and later); CBX_DEBUG_VDPBF16=1 forces it on (any AVX-512-BF16 CPU, for tests),
// CBX_DEBUG_VDPBF16=0 off.
const Bf16Gemm* vdp_bf16_gemm();

}  // namespace cbx
