// Int8 GEMM (GemmPrecision::Int8, ops/matmul.h PackedWeight): y = x . w^T with the weights
// quantized once per output channel and the activations per row, products summed exactly in
// int32.
//
// Quantization (symmetric, both operands): a row r of K values gets d = max|r| / 127 and
// q = round-half-even(r * (127 / max|r|)) clamped to [-127, 127] (d = 0 and q = 0 for an all-zero
// row). The activations go into the panels as u8 = q + 128 (vpdpbusd multiplies unsigned by
// signed bytes); each weight channel keeps corr = 128 * sum_k q_w, so
//   y[n, m] = float(sum_k u8_x[n, k] * q_w[m, k] - corr[m]) * d_x[n] * d_w[m]
// (two f32 products, in that order, on every ISA: the kernels give the same bits).
//
// Panels, kq = K rounded up to 4, k padded with zeros; kp = kq + kInt8Trailer is the panel's
// k extent (the GemmKernel interface: tile() gets kc = kp):
//   w panel of 32 channels: [kq / 4][32][4] int8, then the trailer (16 x 32 bytes):
//     float d_w[32], int32 corr[32] (channels past the tile's: zero)
//   x panel of nr rows:     [kq / 4][nr][4] u8, then the trailer (16 x nr bytes): float d_x[nr]
// Sums stay exact for K < 2^16 (|u8 * q| <= 255 * 127 per product).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "kernels/matmul.h"

namespace cbx {

constexpr int kInt8Mr = 32;       // weight channels per panel
constexpr int kInt8Trailer = 16;  // k columns after the data that hold the scales
constexpr int64_t kInt8MaxK = 65535;

// kp of the panels for K.
inline int64_t int8_panel_k(int64_t k) { return (k + 3) / 4 * 4 + kInt8Trailer; }

// Quantizes channels [0, rows) of w (rows <= 32, each K f32 values, rows ws floats apart) into one
// w panel (kp * 32 bytes, kp = int8_panel_k(k)). Runs once at load; the same on every ISA.
void int8_pack_w(const float* w, int64_t ws, int rows, int64_t k, void* dst);

// The int8 GEMM for isa: a GemmKernel with mr 32, k_pack 1 and elem_bytes 1 whose pack_x quantizes
// rows into an x panel and whose tile takes kc = kp. AVX-512 with VNNI: vpdpbusd, 14 x 32 tiles;
// every other ISA (AVX2 included): the generic kernel. Never null.
const GemmKernel& matmul_int8_gemm(Isa isa);
// "vpdpbusd" or "generic": which kernel matmul_int8_gemm(isa) is.
const char* matmul_int8_kind(Isa isa);

// Per-ISA kernels (matmul_int8_<isa>.cpp); the AVX-512 one is null without AVX-512 VNNI.
const GemmKernel& matmul_int8_gemm_generic();
const GemmKernel* matmul_int8_gemm_avx512();

}  // namespace cbx
