// AMX-BF16 GEMM shared by the AVX-512 matmul translation units (matmul_amx_avx512.cpp
// defines it, matmul_avx512.cpp puts it in its tables); nothing else includes this.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"

namespace cbx {

// Largest k block the GEMM driver hands an AMX w packer (ops/matmul.cpp kAmxKc must match;
// the packers keep one block of 32 rows on the stack).
constexpr int64_t kAmxKc = 512;

// The bf16 GEMM for every weight type on AMX tiles, or nullptr when AMX is not usable.
const Bf16Gemm* amx_bf16_gemm();

}  // namespace cbx
