// Upstream Chatterbox checkpoint directory -> one self-contained GGUF
// (`chatterbox convert DIR -o model.gguf --type f32|f16|q8_0|q4_k|q4_0`).
// Layout, naming, metadata and dtype policy: docs/gguf-format.md.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/progress.h"
#include "models/model_config.h"

namespace cbx {

// The upstream files of one checkpoint directory (absolute paths; empty = absent/optional).
struct CheckpointFiles {
  Variant variant = Variant::Turbo;
  std::string dir;
  std::string t3, s3gen, ve, conds;
  // Turbo/Nano: GPT-2 tokenizer
  std::string vocab, merges, added_tokens, tokenizer_config, special_tokens_map;
  // Multilingual
  std::string mtl_tokenizer, cangjie;
  std::string note;  // a choice detect_checkpoint made (two T3 checkpoints present), or ""
};

// Detects the variant from the files present. t3_file (optional) picks the T3 checkpoint
// by file name (e.g. t3_mtl23ls_v3.safetensors). Throws naming the missing file and the
// variant it expected, or listing what was looked for when no variant matches.
CheckpointFiles detect_checkpoint(const std::string& dir, const std::string& t3_file = "");

struct ConvertOptions {
  std::string dir;
  std::string out;
  DType type = DType::F32;          // f32 | f16 | q8_0 | q4_k | q4_0: the T3 matrices (see quant_policy.h)
  std::optional<DType> s3gen_type;  // override of S3Gen's F16 (--s3gen-type; smaller, less precise)
  std::string t3_file;              // optional T3 checkpoint override
  // Optional: called as the source files are read ("reading", item = file name) and as each
  // tensor is encoded ("tensor", done / total, item = GGUF tensor name).
  ProgressFn on_progress;
  // Optional: called with each warning as it arises (also kept in ConvertStats::warnings).
  WarningFn on_warning;
};

struct ConvertStats {
  Variant variant = Variant::Turbo;
  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  std::map<DType, uint64_t> bytes_per_dtype;
  std::map<DType, size_t> tensors_per_dtype;
  double seconds = 0;
  std::vector<std::string> warnings;  // tokenizer / voice oddities, the T3 checkpoint chosen
};

ConvertStats convert_checkpoint(const ConvertOptions& opt);

// Infers the whole ModelConfig of a checkpoint directory without writing anything
// (exposed for tests and `chatterbox convert --dry-run`).
ModelConfig infer_checkpoint_config(const CheckpointFiles& files);

}  // namespace cbx
