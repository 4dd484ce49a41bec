#include "convert/quant_policy.h"

#include "core/error.h"

namespace cbx {

namespace {
// Higher = more precise. Only the storage types a conversion produces.
int precision_rank(DType t) {
  switch (t) {
    case DType::F32:
      return 5;
    case DType::F16:
      return 4;
    case DType::Q8_0:
      return 3;
    case DType::Q4_K:
      return 2;
    case DType::Q4_0:
      return 1;
    default:
      return 0;
  }
}
DType at_least(DType t, DType floor) { return precision_rank(t) < precision_rank(floor) ? floor : t; }
bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
}  // namespace

QuantPart quant_part(const std::string& name) {
  if (starts_with(name, "t3.")) return QuantPart::T3;
  if (starts_with(name, "flow.") || starts_with(name, "cfm.") || starts_with(name, "hift.")) return QuantPart::S3Gen;
  if (starts_with(name, "s3tok.")) return QuantPart::S3Tok;
  if (starts_with(name, "ve.") || starts_with(name, "campplus.")) return QuantPart::Encoder;
  return QuantPart::Other;
}

DType QuantTypes::s3gen_type() const {
  if (s3gen) return *s3gen;
  return type == DType::F32 ? DType::F32 : DType::F16;
}

DType parse_target_type(const std::string& s, const char* flag) {
  DType t;
  try {
    t = dtype_from_name(s.c_str());
  } catch (const Error&) {
    fail("unknown %s '%s' (expected f32, f16, q8_0, q4_k or q4_0)", flag, s.c_str());
  }
  CBX_CHECK(t == DType::F32 || t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q4_0,
            "%s '%s' is not supported (expected f32, f16, q8_0, q4_k or q4_0)", flag, s.c_str());
  return t;
}

bool policy_matmul_eligible(const std::vector<int64_t>& shape) {
  return shape.size() == 2 && shape[0] >= kPolicyMinDim && shape[1] >= kPolicyMinDim && shape[1] % 32 == 0;
}

DType policy_dtype(const std::string& name, const std::vector<int64_t>& shape, TensorClass role, bool is_int,
                   const QuantTypes& types) {
  if (is_int) return DType::I32;
  const QuantPart part = quant_part(name);
  // The voice encoder and CAMPPlus are small and run once per reference clip.
  if (part == QuantPart::Encoder) return DType::F32;
  // Precision of the part's matrices: T3 takes --type; S3Gen F16 unless overridden.
  const DType target = part == QuantPart::S3Gen ? types.s3gen_type() : types.type;
  if (target == DType::F32) return DType::F32;
  switch (role) {
    case TensorClass::Vector:
    case TensorClass::Conv:
    case TensorClass::Data:
      return DType::F32;
    case TensorClass::Embedding:
      return DType::F16;  // exact enough for a lookup, half the bytes
    case TensorClass::Matmul:
    case TensorClass::Head:
      break;
  }
  if (!policy_matmul_eligible(shape)) return DType::F32;
  DType t = target;
  if (role == TensorClass::Head) t = at_least(t, DType::Q8_0);  // logits feed the sampler
  // Q4_K needs K % 256 == 0 (its super-block); other matrices take the next type up.
  if (t == DType::Q4_K && shape[1] % kQK_K != 0) t = DType::Q8_0;
  // The S3 tokenizer's FSQ rounds tanh outputs to 3 levels: keep it at >= F16.
  if (part == QuantPart::S3Tok) t = at_least(t, DType::F16);
  return t;
}

uint32_t gguf_file_type(DType target) {
  switch (target) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return 7;
    case DType::Q4_K:
      return 14;  // llama.cpp's "mostly Q4_K (small)"
    default:
      fail("gguf_file_type: unsupported target %s", dtype_name(target));
  }
}

void encode_f32(const float* src, int64_t n, DType dt, void* dst) {
  const TypeTraits& tt = type_traits(dt);
  CBX_CHECK(tt.from_float, "encode_f32: dtype %s has no float encoder", tt.name);
  CBX_CHECK(n % tt.block_size == 0, "encode_f32: %lld elements is not a multiple of the %s block (%lld)", (long long)n,
            tt.name, (long long)tt.block_size);
  tt.from_float(src, dst, n);
}

}  // namespace cbx
