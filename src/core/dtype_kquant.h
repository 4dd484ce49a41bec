// K-quant (Q4_K, Q5_K) encoders and decoders for the dtype table (core/dtype.h has the
// block layouts). Ours, written from the published GGUF block format.
#pragma once
#include <cstdint>

namespace cbx {

// n % 256 == 0.
void q4_k_to_float(const void* src, float* dst, int64_t n);
void q5_k_to_float(const void* src, float* dst, int64_t n);
// Least-squares quantizers: per 32-weight sub-block a scale and a min that minimise the
// squared error, then the 8 scales and mins in 6 bits relative to the block's d and dmin,
// each pair tried at its rounding and the neighbours, and the weights re-quantized with
// the stored values. Deterministic (same input, same bytes).
void q4_k_from_float(const float* src, void* dst, int64_t n);
void q5_k_from_float(const float* src, void* dst, int64_t n);

}  // namespace cbx
