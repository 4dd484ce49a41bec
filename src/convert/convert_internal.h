// Shared between convert*.cpp: the upstream file abstraction, hyper-parameter inference
// and the per-tensor conversion recipes. Not part of the library's public surface.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "convert/checkpoint_tensor.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "convert/torch_pt.h"
#include "core/gguf.h"
#include "models/model_config.h"

namespace cbx {

std::string shape_to_string(const std::vector<int64_t>& s);  // "[3, 1024]"
std::string base_name(const std::string& path);

// One upstream checkpoint file (.safetensors mmapped, or a torch .pt state dict).
class SourceFile {
 public:
  static std::unique_ptr<SourceFile> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }  // base name, for messages
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& n) const { return meta_.count(n) != 0; }
  // Throw "FILE: missing tensor 'n'" when absent.
  const std::vector<int64_t>& shape(const std::string& n) const;
  DType dtype(const std::string& n) const;
  int64_t dim(const std::string& n, int axis) const;  // axis < 0 counts from the end
  // Float data as f32 (F32/F16/BF16/F64 sources); other dtypes throw naming file and tensor.
  std::vector<float> read_f32(const std::string& n) const;
  // .pt: drops the tensor's data once the last recipe using it has run.
  void release(const std::string& n);

 private:
  std::string path_, file_;
  std::unique_ptr<SafetensorsFile> st_;
  std::map<std::string, std::shared_ptr<CkptTensor>> pt_;
  std::vector<std::string> names_;
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> meta_;
};

// Counts i = 0, 1, ... while `prefix + i + suffix` exists.
int count_indexed(const SourceFile& f, const std::string& prefix, const std::string& suffix);

// ---- hyper-parameter inference (throw naming the file and the tensor they needed) ----
void infer_t3(const SourceFile& f, Variant v, T3Config& t);
void infer_ve(const SourceFile& f, VeConfig& v);
void infer_s3gen(const SourceFile& f, ModelConfig& c);  // s3tok, campplus, flow, cfm, hift

// ---- recipes: how one GGUF tensor is made from source tensors ----
enum class Xform { Plain, Transpose, WeightNorm, BnScale, BnShift };
struct Recipe {
  std::string gguf_name;
  SourceFile* src = nullptr;
  Xform xf = Xform::Plain;
  std::vector<std::string> inputs;  // Plain/Transpose: {w}; WeightNorm: {g, v}; Bn: {w, b, mean, var} ("" = absent)
  std::vector<int64_t> shape;       // output, row-major
  float bn_eps = 1e-5f;
};

// Upstream prefix -> GGUF prefix (first match wins; "" maps everything).
using PrefixMap = std::vector<std::pair<std::string, std::string>>;
// Maps every tensor of `src` into recipes keyed by GGUF name. Weight-norm pairs
// (parametrizations.weight.original0/1 or weight_g/weight_v) fuse to `.weight`;
// BatchNorm (running_mean/var + optional affine) folds to `.scale`/`.shift`;
// num_batches_tracked and `drop` names are skipped; `transpose(name)` marks GPT-2
// Conv1D weights. Throws on a name no prefix maps, or on duplicates.
void collect_recipes(SourceFile& src, const PrefixMap& prefixes, const std::set<std::string>& drop,
                     bool (*transpose)(const std::string&), std::map<std::string, Recipe>& out);
// The upstream name a GGUF tensor comes from (for "missing tensor" messages).
std::string upstream_name(const std::string& gguf_name, const PrefixMap& prefixes);
std::vector<float> run_recipe(const Recipe& r);

// T3 file prefixes/drops/transposes and the S3Gen/VE ones.
const PrefixMap& t3_prefixes();
const std::set<std::string>& t3_dropped();
bool t3_needs_transpose(const std::string& upstream_name);
const PrefixMap& s3gen_prefixes();
const std::set<std::string>& s3gen_dropped();
const PrefixMap& ve_prefixes();

// ---- built-in voice (conds.pt) ----
struct VoiceTensors {
  std::vector<float> speaker_emb, emotion_adv, prompt_feat, embedding;
  std::vector<int32_t> cond_prompt_tokens, prompt_token;
};
// Reads and validates conds.pt against the config (sizes, token ranges); fills c.voice. Oddities
// that do not stop the conversion go to warn.
VoiceTensors read_voice(const std::string& path, ModelConfig& c, const WarningFn& warn);

// ---- tokenizer metadata ----
void write_tokenizer(const CheckpointFiles& files, const ModelConfig& c, GgufWriter& w, const WarningFn& warn);

}  // namespace cbx
