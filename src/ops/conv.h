// Convolutions (PyTorch semantics, zero padding, F32 weights and activations).
//
// Layouts: channels-first like PyTorch without the batch dim; conv1d also takes a leading
// batch dim. Activations may have strided rows (innermost dim contiguous); weights and
// bias must be contiguous. Scratch (padded input, im2col chunks, b-row offsets) comes from
// `scratch` when given (rewound before returning), otherwise from a heap buffer, so pass
// an Arena inside a decode step or a vocoder chunk. Scratch need is bounded: at most
// C_in*(T+pads) floats for stride-1 conv1d and ~4 MiB chunks otherwise, plus, when conv1d
// runs in BF16 GEMM precision (ops/matmul.h: the GemmPrecisionScope models hold; the
// weights being f32, never without one), its packed bf16 operands; conv_transpose1d in BF16
// precision the same way (x and w rounded to bf16, f32 accumulation). conv1d_scratch_bytes
// and conv_transpose1d_scratch_bytes say exactly how much a call takes (for an ArenaPlan).
// conv2d stays f32.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/huge_buffer.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx {

struct Conv1dPacked;

struct Conv1dParams {
  int64_t stride = 1;
  int64_t dilation = 1;
  int64_t pad_left = 0;   // zeros before the input (causal convs: pad_left = d (K-1))
  int64_t pad_right = 0;  // zeros after the input
  int64_t groups = 1;     // C_in and C_out divisible; groups = C_in is depthwise
  // Optional: this conv's weights packed once by conv1d_pack. Used where the bf16 direct
  // conv runs (it then skips packing w and the bias per call); the call must pass the very
  // w and bias it was made from (checked). Ignored on the other paths (f32 precision, im2col).
  const Conv1dPacked* packed = nullptr;
};

// A conv1d's weights in the bf16 direct conv's layout (kernels/matmul.h Bf16Gemm::Conv: wp,
// bias16), made once at load for a conv that runs on every request: the per-call packing
// it saves is a strided pass over w on every request (HiFT has many such convs) and its scratch.
// Empty where that kernel does not exist or would not run the conv (C_out above its limit),
// and with CBX_DEBUG_NO_PREPACK=1.
struct Conv1dPacked {
  HugePiece wp, bias16;
  const float* w = nullptr;  // the weights and bias it was packed from (bias may be null)
  const float* bias = nullptr;
  int64_t cout = 0, cin = 0, k = 0;
  bool empty() const { return w == nullptr; }
};
// w: contiguous f32 [C_out, C_in, K] (one group); bias: [C_out] or empty. The pack points at
// them: keep them alive and unchanged while it is used.
Conv1dPacked conv1d_pack(ThreadPool& pool, const Tensor& w, const Tensor& bias, Isa isa = active_isa());
// A model's packed convs, looked up by their weights: add() each conv that runs per request
// at load, then set Conv1dParams::packed = find(w) (nullptr for a conv never added or not
// packable here, which then packs per call as before).
class Conv1dPacks {
 public:
  void add(ThreadPool& pool, const Tensor& w, const Tensor& bias, Isa isa = active_isa());
  const Conv1dPacked* find(const Tensor& w) const;
  size_t bytes() const;  // held by the packs

 private:
  std::vector<Conv1dPacked> packs_;
};
// floor((T + pad_left + pad_right - dilation (K-1) - 1) / stride) + 1
int64_t conv1d_out_len(int64_t T, int64_t K, const Conv1dParams& p);
// x: [C_in, T] or [B, C_in, T]; w: [C_out, C_in/groups, K]; bias: [C_out] or empty
// -> y: [C_out, T_out] or [B, C_out, T_out].
void conv1d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv1dParams& p,
            Arena* scratch = nullptr, Isa isa = active_isa());
// The HiFT resblock step in one pass: y = residual + conv1d(snake(x, alpha), w, bias), the
// bits of ops/elementwise snake, then conv1d, then add(residual, ...). Only where the bf16
// direct conv runs it (conv1d_snake_fused says when: BF16 precision on this ISA's bf16
// kernels, stride 1, one group, few enough output channels); there the Snake is applied
// while the input is packed and the residual added as the output tiles are stored, which
// saves three passes over [C, T] activations. Elsewhere it refuses with an error: callers
// compose the three ops themselves.
// x: [C_in, T]; alpha: contiguous [C_in]; residual: empty or [C_out, T_out] (y itself, x,
// or apart from y); y: [C_out, T_out], not x. Scratch as conv1d's (conv1d_scratch_bytes).
bool conv1d_snake_fused(int64_t cout, const Conv1dParams& p, Isa isa = active_isa());
void conv1d_snake(ThreadPool& pool, const Tensor& x, const Tensor& alpha, const Tensor& w, const Tensor& bias,
                  const Tensor& residual, Tensor& y, const Conv1dParams& p, Arena* scratch = nullptr,
                  Isa isa = active_isa());
// The scratch bytes one conv1d call takes from its arena, exactly: the high-water mark of its
// 64-byte aligned allocations from a 64-byte aligned start (ArenaPlan::scratch's terms), for
// the path the call takes under this thread's GEMM precision scope on `isa`: f32 padded
// input + row offsets or im2col chunk, the bf16 k-major GEMM's packing on top, or the bf16
// direct conv's packed weights (none with p.packed) and per-thread input chunks.
// cin, cout, t_in (the input length) and K as in conv1d's x and w; p the call's params
// (groups, packed included); n_threads the pool's size. A batched x [B, C_in, T] takes the
// same (each item's scratch is rewound). conv1d_snake takes what conv1d takes for its shapes.
size_t conv1d_scratch_bytes(int64_t cin, int64_t cout, int64_t t_in, int64_t K, const Conv1dParams& p, int n_threads,
                            Isa isa = active_isa());
// The same for the weights w [C_out, C_in/groups, K] a call passes.
size_t conv1d_scratch_bytes(const Tensor& w, int64_t t_in, const Conv1dParams& p, int n_threads,
                            Isa isa = active_isa());
// The larger of the F32 and BF16 answers: for an arena sized before the precision the calls
// will run under is known (a model whose precision can be switched after construction).
size_t conv1d_scratch_bytes_any_precision(int64_t cin, int64_t cout, int64_t t_in, int64_t K, const Conv1dParams& p,
                                          int n_threads, Isa isa = active_isa());

struct ConvTranspose1dPacked;

struct ConvTranspose1dParams {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t dilation = 1;
  // Optional: w transposed once by conv_transpose1d_pack. Used in BF16 precision (it then
  // skips the per-call transpose); the call must pass the very w it was made from (checked).
  const ConvTranspose1dPacked* packed = nullptr;
};

// conv_transpose1d's weights transposed to the [(o, k), c] rows its bf16 path multiplies by,
// made once at load (HiFT's upsampling convs: the per-call transpose is a pass over w with a
// C_out K stride). Empty where no bf16 GEMM exists, and with CBX_DEBUG_NO_PREPACK=1.
struct ConvTranspose1dPacked {
  HugePiece at;              // f32 [C_out K, C_in]
  const float* w = nullptr;  // the weights it was made from
  int64_t cin = 0, cout = 0, k = 0;
  bool empty() const { return w == nullptr; }
};
// w: contiguous f32 [C_in, C_out, K]; keep it alive and unchanged while the pack is used.
ConvTranspose1dPacked conv_transpose1d_pack(ThreadPool& pool, const Tensor& w, Isa isa = active_isa());
// (T - 1) stride - 2 padding + dilation (K - 1) + output_padding + 1
int64_t conv_transpose1d_out_len(int64_t T, int64_t K, const ConvTranspose1dParams& p);
// x: [C_in, T]; w: [C_in, C_out, K] (PyTorch ConvTranspose1d layout, groups = 1);
// bias: [C_out] or empty -> y: [C_out, T_out].
void conv_transpose1d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                      const ConvTranspose1dParams& p, Arena* scratch = nullptr, Isa isa = active_isa());
// The scratch bytes one conv_transpose1d call takes from its arena, exactly (as for
// conv1d_scratch_bytes): its column chunk, and in BF16 precision the transposed weights (none
// with p.packed) and the k-major GEMM's packing. cin, cout, t_in, K as in x and w.
size_t conv_transpose1d_scratch_bytes(int64_t cin, int64_t cout, int64_t t_in, int64_t K,
                                      const ConvTranspose1dParams& p, int n_threads, Isa isa = active_isa());
// The same for the weights w [C_in, C_out, K] a call passes.
size_t conv_transpose1d_scratch_bytes(const Tensor& w, int64_t t_in, const ConvTranspose1dParams& p, int n_threads,
                                      Isa isa = active_isa());

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;  // symmetric zero padding per axis
};
// x: [C_in, H, W]; w: [C_out, C_in, kh, kw]; bias: [C_out] or empty
// -> y: [C_out, H_out, W_out] (contiguous), H_out = (H + 2 pad_h - kh) / stride_h + 1.
void conv2d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
            Arena* scratch = nullptr, Isa isa = active_isa());

}  // namespace cbx
