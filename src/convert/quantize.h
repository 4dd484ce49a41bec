// `chatterbox quantize IN.gguf OUT.gguf --type q8_0|q4_k|q4_0|f16 [--s3gen-type T]`: re-encodes an
// F32/F16 chatterbox GGUF under the same dtype policy as `convert` (quant_policy.h). Metadata
// is copied; general.file_type, chatterbox.convert.type and .s3gen_type are updated.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "convert/quant_policy.h"
#include "core/dtype.h"
#include "core/progress.h"

namespace cbx {

struct QuantizeStats {
  size_t n_tensors = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  std::map<DType, uint64_t> bytes_per_dtype;
  double seconds = 0;
};

// Throws when a tensor would need re-encoding from a quantized type (Q8_0/Q4_0 sources
// only pass through unchanged), naming the tensor. progress (optional) is called as each tensor
// is written ("tensor", done / total, item = tensor name).
QuantizeStats quantize_gguf(const std::string& in, const std::string& out, const QuantTypes& types,
                            const ProgressFn& progress = {});

}  // namespace cbx
