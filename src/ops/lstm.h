// LSTM (PyTorch nn.LSTM semantics, gate order i, f, g, o):
//   gates = x W_ih^T + b_ih + h W_hh^T + b_hh
//   c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c')
// Weights F32, contiguous. Bias tensors may be empty (treated as zero).
#pragma once
#include <cstdint>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace cbx {

// One time step. gx: [4H] F32 = x W_ih^T + b_ih, precomputed, and overwritten (used as
// the gate buffer). w_hh: [4H, H]; b_hh: [4H] or empty; h, c: [H], updated in place.
void lstm_cell(Tensor& gx, const Tensor& w_hh, const Tensor& b_hh, Tensor& h, Tensor& c, Isa isa = active_isa());

// One layer over a whole sequence. x: [T, In]; w_ih: [4H, In]; w_hh: [4H, H];
// b_ih, b_hh: [4H] or empty; h, c: [H] initial state (zeros for PyTorch's default),
// left holding the final state; y: [T, H] (may have strided rows).
// Scratch: T*4H + In*4H floats from `scratch` (rewound) or the heap.
void lstm_layer(ThreadPool& pool, const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh, Tensor& h, Tensor& c, Tensor& y, Arena* scratch = nullptr, Isa isa = active_isa());

// B independent sequences of equal length through one layer (the voice encoder's partials).
// The pool's threads own contiguous groups of sequences; each step of a group is one
// [b, H] x [H, 4H] GEMM plus the gate updates, with no synchronisation between steps. x: [B, T, In] contiguous; w_ih:
// [4H, In]; w_hh: [4H, H]; b_ih, b_hh: [4H] or empty; h, c: [B, H] contiguous initial states, left holding the final
// ones; y: [B, T, H] contiguous, or empty when only the final state is wanted. Scratch: B*T*4H + (In + H)*4H floats
// from `scratch` (rewound) or the heap.
void lstm_layer_batch(ThreadPool& pool, const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh, Tensor& h, Tensor& c, Tensor& y, Arena* scratch = nullptr,
                      Isa isa = active_isa());
// Floats of scratch lstm_layer_batch takes (to size an Arena).
int64_t lstm_layer_batch_scratch(int64_t B, int64_t T, int64_t In, int64_t H);

}  // namespace cbx
