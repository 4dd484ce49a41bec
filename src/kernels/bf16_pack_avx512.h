// bf16 panel packers shared by the AVX-512 bf16 GEMMs (AMX tiles and vdpbf16ps): the w
// panel of 32 weight rows, [kcp / 2][32][2] bf16 with kcp = kc rounded up to 32 and zeros
// past the data, and the stride-1 conv1d input / weight layouts of Bf16Gemm::Conv
// (kernels/matmul.h). Values are rounded to bf16 to nearest even. Only the AVX-512
// translation units include this.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace cbx {

// Widest k block a w panel packer is asked for (the packers keep one such block of 32 rows
// on the stack); a Bf16Gemm's kc must not exceed it.
constexpr int64_t kBf16PackMaxKc = 512;

// Rows (<= 32) of F32, F16, Q8_0 or Q4_0 weights, columns [k0, k0 + kc), widened to f32,
// rounded to bf16 -> the w panel (kc <= kBf16PackMaxKc; block types: k0, kc multiples of 32).
template <DType T>
void pack_w_bf16_widen(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst);
// The same for BF16 weights (copied, no rounding).
void pack_w_bf16_pad32(const void* w, size_t ws, int rows, int64_t k0, int64_t kc, void* dst);

// k-major f32 B, columns [0, cols) (cols <= 32), rows [k0, k0 + kc) -> the w panel: each
// row pair interleaved by column (row b + off[k] or b + k * b_rs).
void pack_bt_bf16(const float* b, const int64_t* off, int64_t b_rs, int cols, int64_t k0, int64_t kc, void* dst);

// Bf16Gemm::Conv packers: channel pairs [p0, p1) of the input (with the optional Snake of
// each row), and block (tap kk, channel block b) of the weights (kernels/matmul.h has the
// layouts).
void conv_pack_x_bf16(const float* x, int64_t xs, int64_t cin, int64_t T, int64_t pl, int64_t cols, int64_t p0,
                      int64_t p1, const float* snake_alpha, uint16_t* xp);
void conv_pack_w_bf16(const float* w, int64_t cout, int64_t cin, int64_t K, int64_t cout_pad, int64_t kk, int64_t b,
                      uint16_t* wp);

}  // namespace cbx
