// Every hyper-parameter of a converted Chatterbox model, filled from GGUF metadata
// (model differences are data, not subclasses). The converter infers most fields from
// checkpoint tensor shapes and writes them all; docs/gguf-format.md lists every key.
//
// The same config yields the GGUF tensor table (model_tensor_specs): every tensor name,
// its row-major shape and its role. The converter checks checkpoints against it, the
// quantizer takes the role from it, and a model loader binds its weights through it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cbx {

class GgufFile;
class GgufWriter;

enum class Variant { Turbo, Nano, Mtl };
const char* variant_name(Variant v);              // "turbo", "nano", "mtl"
Variant variant_from_name(const std::string& s);  // throws on unknown

constexpr int kConfigFormatVersion = 1;

// T3: the text -> speech-token LM (GPT-2 for Turbo/Nano, Llama for Multilingual).
struct T3Config {
  std::string arch;  // "gpt2" | "llama"
  int32_t n_layer = 0, n_embd = 0, n_head = 0, n_kv_head = 0, head_dim = 0, n_ff = 0;
  int32_t n_ctx = 0;  // gpt2: wpe rows (8196); llama: max_position_embeddings
  float norm_eps = 1e-5f;
  float rope_theta = 0;  // llama only (llama3 rope scaling below)
  float rope_factor = 0, rope_low_freq_factor = 0, rope_high_freq_factor = 0;
  int32_t rope_orig_max_pos = 0;
  int32_t text_vocab = 0, speech_vocab = 0;
  int32_t start_text_token = 255, stop_text_token = 0;
  int32_t start_speech_token = 6561, stop_speech_token = 6562;
  int32_t max_text_tokens = 2048, max_speech_tokens = 4096;
  int32_t cond_prompt_len = 0;  // speech_cond_prompt_len: 375 (turbo) / 150 (mtl)
  int32_t speaker_embed_size = 256;
  bool learned_pos_emb = false;  // text_pos_emb/speech_pos_emb (llama)
  bool perceiver = false;
  int32_t perceiver_n_query = 0, perceiver_n_head = 0;
  bool emotion_adv = false;
  bool speech_head_bias = false;
  bool cfg = false;  // classifier-free guidance batch of 2
};

// Voice encoder (3-layer LSTM over a 40-bin linear power mel).
struct VeConfig {
  int32_t n_mels = 40, n_hidden = 256, n_layer = 3, embed_size = 256;
  int32_t sample_rate = 16000, n_fft = 400, hop = 160, win = 400;
  float fmin = 0, fmax = 8000;
  int32_t partial_frames = 160;
  float partial_rate = 1.3f, min_coverage = 0.8f;
  bool final_relu = true;
};

// CAMPPlus x-vector (speaker embedding for S3Gen).
struct CampplusConfig {
  int32_t feat_dim = 80, head_channels = 32, head_blocks = 2;
  int32_t init_channels = 128, tdnn_kernel = 5;
  int32_t growth_rate = 32, bn_channels = 128;
  std::vector<int32_t> block_layers{12, 24, 16}, block_kernels{3, 3, 3}, block_dilations{1, 2, 2};
  int32_t embed_size = 192, seg_len = 100;
  float bn_eps = 1e-5f;
};

// S3TokenizerV2 (speech -> 25 Hz tokens).
struct S3TokConfig {
  int32_t n_mels = 128, n_state = 1280, n_head = 20, n_layer = 6, n_ff = 5120;
  int32_t fsmn_kernel = 31, codebook_dim = 8, codebook_levels = 3;
  float attn_ln_eps = 1e-6f, mlp_ln_eps = 1e-5f, rope_theta = 10000;
  int32_t sample_rate = 16000, n_fft = 400, hop = 160;
};

// S3Gen flow front + UpsampleConformerEncoder.
struct FlowConfig {
  int32_t vocab = 6561, d_model = 512, n_head = 8, head_dim = 64, n_ff = 2048;
  int32_t n_encoders = 6, n_up_encoders = 4;
  int32_t mel_dim = 80, spk_embed_dim = 192, token_mel_ratio = 2;
  int32_t pre_lookahead_len = 3, up_kernel = 5, up_stride = 2;
  float layer_ln_eps = 1e-12f, ln_eps = 1e-5f;
  int32_t silence_token = 4299;
};

// CFM estimator (ConditionalDecoder) and its solver.
struct CfmConfig {
  int32_t in_channels = 320, out_channels = 80, channels = 256, conv_kernel = 3;
  int32_t n_blocks = 4, n_mid_blocks = 12, n_head = 8, head_dim = 64, ff_dim = 1024;
  int32_t time_emb_dim = 1024, time_sin_dim = 320;
  bool meanflow = false;
  int32_t n_timesteps = 10;
  std::string t_scheduler;  // "cosine" | "linear"
  float cfg_rate = 0.7f;
};

// HiFT vocoder.
struct HiftConfig {
  int32_t in_channels = 80, base_channels = 512, nb_harmonics = 8, conv_pre_kernel = 7;
  std::vector<int32_t> upsample_rates{8, 5, 3}, upsample_kernels{16, 11, 7};
  std::vector<int32_t> resblock_kernels{3, 7, 11}, resblock_dilations{1, 3, 5};
  std::vector<int32_t> source_resblock_kernels{7, 7, 11}, source_resblock_dilations{1, 3, 5};
  int32_t n_fft = 16, hop = 4, sample_rate = 24000;
  int32_t f0_layers = 5, f0_channels = 512;
  float nsf_alpha = 0.1f, nsf_sigma = 0.003f, voiced_threshold = 10;
  float lrelu_slope = 0.1f, audio_limit = 0.99f;
};

// Built-in voice (conds.pt) sizes.
struct VoiceConfig {
  int32_t n_cond_prompt_tokens = 0, n_prompt_tokens = 0, n_prompt_frames = 0;
};

// Reference `generate` defaults and pipeline constants.
struct PipelineConfig {
  int32_t sample_rate = 24000, s3_sample_rate = 16000, token_rate = 25;
  int32_t samples_per_token = 960, trim_fade_samples = 480;
  float enc_cond_seconds = 6, dec_cond_seconds = 10;
  int32_t n_silence_tokens = 0;  // appended after T3 (turbo: 3)
  bool tail_trim = false;        // mtl: drop the last token's audio
  bool norm_loudness = false;
  float loudness_target = -27;
  // sampler
  float temperature = 0.8f, top_p = 1.0f, min_p = 0.0f, repetition_penalty = 1.2f;
  int32_t top_k = 0;
  float cfg_weight = 0, exaggeration = 0;
  int32_t max_new_tokens = 1000;
  std::string sampler_order;  // "turbo" | "llama" (see docs/gguf-format.md)
};

struct ModelConfig {
  Variant variant = Variant::Turbo;
  int32_t format_version = kConfigFormatVersion;
  T3Config t3;
  VeConfig ve;
  CampplusConfig campplus;
  S3TokConfig s3tok;
  FlowConfig flow;
  CfmConfig cfm;
  HiftConfig hift;
  VoiceConfig voice;
  PipelineConfig pipeline;
  std::vector<std::string> languages;  // mtl: the 23 codes; turbo: {"en"}
};

// Upstream constants for a variant (every field that tensor shapes cannot tell).
ModelConfig default_config(Variant v);

// Visits every metadata field as (key, value&); used by write and read alike.
struct ConfigVisitor {
  virtual ~ConfigVisitor() = default;
  virtual void i32(const char* key, int32_t& v) = 0;
  virtual void f32(const char* key, float& v) = 0;
  virtual void boolean(const char* key, bool& v) = 0;
  virtual void str(const char* key, std::string& v) = 0;
  virtual void i32_array(const char* key, std::vector<int32_t>& v) = 0;
  virtual void str_array(const char* key, std::vector<std::string>& v) = 0;
};
void visit_config(ModelConfig& c, ConfigVisitor& v);

void write_config(const ModelConfig& c, GgufWriter& w);
// Throws cbx::Error naming the file and key when a key is missing or ill-typed.
ModelConfig read_config(const GgufFile& f);

// ---- tensor table ----
enum class TensorClass {
  Matmul,     // 2-D Linear weight [out, in]
  Head,       // output projection producing logits (kept at >= Q8_0)
  Embedding,  // lookup table [rows, dim]
  Conv,       // convolution weight [out, in, k...] (ConvTranspose: [in, out, k])
  Vector,     // norms, biases, BN scale/shift, Snake alphas, small params: always F32
  Data,       // built-in voice (F32 / I32)
};
const char* tensor_class_name(TensorClass r);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  TensorClass role = TensorClass::Vector;
  bool is_int = false;  // I32 data (token ids)
};

// Every tensor a converted GGUF holds, in file order.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c);

// Loader-side layout check: f must hold exactly the tensors of model_tensor_specs(c),
// with those shapes and a dtype the role allows (Vector/Data: F32, ids: I32, others:
// F32/F16/BF16/Q8_0/Q4_0/Q4_K). Returns one message per problem (empty = OK).
std::vector<std::string> check_model_tensors(const GgufFile& f, const ModelConfig& c);

}  // namespace cbx
