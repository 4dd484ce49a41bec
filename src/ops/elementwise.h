// Elementwise ops, activations and data movement (get_rows, concat).
//
// Layouts: x, y are F32 tensors of up to 4 dims; rows (all dims but the last) may be
// strided, the innermost dim must be contiguous. y must have x's shape and may be x
// itself (in place). Large tensors are split over the pool's threads; small ones run
// on the calling thread. Every op checks shapes/dtypes and throws cbx::Error naming
// the op and the shapes. `isa` selects the kernel table (tests force Isa::Generic).
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx {

// ---- activations: y = f(x) ----
// (tanh_op/exp_op/sin_op/abs_op: plain names would hide ::tanh etc. inside namespace cbx.)
void relu(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void leaky_relu(ThreadPool& pool, const Tensor& x, Tensor& y, float slope, Isa isa = active_isa());
void elu(ThreadPool& pool, const Tensor& x, Tensor& y, float alpha = 1.f, Isa isa = active_isa());
// Exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (nn.GELU()).
void gelu(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
// Tanh approximation ("gelu_new", nn.GELU(approximate="tanh")).
void gelu_tanh(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void silu(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void mish(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void tanh_op(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void sigmoid(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
// log(1 + e^x); x itself above 20 (PyTorch's default threshold, beta 1).
void softplus(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void exp_op(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void sin_op(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void scale(ThreadPool& pool, const Tensor& x, Tensor& y, float s, Isa isa = active_isa());
// y = a * x + b (one scalar pair for the whole tensor).
void affine(ThreadPool& pool, const Tensor& x, Tensor& y, float a, float b, Isa isa = active_isa());
// min(max(x, lo), hi) (torch.clamp; HiFT's output clamp and magnitude clip).
void clamp(ThreadPool& pool, const Tensor& x, Tensor& y, float lo, float hi, Isa isa = active_isa());
void abs_op(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());
void copy_tensor(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());

// Per-channel ops on channels-first activations x: [C, T] or [B, C, T].
// HiFT/BigVGAN Snake with alpha in linear scale: y = x + sin^2(alpha_c x) / (alpha_c + 1e-9).
void snake(ThreadPool& pool, const Tensor& x, const Tensor& alpha, Tensor& y, Isa isa = active_isa());
// y = x * scale_c + shift_c (eval BatchNorm folded to scale/shift); shift may be empty.
void channel_affine(ThreadPool& pool, const Tensor& x, const Tensor& scale, const Tensor& shift, Tensor& y,
                    Isa isa = active_isa());

// ---- binary: y = a (op) b with NumPy broadcasting of b against a ----
// b's dims are aligned from the right; each must equal a's or be 1 (missing leading dims
// count as 1): same shape, a row vector [cols], a column [rows, 1], a scalar [1], ...
// y has a's shape and may alias a (or b when b has a's shape).
void add(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& y, Isa isa = active_isa());
void sub(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& y, Isa isa = active_isa());
void mul(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& y, Isa isa = active_isa());

// ---- data movement ----
// Embedding lookup: table [V, D] (F32, F16, BF16, Q8_0, Q4_0), ids I32 [N] (or any shape
// with N elements, contiguous) -> out F32 [N, D]. Ids outside [0, V) throw.
void get_rows(const Tensor& table, const Tensor& ids, Tensor& out);
// dst = src for same-shape plain (non-quantized) tensors of the same dtype with any
// strides, innermost included: materialises transposed or sliced views.
void copy_strided(const Tensor& src, Tensor& dst);
// Nearest-neighbour upsampling along the last dim (nn.Upsample(scale_factor=s,
// mode="nearest") on [.., T]): y[.., t] = x[.., t / s]. x: [.., T] -> y: [.., s T], F32.
void upsample_nearest(const Tensor& x, int64_t s, Tensor& y);
// Pads the last dim: y[.., left + t] = x[.., t], and the borders by mode (as F.pad):
// Zero; Reflect (x[1], x[2].. mirrored without repeating the edge; needs pads < T);
// Replicate (edge value). x: [.., T] -> y: [.., left + T + right], F32.
enum class PadMode { Zero, Reflect, Replicate };
void pad1d(const Tensor& x, int64_t left, int64_t right, PadMode mode, Tensor& y);
// Per-row statistics over the last dim (x: [.., T] F32, outputs [..] or [rows] F32,
// contiguous; accumulated in double): mean, and std with Bessel's correction when
// unbiased (torch.std default; T = 1 then gives NaN like torch). std may be empty.
void row_mean_std(const Tensor& x, Tensor& mean, Tensor& std, bool unbiased = true);
// Concatenates same-dtype (non-quantized) tensors along dim (negative counts from the end);
// all other dims must match out's. Inputs and out may be strided views.
void concat(std::initializer_list<Tensor> inputs, int dim, Tensor& out);
void concat(const Tensor* inputs, int n_inputs, int dim, Tensor& out);

}  // namespace cbx
