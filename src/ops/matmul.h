// Matrix multiply front-ends: validate shapes and dtypes, then run the kernels of
// kernels/matmul.h for active_isa() on the pool.
//
//   matmul:      y: [N, M] = x: [N, K] . w: [M, K]^T      (PyTorch Linear, no bias)
//   matmul_bias: the same plus bias: [M] on every row
//   gemm_f32:    c: [N, M] = a: [N, K] . b: [M, K]^T      (activations x activations, all f32)
//
// w: F32, F16, BF16, Q8_0 or Q4_0, 2-D, rows may be strided. x: F32, [K] or [N, K] (more
// leading dims are allowed when they collapse to one row stride), rows may be strided,
// innermost contiguous. y: F32, same leading dims as x with M columns, rows may be strided.
// Quantized weights need K % 32 == 0.
//
// Numerics: N < matmul_gemm_min_rows() takes the dot path: Q8_0/Q4_0 weights are dotted
// with x quantized to 8 bits per 32-block (integer dots); BF16 weights on AVX-512 with x
// rounded to BF16. Otherwise the GEMM path widens the weights to f32 (BF16 on AVX-512
// keeps bf16 weights and rounds x to BF16) and accumulates in f32.
//
// Scratch (converted activations, packed panels) comes from `scratch` when given (its
// mark is restored on return), otherwise from a grow-only buffer owned by the calling
// thread: no allocation once the largest shape has been seen.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cbx {

class Arena;
class ThreadPool;
struct MatmulKernels;

void matmul(ThreadPool& pool, const Tensor& w, const Tensor& x, Tensor& y, Arena* scratch = nullptr);
void matmul_bias(ThreadPool& pool, const Tensor& w, const Tensor& bias, const Tensor& x, Tensor& y,
                 Arena* scratch = nullptr);
void gemm_f32(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& c, Arena* scratch = nullptr);

// The same as matmul/matmul_bias (bias may be nullptr) with an explicit kernel table:
// tests compare the active ISA with matmul_kernels(Isa::Generic).
void matmul_with(const MatmulKernels& kernels, ThreadPool& pool, const Tensor& w, const Tensor* bias,
                 const Tensor& x, Tensor& y, Arena* scratch = nullptr);

// Activation rows from which the GEMM path is used.
int64_t matmul_gemm_min_rows();
// Upper bound of the scratch bytes one call needs (to size an Arena).
size_t matmul_scratch_bytes(DType w_type, int64_t n, int64_t m, int64_t k, int n_threads);

}  // namespace cbx
