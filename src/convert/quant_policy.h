// Which dtype each tensor of a converted model is stored in (docs/gguf-format.md,
// "Dtype policy"). Shared by `chatterbox convert` and `chatterbox quantize`, so a
// converted and a requantized file agree tensor by tensor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model_config.h"

namespace cbx {

// The --type values: f32, f16, q8_0, q4_0. Throws naming the value otherwise.
DType parse_target_type(const std::string& s);

// A 2-D weight the target type applies to: both dims >= kPolicyMinDim and the inner dim
// a multiple of 32 (the Q8_0/Q4_0 block size). Smaller projections (e.g. [80, 512]) are
// a negligible share of the bytes and stay F32. At full size no 2-D weight has a dim in
// [128, 256), so 128 selects what 256 would; 128 lets the tiny test models quantize too.
constexpr int64_t kPolicyMinDim = 128;
bool policy_matmul_eligible(const std::vector<int64_t>& shape);

// Stored dtype for a tensor of `role` (is_int: token ids, stored I32) under `target`.
DType policy_dtype(const std::string& name, const std::vector<int64_t>& shape, TensorClass role,
                   bool is_int, DType target);

// general.file_type value (llama.cpp numbering: 0 f32, 1 f16, 7 q8_0, 2 q4_0).
uint32_t gguf_file_type(DType target);

// Encodes n floats (one contiguous row-major tensor) as `dt` into dst, which holds
// dtype_row_bytes(dt, n) bytes. n must be a multiple of dt's block size.
void encode_f32(const float* src, int64_t n, DType dt, void* dst);

}  // namespace cbx
