// AMX-BF16 GEMM shared by the AVX-512 matmul translation units (matmul_amx_avx512.cpp
// defines it, matmul_avx512.cpp puts it in its tables); nothing else includes this.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"

namespace cbx {

// The k block of the AMX GEMM (its Bf16Gemm::kc; at most kBf16PackMaxKc of the shared
// packers, kernels/bf16_pack_avx512.h).
constexpr int64_t kAmxKc = 512;

// The bf16 GEMM for every weight type on AMX tiles, or nullptr when AMX is not usable.
const Bf16Gemm* amx_bf16_gemm();

}  // namespace cbx
