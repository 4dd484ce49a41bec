// Internals of ops/matmul.cpp shared with ops/matmul_packed.cpp; nothing else includes this.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"

namespace cbx {

struct Bf16Gemm;

namespace matmul_detail {

constexpr int64_t kGemmMinRows = 8;  // activation rows from which the GEMM path is used

// Row stride (bytes) of t seen as [rows(), cols()]; requires the leading dims to collapse.
int64_t row_stride(const Tensor& t, const char* what, const char* name);
// Scratch from the arena (caller restores the mark) or from a grow-only per-thread buffer.
uint8_t* get_scratch(Arena* arena, size_t bytes);
// The bf16 GEMM of an AVX-512 table with AMX (else nullptr).
const Bf16Gemm* bf16_for(const MatmulKernels& kern);
// requested unless Auto; else the thread's scope; else the weight's lossiness.
GemmPrecision effective_precision(GemmPrecision requested, DType w_type);
// matmul / matmul_bias with validation (prec Auto = effective_precision's rules).
void check_and_run(const MatmulKernels& kern, ThreadPool& pool, const Tensor& w, const Tensor* bias, const Tensor& x,
                   Tensor& y, Arena* arena, const char* what, GemmPrecision prec = GemmPrecision::Auto);

}  // namespace matmul_detail
}  // namespace cbx
