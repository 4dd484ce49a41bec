// Matrix-multiply kernels: y[n, m] = sum_k x[n, k] * w[m, k] (PyTorch Linear layout).
// One table per ISA; the validating front-end is ops/matmul.h. Two paths:
//   - dot path (few activation rows, decode): activations are converted once into the
//     weight type's dot format (F32, BF16 or our Q8 activation rows) and each output is
//     a row-by-row dot product; threads split the weight rows M.
//   - GEMM path (many activation rows): x and w are packed into micro-panels and a
//     register-tiled micro-kernel computes [nr x mr] output tiles; quantized and half
//     weights are widened while packing, so every weight type runs at F32 (or BF16)
//     GEMM speed.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace cbx {

// Activation formats the dot kernels consume.
enum class ActFormat : int {
  F32 = 0,
  BF16 = 1,
  Q8 = 2,
  // Q8 with qs reordered inside every full group of 16 blocks, per 4 blocks b0..b3:
  // [b0[0:16] b1[0:16] b2[0:16] b3[0:16] b0[16:32] b1[16:32] b2[16:32] b3[16:32]], so one
  // zmm of Q4_0 low (high) nibbles of 4 blocks meets its activations in one load. Blocks
  // after the last full group keep the Q8 order; d and sum are as in Q8.
  Q8Nib = 3,
  // Q8 with qs interleaved inside every full group of 16 blocks as 8 chunks of 64 bytes:
  // chunk t, 4-byte lane b = elements 4t .. 4t+3 of block b, so a VNNI dot of a chunk
  // against matching q4p weight lanes (kernels/matvec_q4p.h) sums each block in its own
  // 32-bit lane. Blocks after the last full group keep the Q8 order; d and sum as in Q8.
  Q8Lane = 4,
};

// Q8 activation row (our own layout, not GGUF): k elements (k % 32 == 0) quantized per
// 32-block exactly like Q8_0 (d = max|x| / 127, q = round-half-even(x / d)) but with d
// kept in f32 and the per-block sum of q precomputed (it turns the unsigned x signed
// VNNI product into a signed one):
//   int8 qs[k]; float d[k / 32]; int32 sum[k / 32]
size_t q8_act_row_bytes(int64_t k);  // multiple of 64
inline const int8_t* q8_act_qs(const void* row) { return static_cast<const int8_t*>(row); }
inline const float* q8_act_d(const void* row, int64_t k) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(row) + k);
}
inline const int32_t* q8_act_sum(const void* row, int64_t k) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(row) + k + k / 8);
}
// Bytes of one converted activation row in format f (multiple of 64).
size_t act_row_bytes(ActFormat f, int64_t k);

// Converts one f32 row of k elements into an activation row (Q8: k % 32 == 0).
using ActConvertFn = void (*)(const float* x, int64_t k, void* dst);

// y[n * ldy + m] = dot(w row m, activation row n) for m in [m0, m1), n in [0, n_rows).
// w points at row 0 (rows w_stride bytes apart); act rows are act_stride bytes apart.
using DotRowsFn = void (*)(const void* w, size_t w_stride, int64_t m0, int64_t m1, const void* act, size_t act_stride,
                           int64_t n_rows, int64_t k, float* y, int64_t ldy);

struct DotKernel {
  ActFormat act;
  ActConvertFn convert;  // f32 row -> act (nullptr for F32: x is used in place)
  DotRowsFn fn;
};

// Packed GEMM. Panels hold k in groups of k_pack consecutive values (1 for f32, 2 for
// bf16 pairs, 32 for AMX tiles); k is padded with zeros to a multiple of k_pack. (The
// vdpbf16ps Bf16Gemm keeps bf16 pairs but pads k to 32 like the AMX one: k_pack 32.)
//   x panel of one n-tile: [kp / k_pack][nr][k_pack]  (kp = k rounded up to k_pack), so
//     the slice from k0 starts k0 * nr elements in
//   w panel of one m-tile: kcp * mr elements (kcp = kc rounded up), laid out as the
//     micro-kernel wants (e.g. [kcp][mr] f32, [kcp / 2][mr][2] bf16)
struct GemmKernel {
  int nr;          // activation rows per micro-tile (broadcast operand)
  int mr;          // weight rows per micro-tile (vector operand)
  int k_pack;      // 1, 2 or 32
  int elem_bytes;  // 4 (f32) or 2 (bf16)
  // Packs rows (<= nr, the rest zero) of x, all k columns, into one x panel.
  void (*pack_x)(const float* x, size_t x_stride, int rows, int64_t k, void* dst);
  // Packs rows (<= mr, the rest zero) of w, columns [k0, k0 + kc), into one w panel.
  // For block types k0 and kc are multiples of the block size (kc may end at k).
  void (*pack_w)(const void* w, size_t w_stride, int rows, int64_t k0, int64_t kc, void* dst);
  // y[i * ldy + j] (= or +=) sum_k xp[k][i] * wp[k][j] for i < nrows, j < mcols; kc is
  // a multiple of k_pack (panels already offset to the slice).
  void (*tile)(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols,
               bool accumulate);
};

// Weight types the kernels handle, as table slots.
enum WeightSlot : int { kWF32 = 0, kWF16, kWBF16, kWQ8_0, kWQ4_0, kWQ4_K, kWeightSlots };
int matmul_weight_slot(DType t);  // -1 when the type is not a matmul weight type

struct MatmulKernels {
  Isa isa;
  ActConvertFn to_q8;    // f32 -> Q8 activation row
  ActConvertFn to_bf16;  // f32 -> bf16 row (round to nearest even)
  DotKernel dot[kWeightSlots];
  GemmKernel gemm[kWeightSlots];  // gemm[kWF32] also serves activations x activations
};

// The table for isa (an ISA the CPU lacks must not be called).
const MatmulKernels& matmul_kernels(Isa isa);

// BF16 GEMM path, used when the caller's GEMM precision is bf16 (ops/matmul.h): x and the
// weights (any weight type, dequantized while packing) are rounded to bf16 (round to
// nearest even) in the panels, products are accumulated in f32. It exists only where it
// is faster than the f32 GEMM: AVX-512 with AMX tiles (matmul_amx_avx512.cpp), or
// vdpbf16ps where it runs at the f32 FMA instruction rate (AMD Zen 4 and later:
// matmul_vdpbf16_avx512.cpp; on Intel cores it runs at half that and is not chosen).
// Panel layouts as GemmKernel; k_pack is 32 for both (k zero padded to 32), the w panel
// of both is [kcp / 2][32][2] bf16 (kernels/bf16_pack_avx512.h).
struct Bf16Gemm {
  const char* name;  // "amx" or "vdpbf16ps"
  GemmKernel gemm[kWeightSlots];
  // Packs columns [0, cols) (cols <= gemm[kWF32].mr, the rest zero) of a k-major f32 B,
  // rows [k0, k0 + kc), into one w panel of gemm[kWF32]: row kk of B starts at
  // b + (b_off ? b_off[kk] : kk * b_rs) floats and its columns are contiguous. For
  // convolutions, C[m, n] = A[m, k] B[k, n] runs as y = x . w^T with x = A (the weights)
  // and w = B^T (the input columns), so the output comes out channels-first.
  void (*pack_bt)(const float* b, const int64_t* b_off, int64_t b_rs, int cols, int64_t k0, int64_t kc, void* dst);
  int64_t kc;  // k block of the GEMM driver with these kernels (a multiple of 32, the packers' limit)

  // Stride-1 conv1d without im2col (ops/conv.cpp): the input is packed once as channel
  // pairs, and every tap k reads its B tiles straight from it at column offset k * dilation,
  // so the packing costs C_in T instead of C_in K T per output-channel tile. ops/conv packs
  // it per thread in chunks of time tiles, each chunk a Conv of its own (time origin at the
  // chunk: pad_left may then be negative, y / res / tout taken from the chunk's start).
  //   xp: [cin_pad / 2][cols][2] bf16, column j = padded input position j (x[:, j - pad_left],
  //       zero outside the input and past the channels); cols >= 32 (last tile run + 1) + (K-1) d
  //   wp: [K][cin_pad / 32][cout_pad][32] bf16, wp[k][b][o][i] = w[o][32 b + i][k] (zero padded)
  //   bias16: [cout_pad][16] f32, row o = bias[o] (or 0) 16 times
  // cin_pad, cout_pad: C_in, C_out rounded up to 32.
  struct Conv {
    const uint16_t* xp;
    int64_t cols;
    const uint16_t* wp;
    const float* bias16;
    float* y;
    int64_t ys;  // y: [cout, tout], rows ys floats apart
    int64_t cout, cin_pad, tout, k, dilation;
    // Optional residual [cout, tout] (rows rs floats apart): y = res + conv, the sum of
    // ops/elementwise add(res, conv) bit for bit. res may be y itself (each output element
    // is read before it is written, by the thread that writes it).
    const float* res = nullptr;
    int64_t rs = 0;
  };
  // Pairs [p0, p1) of xp from x [cin, T] (rows xs floats apart). snake_alpha (nullable,
  // [cin]): each input row goes through the AVX-512 Snake kernel (kernels/nn.h) with its
  // channel's alpha before it is rounded to bf16, the same values ops snake would write.
  void (*conv_pack_x)(const float* x, int64_t xs, int64_t cin, int64_t T, int64_t pad_left, int64_t cols, int64_t p0,
                      int64_t p1, const float* snake_alpha, uint16_t* xp);
  // Block (tap kk, channel block b) of wp from w [cout, cin, K] (contiguous).
  void (*conv_pack_w)(const float* w, int64_t cout, int64_t cin, int64_t K, int64_t cout_pad, int64_t kk, int64_t b,
                      uint16_t* wp);
  // Output tiles [i0, i1) of ceil(tout / 32) x (cout_pad / 32), time-tile major.
  void (*conv_tiles)(const Conv& c, int64_t i0, int64_t i1);
  // Stride-1 single-group conv1d runs conv_tiles (no im2col) up to this C_out, the k-major
  // GEMM above it (ops/conv.cpp; measured per kernel family).
  int64_t direct_conv_max_cout;
};
// The BF16 GEMM that goes with matmul_kernels_avx512(): AMX tiles where usable (CBX_DEBUG_NO_AMX=1
// turns them off), else vdpbf16ps where chosen (CBX_DEBUG_VDPBF16, default on AMD only), else
// nullptr; nullptr for any other table. Call only for an AVX-512 table.
const Bf16Gemm* matmul_bf16_gemm_avx512(const MatmulKernels& table);

// Per-ISA tables (defined in matmul_<isa>.cpp).
const MatmulKernels& matmul_kernels_generic();
const MatmulKernels& matmul_kernels_avx2();
const MatmulKernels& matmul_kernels_avx512();
// The AVX-512 table without AMX tiles (its BF16 GEMM uses vdpbf16ps); the same as
// matmul_kernels_avx512() on CPUs without AMX or with CBX_DEBUG_NO_AMX=1.
const MatmulKernels& matmul_kernels_avx512_no_amx();

}  // namespace cbx
