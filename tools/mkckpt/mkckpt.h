// chatterbox-mkckpt: synthetic Chatterbox checkpoints (random weights) in the exact upstream
// Hugging Face file formats. Shared declarations of the generator's pieces.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "convert/checkpoint_tensor.h"
#include "convert/upstream_layout.h"

namespace mk {

// ---- deterministic randomness (mk_random.cpp) ----
// Every stream is keyed by (seed, labels...), so a tensor's values do not depend on the order
// or the thread in which it is generated.
uint64_t mix64(uint64_t x);
uint64_t stream_key(uint64_t seed, std::string_view a, std::string_view b = {});

class Rng {  // xoshiro256** seeded by splitmix64
 public:
  explicit Rng(uint64_t key);
  uint64_t next();
  double uniform();          // [0, 1)
  int64_t below(int64_t n);  // [0, n)
  float normal();            // N(0, 1), Box-Muller
 private:
  uint64_t s_[4];
  bool have_spare_ = false;
  float spare_ = 0.0f;
};

// ---- tensor values (mk_values.cpp) ----
// Elements are produced in blocks of kBlock; block b of a tensor uses Rng(stream_key(key, b)).
constexpr int64_t kBlock = 1 << 16;
int64_t numel(const std::vector<int64_t>& shape);
size_t tensor_bytes(const cbx::UpstreamTensor& t);
// Fills bytes for elements [block_begin*kBlock, min(numel, block_end*kBlock)) into out.
void fill_blocks(const cbx::UpstreamTensor& t, uint64_t key, int64_t block_begin, int64_t block_end, uint8_t* out);
// Whole tensor in memory (small tensors, .pt files).
cbx::CkptTensor make_tensor(const cbx::UpstreamTensor& t, uint64_t key);

// ---- writers (mk_writers.cpp) ----
struct Progress {
  std::string label;
  size_t total_bytes = 0, done_bytes = 0;
  int last_pct = -1;
  void add(size_t n);
};
// Streams tensors into a safetensors file laid out as the Python `safetensors` package lays
// it out: tensors sorted by dtype (widest alignment first) then name, compact JSON header
// with __metadata__ {"format": "pt"} first, padded with spaces to a multiple of 8 bytes.
void write_safetensors_streaming(const std::string& path, const std::vector<cbx::UpstreamTensor>& tensors,
                                 uint64_t file_key, int threads);
// torch.save of a flat state dict (in the given order), through cbx::save_torch_pt.
void write_torch_state_dict(const std::string& path, const std::vector<cbx::UpstreamTensor>& tensors,
                            uint64_t file_key);

// ---- file families ----
struct Options {
  cbx::CkptVariant variant = cbx::CkptVariant::Turbo;
  bool tiny = false;
  uint64_t seed = 0;
  int t3_version = 2;
  std::string dir;
  int threads = 1;
};
void write_weight_file(const Options& o, cbx::CkptFile f);  // mk_weights.cpp
void write_conds(const Options& o);                         // mk_conds.cpp
void write_gpt2_tokenizer(const Options& o);                // mk_tokenizer_gpt2.cpp
void write_mtl_tokenizer(const Options& o);                 // mk_tokenizer_mtl.cpp

// ---- small helpers (mk_random.cpp) ----
void write_text_file(const std::string& path, const std::string& text);
std::string utf8(uint32_t cp);

}  // namespace mk
