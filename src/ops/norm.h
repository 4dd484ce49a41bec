// Normalisations over the last dim, softmax, and rotary position embedding.
// x, y: F32, up to 4 dims, rows may be strided (innermost dim contiguous); y may be x.
// Optional parameter tensors are passed as an empty Tensor{} when absent.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx {

// y = (x - mean) / sqrt(var + eps) * w + b over the last dim (biased variance, as
// nn.LayerNorm). w, b: [D] F32 contiguous, or empty.
void layer_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                Isa isa = active_isa());
// LayerNorm over the channel dim of channels-first activations, i.e.
// x.transpose(1, 2) -> nn.LayerNorm(C) -> transpose back, without the transposes.
// x, y: [C, T] or [B, C, T] (rows may be strided; y may be x); w, b: [C] or empty.
// Scratch: 3 * min(T, 512) floats per thread on the stack.
void layer_norm_channels(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                         Isa isa = active_isa());
// y = x / sqrt(mean(x^2) + eps) * w over the last dim; w: [D] or empty.
void rms_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, float eps, Tensor& y, Isa isa = active_isa());
// Softmax over the last dim; a row that is all -inf gives zeros (PyTorch gives NaN).
void softmax(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa = active_isa());

// NeoX / "rotate-half" RoPE: for each row of D = 2*half values at position p,
//   (x_i, x_{i+half}) -> (x_i cos a - x_{i+half} sin a, x_{i+half} cos a + x_i sin a),
//   a = p * inv_freq_i,  inv_freq_i = theta^(-2i/D) / freq_factors_i  (i < half).
// The angle is formed in f32 as PyTorch does (float(p) * float(inv_freq)), then cos/sin.
// x, y: [T, D] or [T, H, D] (pass transpose(x, 0, 1) for an [H, T, D] tensor), D even,
// D <= 1024. positions: I32 [T]. freq_factors: F32 [D/2] (llama3 rope scaling) or empty.
void rope(ThreadPool& pool, const Tensor& x, const Tensor& positions, float theta, const Tensor& freq_factors,
          Tensor& y, Isa isa = active_isa());
// Same with the inverse frequencies given: F32 [D/2] (e.g. from rope_inv_freq_llama3, or
// copied from a reference implementation for bit-exact angles).
void rope_inv_freq(ThreadPool& pool, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                   Isa isa = active_isa());
// inv_freq[i] = theta^(-2i/D) (computed in f32 like torch), then llama3 rope scaling:
// wavelengths 2 pi / inv_freq above orig_max_pos / low_freq_factor are divided by
// `factor`, those below orig_max_pos / high_freq_factor kept, and the band between
// interpolated with smooth = (orig_max_pos / wavelen - low) / (high - low):
// inv = (1 - smooth) inv / factor + smooth inv. factor <= 0 disables scaling.
// out: D/2 floats.
void rope_inv_freq_llama3(int64_t D, float theta, float factor, float low_freq_factor, float high_freq_factor,
                          float orig_max_pos, float* out);

}  // namespace cbx
