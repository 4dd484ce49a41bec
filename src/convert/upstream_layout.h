// The tensors of the upstream Chatterbox checkpoint files, as a table: every name, shape and
// dtype in PyTorch state_dict order, derived from the upstream module definitions
// (resemble-ai/chatterbox src/chatterbox/models/**, S3Tokenizer model_v2.py). The synthetic
// checkpoint generator (tools/mkckpt) writes exactly these; the converter's tests can walk the
// same table to check that every tensor is consumed with the shape it expects.
//
// Hyper-parameters that the shapes do not reveal, and that a reader must therefore assume,
// are the same at every size: attention head width 64 (T3 backbones, flow encoder, CFM
// estimator, S3 tokenizer), perceiver 4 heads, HiFT upsample rates 8/5/3 and resblock
// dilations 1/3/5, CAMPPlus dilations 1/2/2. See docs/synthetic-checkpoints.md.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cbx {

// Nano: Turbo's files and pipeline with a GPT-2 small T3 (t3_nano_v1.safetensors).
enum class CkptVariant { Turbo, Mtl, Nano };
enum class CkptFile { T3, S3Gen, VE };

// What a tensor is; tools/mkckpt draws realistic values from it, a reader may ignore it.
enum class TensorRole {
  Weight,        // matrix / conv kernel: N(0, 1/sqrt(fan_in))
  Bias,          // small N(0, 0.02)
  Embedding,     // lookup table
  PosEmbedding,  // learned absolute positions (std 0.02)
  NormWeight,    // LayerNorm / RMSNorm gamma ~ 1
  NormBias,      // LayerNorm beta ~ 0
  BnWeight,
  BnBias,
  BnMean,      // running_mean ~ 0
  BnVar,       // running_var > 0
  BnCount,     // num_batches_tracked, int64 scalar
  WnG,         // weight-norm magnitude (parametrizations.weight.original0)
  WnV,         // weight-norm direction (parametrizations.weight.original1)
  SnakeAlpha,  // HiFT Snake alpha (linear scale, > 0)
  Query,       // perceiver learned query
  PosBias,     // rel-pos attention pos_bias_u / pos_bias_v
  TimeMixer,   // mean-flow time_embed_mixer, trained from [I | 0]
  MelFilters,  // S3 tokenizer librosa Slaney mel filterbank buffer (deterministic)
  HannWindow,  // S3 tokenizer periodic Hann(400) buffer (deterministic)
  Constant,    // fixed scalar (value field)
};

struct UpstreamTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major, as PyTorch
  TensorRole role = TensorRole::Weight;
  int64_t fan_in = 1;  // for Weight / WnV
  float value = 0.0f;  // for Constant
};

// Every hyper-parameter the generator varies between sizes. Full = the upstream values.
struct UpstreamDims {
  // T3 backbone and wrapper
  int64_t t3_layers, t3_dim, t3_ffn;  // heads = t3_dim / 64
  int64_t text_vocab, speech_vocab;
  int64_t gpt2_positions;        // GPT-2 wpe rows (8196)
  int64_t text_pos, speech_pos;  // Llama learned pos-emb rows (2050, 4100)
  int64_t llama_vocab;           // unused tfmr.embed_tokens rows (8)
  int64_t perceiver_queries;     // 32
  int64_t speaker_dim;           // VE embedding width = T3 spkr_enc input (256)
  // Voice encoder (3-layer LSTM)
  int64_t ve_mels, ve_hidden, ve_layers;
  // S3Gen flow: token embedding + upsampling conformer encoder
  int64_t flow_vocab, flow_dim, flow_ffn, flow_blocks, flow_up_blocks;  // heads = flow_dim / 64
  int64_t mel_bins;                                                     // 80
  int64_t xvector_dim;                                                  // CAMPPlus embedding (192)
  // CFM estimator (ConditionalDecoder)
  int64_t est_channels;  // 256; time embedding = 4x
  int64_t est_inner;     // attention inner width = heads * 64 (512)
  int64_t est_tblocks;   // transformer blocks per level (4)
  int64_t est_mid;       // mid blocks (12)
  bool meanflow;         // time_embed_mixer present (Turbo)
  // HiFT
  int64_t hift_base;    // 512; ups halve it three times
  int64_t f0_channels;  // 512
  int64_t n_harmonics;  // 8 -> m_source.l_linear [1, 9]
  // CAMPPlus
  int64_t cam_m, cam_init, cam_growth, cam_bn;  // 32, 128, 32, 128 (= bn_size 4 * growth)
  int64_t cam_layers[3];                        // 12, 24, 16
  // S3TokenizerV2
  int64_t tok_mels, tok_state, tok_layers, tok_fsmn_kernel;  // 128, 1280, 6, 31; heads = state / 64
};

UpstreamDims upstream_dims(CkptVariant v, bool tiny);

// File name in the upstream repo ("t3_turbo_v1.safetensors", "s3gen.pt", ...).
// t3_version (2 or 3) only matters for the multilingual T3 file.
std::string upstream_file_name(CkptFile f, CkptVariant v, int t3_version = 2);
bool upstream_file_is_torch_pickle(CkptFile f, CkptVariant v);

// Calls fn for every tensor of the file, in PyTorch state_dict order.
void for_each_upstream_tensor(CkptFile f, CkptVariant v, const UpstreamDims& d,
                              const std::function<void(const UpstreamTensor&)>& fn);

}  // namespace cbx
