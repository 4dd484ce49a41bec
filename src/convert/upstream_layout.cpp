// Upstream checkpoint tensor tables. Order = PyTorch state_dict order: a module's own
// parameters, then its buffers, then its children in registration order. Module and file
// references are to resemble-ai/chatterbox src/chatterbox/models/.
#include "convert/upstream_layout.h"

#include "core/error.h"

namespace cbx {
namespace {

using Fn = std::function<void(const UpstreamTensor&)>;
using R = TensorRole;

struct Emit {
  const Fn& fn;
  void t(const std::string& name, std::vector<int64_t> shape, R role, int64_t fan_in = 1, DType dt = DType::F32,
         float value = 0.0f) const {
    UpstreamTensor u;
    u.name = name;
    u.dtype = dt;
    u.shape = std::move(shape);
    u.role = role;
    u.fan_in = fan_in;
    u.value = value;
    fn(u);
  }
  // nn.Linear: weight [out, in]
  void linear(const std::string& p, int64_t out, int64_t in, bool bias = true) const {
    t(p + ".weight", {out, in}, R::Weight, in);
    if (bias) t(p + ".bias", {out}, R::Bias);
  }
  // nn.Conv1d: weight [out, in/groups, k]
  void conv1d(const std::string& p, int64_t out, int64_t in, int64_t k, bool bias = true) const {
    t(p + ".weight", {out, in, k}, R::Weight, in * k);
    if (bias) t(p + ".bias", {out}, R::Bias);
  }
  void conv2d(const std::string& p, int64_t out, int64_t in, int64_t k) const {  // no bias
    t(p + ".weight", {out, in, k, k}, R::Weight, in * k * k);
  }
  void layernorm(const std::string& p, int64_t n) const {
    t(p + ".weight", {n}, R::NormWeight);
    t(p + ".bias", {n}, R::NormBias);
  }
  void batchnorm(const std::string& p, int64_t n, bool affine = true) const {
    if (affine) {
      t(p + ".weight", {n}, R::BnWeight);
      t(p + ".bias", {n}, R::BnBias);
    }
    t(p + ".running_mean", {n}, R::BnMean);
    t(p + ".running_var", {n}, R::BnVar);
    t(p + ".num_batches_tracked", {}, R::BnCount, 1, DType::I64);
  }
  // torch.nn.utils.parametrizations.weight_norm(dim=0) on a Conv1d: the module keeps its
  // bias as an own parameter (saved first); g = original0 [out, 1, 1], v = original1.
  void wn_conv1d(const std::string& p, int64_t out, int64_t in, int64_t k) const {
    t(p + ".bias", {out}, R::Bias);
    t(p + ".parametrizations.weight.original0", {out, 1, 1}, R::WnG);
    t(p + ".parametrizations.weight.original1", {out, in, k}, R::WnV, in * k);
  }
  // ConvTranspose1d weight is [in, out, k]; dim=0 makes g per *input* channel.
  void wn_conv_transpose1d(const std::string& p, int64_t in, int64_t out, int64_t k) const {
    t(p + ".bias", {out}, R::Bias);
    t(p + ".parametrizations.weight.original0", {in, 1, 1}, R::WnG);
    t(p + ".parametrizations.weight.original1", {in, out, k}, R::WnV, in * k);
  }
};

std::string cat(const std::string& p, int64_t i) { return p + "." + std::to_string(i); }

// ---- T3 (t3/t3.py, t3/modules/cond_enc.py, perceiver.py; HF GPT2Model / LlamaModel) ----

void t3_gpt2(const Emit& e, const UpstreamDims& d) {
  const int64_t D = d.t3_dim;
  e.t("tfmr.wte.weight", {d.text_vocab, D}, R::Embedding);
  e.t("tfmr.wpe.weight", {d.gpt2_positions, D}, R::PosEmbedding);
  for (int64_t i = 0; i < d.t3_layers; ++i) {
    const std::string p = cat("tfmr.h", i);
    e.layernorm(p + ".ln_1", D);
    // HF Conv1D: weight [in, out]
    e.t(p + ".attn.c_attn.weight", {D, 3 * D}, R::Weight, D);
    e.t(p + ".attn.c_attn.bias", {3 * D}, R::Bias);
    e.t(p + ".attn.c_proj.weight", {D, D}, R::Weight, D);
    e.t(p + ".attn.c_proj.bias", {D}, R::Bias);
    e.layernorm(p + ".ln_2", D);
    e.t(p + ".mlp.c_fc.weight", {D, d.t3_ffn}, R::Weight, D);
    e.t(p + ".mlp.c_fc.bias", {d.t3_ffn}, R::Bias);
    e.t(p + ".mlp.c_proj.weight", {d.t3_ffn, D}, R::Weight, d.t3_ffn);
    e.t(p + ".mlp.c_proj.bias", {D}, R::Bias);
  }
  e.layernorm("tfmr.ln_f", D);
  e.linear("cond_enc.spkr_enc", D, d.speaker_dim);
  e.t("text_emb.weight", {d.text_vocab, D}, R::Embedding);
  e.t("speech_emb.weight", {d.speech_vocab, D}, R::Embedding);
  e.linear("text_head", d.text_vocab, D, false);
  e.linear("speech_head", d.speech_vocab, D, true);  // GPT variants: with bias
}

void t3_llama(const Emit& e, const UpstreamDims& d) {
  const int64_t D = d.t3_dim;
  e.t("tfmr.embed_tokens.weight", {d.llama_vocab, D}, R::Embedding);
  for (int64_t i = 0; i < d.t3_layers; ++i) {
    const std::string p = cat("tfmr.layers", i);
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) e.linear(p + ".self_attn." + n, D, D, false);
    e.linear(p + ".mlp.gate_proj", d.t3_ffn, D, false);
    e.linear(p + ".mlp.up_proj", d.t3_ffn, D, false);
    e.linear(p + ".mlp.down_proj", D, d.t3_ffn, false);
    e.t(p + ".input_layernorm.weight", {D}, R::NormWeight);
    e.t(p + ".post_attention_layernorm.weight", {D}, R::NormWeight);
  }
  e.t("tfmr.norm.weight", {D}, R::NormWeight);
  e.linear("cond_enc.spkr_enc", D, d.speaker_dim);
  e.t("cond_enc.emotion_adv_fc.weight", {D, 1}, R::Weight, 1);
  e.t("cond_enc.perceiver.pre_attention_query", {1, d.perceiver_queries, D}, R::Query);
  e.layernorm("cond_enc.perceiver.attn.norm", D);
  for (const char* n : {"to_q", "to_k", "to_v", "proj_out"})
    e.linear(std::string("cond_enc.perceiver.attn.") + n, D, D);
  e.t("text_emb.weight", {d.text_vocab, D}, R::Embedding);
  e.t("speech_emb.weight", {d.speech_vocab, D}, R::Embedding);
  e.t("text_pos_emb.emb.weight", {d.text_pos, D}, R::PosEmbedding);
  e.t("speech_pos_emb.emb.weight", {d.speech_pos, D}, R::PosEmbedding);
  e.linear("text_head", d.text_vocab, D, false);
  e.linear("speech_head", d.speech_vocab, D, false);  // Llama variants: no bias
}

// ---- VE (voice_encoder/voice_encoder.py) ----

void voice_encoder(const Emit& e, const UpstreamDims& d) {
  e.t("similarity_weight", {1}, R::Constant, 1, DType::F32, 10.0f);
  e.t("similarity_bias", {1}, R::Constant, 1, DType::F32, -5.0f);
  const int64_t H = d.ve_hidden;
  for (int64_t l = 0; l < d.ve_layers; ++l) {
    const std::string s = "_l" + std::to_string(l);
    const int64_t in = l == 0 ? d.ve_mels : H;
    e.t("lstm.weight_ih" + s, {4 * H, in}, R::Weight, H);  // torch init U(+-1/sqrt(H))
    e.t("lstm.weight_hh" + s, {4 * H, H}, R::Weight, H);
    e.t("lstm.bias_ih" + s, {4 * H}, R::Bias);
    e.t("lstm.bias_hh" + s, {4 * H}, R::Bias);
  }
  e.linear("proj", d.speaker_dim, H);
}

// ---- S3Gen ----

// S3TokenizerV2 (S3Tokenizer model_v2.py) + chatterbox's two persistent buffers.
void s3_tokenizer(const Emit& e, const UpstreamDims& d) {
  e.t("tokenizer._mel_filters", {d.tok_mels, 201}, R::MelFilters);
  e.t("tokenizer.window", {400}, R::HannWindow);
  const int64_t C = d.tok_state;
  e.conv1d("tokenizer.encoder.conv1", C, d.tok_mels, 3);
  e.conv1d("tokenizer.encoder.conv2", C, C, 3);
  for (int64_t i = 0; i < d.tok_layers; ++i) {
    const std::string p = cat("tokenizer.encoder.blocks", i);
    e.linear(p + ".attn.query", C, C);
    e.linear(p + ".attn.key", C, C, false);
    e.linear(p + ".attn.value", C, C);
    e.linear(p + ".attn.out", C, C);
    e.conv1d(p + ".attn.fsmn_block", C, 1, d.tok_fsmn_kernel, false);  // depthwise
    e.layernorm(p + ".attn_ln", C);
    e.linear(p + ".mlp.0", 4 * C, C);
    e.linear(p + ".mlp.2", C, 4 * C);
    e.layernorm(p + ".mlp_ln", C);
  }
  e.linear("tokenizer.quantizer._codebook.project_down", 8, C);
}

// CAMPPlus (s3gen/xvector.py), config_str "batchnorm-relu".
void campplus(const Emit& e, const UpstreamDims& d) {
  const std::string h = "speaker_encoder.head";
  const int64_t m = d.cam_m;
  e.conv2d(h + ".conv1", m, 1, 3);
  e.batchnorm(h + ".bn1", m);
  for (const char* layer : {".layer1", ".layer2"}) {
    for (int b = 0; b < 2; ++b) {
      const std::string p = h + layer + "." + std::to_string(b);
      e.conv2d(p + ".conv1", m, m, 3);
      e.batchnorm(p + ".bn1", m);
      e.conv2d(p + ".conv2", m, m, 3);
      e.batchnorm(p + ".bn2", m);
      if (b == 0) {  // stride (2, 1) -> projection shortcut
        e.conv2d(p + ".shortcut.0", m, m, 1);
        e.batchnorm(p + ".shortcut.1", m);
      }
    }
  }
  e.conv2d(h + ".conv2", m, m, 3);
  e.batchnorm(h + ".bn2", m);

  const std::string x = "speaker_encoder.xvector";
  const int64_t head_out = m * (80 / 8);
  e.conv1d(x + ".tdnn.linear", d.cam_init, head_out, 5, false);
  e.batchnorm(x + ".tdnn.nonlinear.batchnorm", d.cam_init);
  int64_t ch = d.cam_init;
  for (int b = 0; b < 3; ++b) {
    const std::string blk = x + ".block" + std::to_string(b + 1);
    for (int64_t i = 0; i < d.cam_layers[b]; ++i) {
      const std::string p = blk + ".tdnnd" + std::to_string(i + 1);
      const int64_t in = ch + i * d.cam_growth;
      e.batchnorm(p + ".nonlinear1.batchnorm", in);
      e.conv1d(p + ".linear1", d.cam_bn, in, 1, false);
      e.batchnorm(p + ".nonlinear2.batchnorm", d.cam_bn);
      e.conv1d(p + ".cam_layer.linear_local", d.cam_growth, d.cam_bn, 3, false);
      e.conv1d(p + ".cam_layer.linear1", d.cam_bn / 2, d.cam_bn, 1);
      e.conv1d(p + ".cam_layer.linear2", d.cam_growth, d.cam_bn / 2, 1);
    }
    ch += d.cam_layers[b] * d.cam_growth;
    const std::string tr = x + ".transit" + std::to_string(b + 1);
    e.batchnorm(tr + ".nonlinear.batchnorm", ch);
    e.conv1d(tr + ".linear", ch / 2, ch, 1, false);
    ch /= 2;
  }
  e.batchnorm(x + ".out_nonlinear.batchnorm", ch);
  e.conv1d(x + ".dense.linear", d.xvector_dim, 2 * ch, 1, false);
  e.batchnorm(x + ".dense.nonlinear.batchnorm", d.xvector_dim, false);  // affine=False
}

// ConformerEncoderLayer with RelPositionMultiHeadedAttention (no macaron, no conv module).
void conformer_layer(const Emit& e, const std::string& p, const UpstreamDims& d) {
  const int64_t C = d.flow_dim;
  e.t(p + ".self_attn.pos_bias_u", {C / 64, 64}, R::PosBias);
  e.t(p + ".self_attn.pos_bias_v", {C / 64, 64}, R::PosBias);
  for (const char* n : {"linear_q", "linear_k", "linear_v", "linear_out"}) e.linear(p + ".self_attn." + n, C, C);
  e.linear(p + ".self_attn.linear_pos", C, C, false);
  e.linear(p + ".feed_forward.w_1", d.flow_ffn, C);
  e.linear(p + ".feed_forward.w_2", C, d.flow_ffn);
  e.layernorm(p + ".norm_ff", C);
  e.layernorm(p + ".norm_mha", C);
}

void flow_encoder(const Emit& e, const UpstreamDims& d) {
  const std::string p = "flow.encoder";
  const int64_t C = d.flow_dim;
  e.linear(p + ".embed.out.0", C, C);
  e.layernorm(p + ".embed.out.1", C);
  e.layernorm(p + ".after_norm", C);  // registered right after embed
  e.conv1d(p + ".pre_lookahead_layer.conv1", C, C, 4);
  e.conv1d(p + ".pre_lookahead_layer.conv2", C, C, 3);
  for (int64_t i = 0; i < d.flow_blocks; ++i) conformer_layer(e, cat(p + ".encoders", i), d);
  e.conv1d(p + ".up_layer.conv", C, C, 5);
  e.linear(p + ".up_embed.out.0", C, C);
  e.layernorm(p + ".up_embed.out.1", C);
  for (int64_t i = 0; i < d.flow_up_blocks; ++i) conformer_layer(e, cat(p + ".up_encoders", i), d);
}

// CausalResnetBlock1D: mlp = (Mish, Linear); block{1,2} = (CausalConv1d k3, _, LayerNorm, _, Mish).
void resnet_block(const Emit& e, const std::string& p, int64_t in, int64_t out, int64_t tdim) {
  e.linear(p + ".mlp.1", out, tdim);
  e.conv1d(p + ".block1.block.0", out, in, 3);
  e.layernorm(p + ".block1.block.2", out);
  e.conv1d(p + ".block2.block.0", out, out, 3);
  e.layernorm(p + ".block2.block.2", out);
  e.conv1d(p + ".res_conv", out, in, 1);
}

// diffusers-style BasicTransformerBlock (matcha/transformer.py), self-attention only.
void transformer_block(const Emit& e, const std::string& p, const UpstreamDims& d) {
  const int64_t C = d.est_channels;
  e.layernorm(p + ".norm1", C);
  e.linear(p + ".attn1.to_q", d.est_inner, C, false);
  e.linear(p + ".attn1.to_k", d.est_inner, C, false);
  e.linear(p + ".attn1.to_v", d.est_inner, C, false);
  e.linear(p + ".attn1.to_out.0", C, d.est_inner);
  e.layernorm(p + ".norm3", C);
  e.linear(p + ".ff.net.0.proj", 4 * C, C);
  e.linear(p + ".ff.net.2", C, 4 * C);
}

void estimator(const Emit& e, const UpstreamDims& d) {
  const std::string p = "flow.decoder.estimator";
  const int64_t C = d.est_channels, T = 4 * d.est_channels, in = 4 * d.mel_bins;
  e.linear(p + ".time_mlp.linear_1", T, in);
  e.linear(p + ".time_mlp.linear_2", T, T);
  resnet_block(e, p + ".down_blocks.0.0", in, C, T);
  for (int64_t j = 0; j < d.est_tblocks; ++j) transformer_block(e, cat(p + ".down_blocks.0.1", j), d);
  e.conv1d(p + ".down_blocks.0.2", C, C, 3);
  for (int64_t i = 0; i < d.est_mid; ++i) {
    const std::string m = cat(p + ".mid_blocks", i);
    resnet_block(e, m + ".0", C, C, T);
    for (int64_t j = 0; j < d.est_tblocks; ++j) transformer_block(e, cat(m + ".1", j), d);
  }
  resnet_block(e, p + ".up_blocks.0.0", 2 * C, C, T);
  for (int64_t j = 0; j < d.est_tblocks; ++j) transformer_block(e, cat(p + ".up_blocks.0.1", j), d);
  e.conv1d(p + ".up_blocks.0.2", C, C, 3);
  e.conv1d(p + ".final_block.block.0", C, C, 3);
  e.layernorm(p + ".final_block.block.2", C);
  e.conv1d(p + ".final_proj", d.mel_bins, C, 1);
  if (d.meanflow) e.t(p + ".time_embed_mixer.weight", {T, 2 * T}, R::TimeMixer, 2 * T);
}

// HiFT ResBlock: convs1[3], convs2[3] (weight-normed), then Snake alphas.
void hift_resblock(const Emit& e, const std::string& p, int64_t ch, int64_t k) {
  for (int j = 0; j < 3; ++j) e.wn_conv1d(cat(p + ".convs1", j), ch, ch, k);
  for (int j = 0; j < 3; ++j) e.wn_conv1d(cat(p + ".convs2", j), ch, ch, k);
  for (int j = 0; j < 3; ++j) e.t(cat(p + ".activations1", j) + ".alpha", {ch}, R::SnakeAlpha);
  for (int j = 0; j < 3; ++j) e.t(cat(p + ".activations2", j) + ".alpha", {ch}, R::SnakeAlpha);
}

void hift(const Emit& e, const UpstreamDims& d) {
  const std::string p = "mel2wav";
  const int64_t B = d.hift_base, nfft2 = 16 + 2;
  const int64_t up_k[3] = {16, 11, 7};
  const int64_t down_k[3] = {30, 6, 1};  // 2u for cumulative rates 15, 3; 1 for rate 1
  const int64_t src_k[3] = {7, 7, 11};
  const int64_t res_k[3] = {3, 7, 11};
  e.linear(p + ".m_source.l_linear", 1, d.n_harmonics + 1);
  e.wn_conv1d(p + ".conv_pre", B, d.mel_bins, 7);
  for (int i = 0; i < 3; ++i) e.wn_conv_transpose1d(cat(p + ".ups", i), B >> i, B >> (i + 1), up_k[i]);
  for (int i = 0; i < 3; ++i) e.conv1d(cat(p + ".source_downs", i), B >> (i + 1), nfft2, down_k[i]);
  for (int i = 0; i < 3; ++i) hift_resblock(e, cat(p + ".source_resblocks", i), B >> (i + 1), src_k[i]);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) hift_resblock(e, cat(p + ".resblocks", 3 * i + j), B >> (i + 1), res_k[j]);
  e.wn_conv1d(p + ".conv_post", nfft2, B >> 3, 7);
  for (int i = 0; i < 5; ++i)
    e.wn_conv1d(cat(p + ".f0_predictor.condnet", 2 * i), d.f0_channels, i == 0 ? d.mel_bins : d.f0_channels, 3);
  e.linear(p + ".f0_predictor.classifier", 1, d.f0_channels);
}

void s3gen(const Emit& e, const UpstreamDims& d) {
  s3_tokenizer(e, d);
  campplus(e, d);
  e.t("flow.input_embedding.weight", {d.flow_vocab, d.flow_dim}, R::Embedding);
  e.linear("flow.spk_embed_affine_layer", d.mel_bins, d.xvector_dim);
  flow_encoder(e, d);
  e.linear("flow.encoder_proj", d.mel_bins, d.flow_dim);
  estimator(e, d);
  hift(e, d);
}

}  // namespace

UpstreamDims upstream_dims(CkptVariant v, bool tiny) {
  const bool mtl = v == CkptVariant::Mtl;
  UpstreamDims d{};
  d.speech_vocab = mtl ? 8194 : 6563;
  d.gpt2_positions = 8196;
  d.text_pos = 2048 + 2;
  d.speech_pos = 4096 + 4;
  d.llama_vocab = 8;
  d.perceiver_queries = 32;
  d.ve_mels = 40;
  d.ve_layers = 3;
  d.flow_vocab = 6561;
  d.mel_bins = 80;
  d.meanflow = !mtl;
  d.n_harmonics = 8;
  d.tok_mels = 128;
  d.tok_fsmn_kernel = 31;
  const bool nano = v == CkptVariant::Nano;
  if (!tiny) {
    d.t3_layers = mtl ? 30 : nano ? 12 : 24;  // Llama_520M, GPT2_small, GPT2_medium
    d.t3_dim = nano ? 768 : 1024;
    d.t3_ffn = 4 * d.t3_dim;
    d.text_vocab = mtl ? 2454 : 50276;
    d.speaker_dim = 256;
    d.ve_hidden = 256;
    d.flow_dim = 512;
    d.flow_ffn = 2048;
    d.flow_blocks = 6;
    d.flow_up_blocks = 4;
    d.xvector_dim = 192;
    d.est_channels = 256;
    d.est_inner = 512;
    d.est_tblocks = 4;
    d.est_mid = 12;
    d.hift_base = 512;
    d.f0_channels = 512;
    d.cam_m = 32;
    d.cam_init = 128;
    d.cam_growth = 32;
    d.cam_bn = 128;
    d.cam_layers[0] = 12;
    d.cam_layers[1] = 24;
    d.cam_layers[2] = 16;
    d.tok_state = 1280;
    d.tok_layers = 6;
  } else {
    d.t3_layers = nano ? 3 : 2;
    d.t3_dim = nano ? 192 : 128;          // 3 / 2 heads of 64 (Nano differs from Turbo in shape, as at full size)
    d.t3_ffn = mtl ? 384 : 4 * d.t3_dim;  // GPT-2 keeps n_inner = 4 d; Llama uses a non-4x ratio
    d.text_vocab = mtl ? 512 : 1019;      // must match the tiny tokenizer files
    d.speaker_dim = 64;
    d.ve_hidden = 64;
    d.flow_dim = 128;  // 2 heads of 64
    d.flow_ffn = 256;
    d.flow_blocks = 2;
    d.flow_up_blocks = 1;
    d.xvector_dim = 64;
    d.est_channels = 128;
    d.est_inner = 128;  // 2 heads of 64
    d.est_tblocks = 1;
    d.est_mid = 2;
    d.hift_base = 64;
    d.f0_channels = 64;
    d.cam_m = 8;
    d.cam_init = 32;
    d.cam_growth = 16;
    d.cam_bn = 32;
    d.cam_layers[0] = 2;
    d.cam_layers[1] = 2;
    d.cam_layers[2] = 2;
    d.tok_state = 128;  // 2 heads of 64 (RoPE table is fixed at 64 dims)
    d.tok_layers = 2;
  }
  return d;
}

std::string upstream_file_name(CkptFile f, CkptVariant v, int t3_version) {
  const bool mtl = v == CkptVariant::Mtl;
  switch (f) {
    case CkptFile::T3:
      if (v == CkptVariant::Nano) return "t3_nano_v1.safetensors";
      if (!mtl) return "t3_turbo_v1.safetensors";
      CBX_CHECK(t3_version == 2 || t3_version == 3, "upstream_file_name: t3 version %d (2 or 3)", t3_version);
      return "t3_mtl23ls_v" + std::to_string(t3_version) + ".safetensors";
    case CkptFile::S3Gen:
      return mtl ? "s3gen.pt" : "s3gen_meanflow.safetensors";
    case CkptFile::VE:
      return mtl ? "ve.pt" : "ve.safetensors";
  }
  fail("upstream_file_name: bad file kind");
}

bool upstream_file_is_torch_pickle(CkptFile f, CkptVariant v) { return v == CkptVariant::Mtl && f != CkptFile::T3; }

void for_each_upstream_tensor(CkptFile f, CkptVariant v, const UpstreamDims& d, const Fn& fn) {
  Emit e{fn};
  switch (f) {
    case CkptFile::T3:
      if (v != CkptVariant::Mtl)
        t3_gpt2(e, d);
      else
        t3_llama(e, d);
      return;
    case CkptFile::S3Gen:
      s3gen(e, d);
      return;
    case CkptFile::VE:
      voice_encoder(e, d);
      return;
  }
}

}  // namespace cbx
