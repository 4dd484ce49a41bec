// Which dtype each tensor of a converted model is stored in (docs/gguf-format.md,
// "Dtype policy"). Shared by `chatterbox convert` and `chatterbox quantize`, so a
// converted and a requantized file agree tensor by tensor.
//
// The policy goes by role: --type applies to the T3 matrices (the decode is bandwidth-bound,
// so fewer bytes per weight are faster); S3Gen (flow encoder, CFM estimator, HiFT) is
// compute-bound and unpacks its weights at load, so a quantized S3Gen only loses precision:
// it stays F16 unless --s3gen-type asks otherwise. The S3 tokenizer stays >= F16, the voice
// encoder and CAMPPlus F32.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model_config.h"

namespace cbx {

// The part of the model a tensor belongs to, from its GGUF name prefix.
enum class QuantPart {
  T3,       // t3.*: the text-to-token transformer
  S3Gen,    // flow.*, cfm.*, hift.*: flow encoder, CFM estimator, HiFT vocoder
  S3Tok,    // s3tok.*: the speech tokenizer (voice cloning)
  Encoder,  // ve.*, campplus.*: voice encoder and speaker embedding (voice cloning)
  Other,    // voice.* and anything else
};
QuantPart quant_part(const std::string& name);

// The dtypes asked for: `type` (--type) for T3, an optional override for S3Gen.
struct QuantTypes {
  DType type = DType::F32;
  std::optional<DType> s3gen;  // --s3gen-type: smaller and less precise than the default
  QuantTypes() = default;
  QuantTypes(DType t) : type(t) {}  // NOLINT: the default policy of --type t
  QuantTypes(DType t, std::optional<DType> s) : type(t), s3gen(s) {}
  // S3Gen's matrix type: the override, else F32 for an f32 target and F16 for any other.
  DType s3gen_type() const;
};

// The --type / --s3gen-type values: f32, f16, q8_0, q4_k, q4_0 (any case). Throws naming `flag` and the value
// otherwise.
DType parse_target_type(const std::string& s, const char* flag = "--type");

// A 2-D weight the target type applies to: both dims >= kPolicyMinDim and the inner dim
// a multiple of 32 (the Q8_0/Q4_0 block size). Smaller projections (e.g. [80, 512]) are
// a negligible share of the bytes and stay F32. At full size no 2-D weight has a dim in
// [128, 256), so 128 selects what 256 would; 128 lets the tiny test models quantize too.
// Q4_K also needs the inner dim a multiple of 256 (its super-block): an eligible matrix
// without it is stored Q8_0 instead (policy_dtype). The full-size T3 matrices (K = 1024,
// 4096) all have it.
constexpr int64_t kPolicyMinDim = 128;
bool policy_matmul_eligible(const std::vector<int64_t>& shape);

// Stored dtype for a tensor of `role` (is_int: token ids, stored I32) under `types`.
DType policy_dtype(const std::string& name, const std::vector<int64_t>& shape, TensorClass role, bool is_int,
                   const QuantTypes& types);

// general.file_type value (llama.cpp numbering: 0 f32, 1 f16, 7 q8_0, 2 q4_0, 14 q4_k) of the --type.
uint32_t gguf_file_type(DType target);

// Metadata keys recording the policy's inputs (provenance; loading does not read them).
constexpr const char* kConvertTypeKey = "chatterbox.convert.type";
constexpr const char* kConvertS3genTypeKey = "chatterbox.convert.s3gen_type";

// Encodes n floats (one contiguous row-major tensor) as `dt` into dst, which holds
// dtype_row_bytes(dt, n) bytes. n must be a multiple of dt's block size.
void encode_f32(const float* src, int64_t n, DType dt, void* dst);

}  // namespace cbx
