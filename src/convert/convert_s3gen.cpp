// S3Gen checkpoint (s3gen_meanflow.safetensors / s3gen.safetensors / s3gen.pt) and the
// voice encoder (ve.safetensors / ve.pt): hyper-parameters from tensor shapes and the
// upstream-prefix -> GGUF-prefix maps.
#include "convert/convert_internal.h"
#include "core/error.h"

namespace cbx {

namespace {
constexpr int kHeadDim = 64;  // S3 tokenizer (1280 / 20) and CFM attention head size

int32_t i32(int64_t v) { return int32_t(v); }
}  // namespace

void infer_ve(const SourceFile& f, VeConfig& v) {
  v.n_mels = i32(f.dim("lstm.weight_ih_l0", 1));
  v.n_hidden = i32(f.dim("lstm.weight_hh_l0", 1));
  v.n_layer = count_indexed(f, "lstm.weight_hh_l", "");
  v.embed_size = i32(f.dim("proj.weight", 0));
  CBX_CHECK(f.dim("lstm.weight_ih_l0", 0) == 4 * int64_t(v.n_hidden),
            "%s: lstm.weight_ih_l0 has %lld rows, expected 4 x %d gates", f.file().c_str(),
            (long long)f.dim("lstm.weight_ih_l0", 0), v.n_hidden);
}

void infer_s3gen(const SourceFile& f, ModelConfig& c) {
  const char* fn = f.file().c_str();
  // ---- S3 tokenizer ----
  S3TokConfig& s = c.s3tok;
  s.n_state = i32(f.dim("tokenizer.encoder.conv1.weight", 0));
  s.n_mels = i32(f.dim("tokenizer.encoder.conv1.weight", 1));
  s.n_layer = count_indexed(f, "tokenizer.encoder.blocks.", ".attn.query.weight");
  s.n_ff = i32(f.dim("tokenizer.encoder.blocks.0.mlp.0.weight", 0));
  s.fsmn_kernel = i32(f.dim("tokenizer.encoder.blocks.0.attn.fsmn_block.weight", 2));
  s.codebook_dim = i32(f.dim("tokenizer.quantizer._codebook.project_down.weight", 0));
  CBX_CHECK(s.n_state % kHeadDim == 0, "%s: S3 tokenizer width %d not a multiple of %d", fn, s.n_state, kHeadDim);
  s.n_head = s.n_state / kHeadDim;

  // ---- CAMPPlus ----
  CampplusConfig& k = c.campplus;
  const std::string cp = "speaker_encoder.";
  k.head_channels = i32(f.dim(cp + "head.conv1.weight", 0));
  k.head_blocks = count_indexed(f, cp + "head.layer1.", ".conv1.weight");
  k.init_channels = i32(f.dim(cp + "xvector.tdnn.linear.weight", 0));
  k.tdnn_kernel = i32(f.dim(cp + "xvector.tdnn.linear.weight", 2));
  k.feat_dim = i32(f.dim(cp + "xvector.tdnn.linear.weight", 1) / k.head_channels * 8);
  k.growth_rate = i32(f.dim(cp + "xvector.block1.tdnnd1.cam_layer.linear_local.weight", 0));
  k.bn_channels = i32(f.dim(cp + "xvector.block1.tdnnd1.linear1.weight", 0));
  k.block_layers.clear();
  k.block_kernels.clear();
  const std::vector<int32_t> dil = k.block_dilations;  // not stored: (1, 2, 2) upstream
  for (int b = 1; f.has(cp + "xvector.block" + std::to_string(b) + ".tdnnd1.linear1.weight"); ++b) {
    std::string bp = cp + "xvector.block" + std::to_string(b) + ".tdnnd";
    int n = 0;  // tdnnd layers are numbered from 1
    while (f.has(bp + std::to_string(n + 1) + ".linear1.weight")) ++n;
    k.block_layers.push_back(n);
    k.block_kernels.push_back(i32(f.dim(bp + "1.cam_layer.linear_local.weight", 2)));
  }
  CBX_CHECK(k.block_layers.size() == dil.size(), "%s: CAMPPlus has %zu dense blocks, expected %zu", fn,
            k.block_layers.size(), dil.size());
  k.embed_size = i32(f.dim(cp + "xvector.dense.linear.weight", 0));

  // ---- flow front + encoder ----
  FlowConfig& w = c.flow;
  w.vocab = i32(f.dim("flow.input_embedding.weight", 0));
  w.d_model = i32(f.dim("flow.input_embedding.weight", 1));
  w.mel_dim = i32(f.dim("flow.encoder_proj.weight", 0));
  w.spk_embed_dim = i32(f.dim("flow.spk_embed_affine_layer.weight", 1));
  w.n_head = i32(f.dim("flow.encoder.encoders.0.self_attn.pos_bias_u", 0));
  w.head_dim = i32(f.dim("flow.encoder.encoders.0.self_attn.pos_bias_u", 1));
  w.n_ff = i32(f.dim("flow.encoder.encoders.0.feed_forward.w_1.weight", 0));
  w.n_encoders = count_indexed(f, "flow.encoder.encoders.", ".norm_mha.weight");
  w.n_up_encoders = count_indexed(f, "flow.encoder.up_encoders.", ".norm_mha.weight");
  w.pre_lookahead_len = i32(f.dim("flow.encoder.pre_lookahead_layer.conv1.weight", 2)) - 1;
  w.up_kernel = i32(f.dim("flow.encoder.up_layer.conv.weight", 2));
  CBX_CHECK(int64_t(w.n_head) * w.head_dim == w.d_model, "%s: flow encoder %d heads x %d != width %d", fn, w.n_head,
            w.head_dim, w.d_model);

  // ---- CFM estimator ----
  CfmConfig& m = c.cfm;
  const std::string e = "flow.decoder.estimator.";
  m.in_channels = i32(f.dim(e + "down_blocks.0.0.block1.block.0.weight", 1));
  m.channels = i32(f.dim(e + "down_blocks.0.0.block1.block.0.weight", 0));
  m.conv_kernel = i32(f.dim(e + "down_blocks.0.0.block1.block.0.weight", 2));
  m.out_channels = i32(f.dim(e + "final_proj.weight", 0));
  m.time_emb_dim = i32(f.dim(e + "time_mlp.linear_1.weight", 0));
  m.time_sin_dim = i32(f.dim(e + "time_mlp.linear_1.weight", 1));
  m.n_blocks = count_indexed(f, e + "down_blocks.0.1.", ".norm1.weight");
  m.n_mid_blocks = count_indexed(f, e + "mid_blocks.", ".0.block1.block.0.weight");
  int64_t inner = f.dim(e + "down_blocks.0.1.0.attn1.to_q.weight", 0);
  CBX_CHECK(inner % kHeadDim == 0, "%s: CFM attention width %lld not a multiple of %d", fn, (long long)inner, kHeadDim);
  m.head_dim = kHeadDim;
  m.n_head = i32(inner / kHeadDim);
  m.ff_dim = i32(f.dim(e + "down_blocks.0.1.0.ff.net.0.proj.weight", 0));
  bool meanflow = f.has(e + "time_embed_mixer.weight");
  if (meanflow != m.meanflow) {
    // The solver follows the weights: a mean-flow estimator needs the 2-step Euler solver.
    m.meanflow = meanflow;
    m.n_timesteps = meanflow ? 2 : 10;
    m.t_scheduler = meanflow ? "linear" : "cosine";
    m.cfg_rate = meanflow ? 0.0f : 0.7f;
  }

  // ---- HiFT ----
  HiftConfig& h = c.hift;
  const std::string v = "mel2wav.";
  auto wshape = [&](const std::string& base) -> const std::vector<int64_t>& {
    for (const char* sfx : {".parametrizations.weight.original1", ".weight_v", ".weight"})
      if (f.has(base + sfx)) return f.shape(base + sfx);
    return f.shape(base + ".parametrizations.weight.original1");  // throws naming it
  };
  auto count_wn = [&](const std::string& prefix) {
    int n = 0;
    for (;; ++n) {
      std::string b = prefix + std::to_string(n);
      if (!f.has(b + ".parametrizations.weight.original1") && !f.has(b + ".weight_v") && !f.has(b + ".weight")) break;
    }
    return n;
  };
  h.base_channels = i32(wshape(v + "conv_pre")[0]);
  h.in_channels = i32(wshape(v + "conv_pre")[1]);
  h.conv_pre_kernel = i32(wshape(v + "conv_pre")[2]);
  h.nb_harmonics = i32(f.dim(v + "m_source.l_linear.weight", 1)) - 1;
  h.n_fft = i32(wshape(v + "conv_post")[0]) - 2;
  int n_up = count_wn(v + "ups.");
  CBX_CHECK(n_up == int(h.upsample_rates.size()), "%s: HiFT has %d upsampling layers, expected %zu", fn, n_up,
            h.upsample_rates.size());
  for (int i = 0; i < n_up; ++i) h.upsample_kernels[i] = i32(wshape(v + "ups." + std::to_string(i))[2]);
  int n_res = count_indexed(f, v + "resblocks.", ".activations1.0.alpha");
  CBX_CHECK(n_up > 0 && n_res % n_up == 0, "%s: %d HiFT resblocks for %d upsampling layers", fn, n_res, n_up);
  h.resblock_kernels.resize(size_t(n_res / n_up));
  for (size_t j = 0; j < h.resblock_kernels.size(); ++j)
    h.resblock_kernels[j] = i32(wshape(v + "resblocks." + std::to_string(j) + ".convs1.0")[2]);
  for (int i = 0; i < n_up; ++i)
    h.source_resblock_kernels[i] = i32(wshape(v + "source_resblocks." + std::to_string(i) + ".convs1.0")[2]);
  h.resblock_dilations.resize(size_t(count_wn(v + "resblocks.0.convs1.")));
  h.source_resblock_dilations.resize(size_t(count_wn(v + "source_resblocks.0.convs1.")));
  CBX_CHECK(h.resblock_dilations.size() == 3 && h.source_resblock_dilations.size() == 3,
            "%s: HiFT resblocks have %zu/%zu dilations, expected 3", fn, h.resblock_dilations.size(),
            h.source_resblock_dilations.size());
  h.f0_layers = 0;
  while (true) {
    std::string b = v + "f0_predictor.condnet." + std::to_string(2 * h.f0_layers);
    if (!f.has(b + ".parametrizations.weight.original1") && !f.has(b + ".weight_v") && !f.has(b + ".weight")) break;
    ++h.f0_layers;
  }
  CBX_CHECK(h.f0_layers > 0, "%s: missing tensor 'mel2wav.f0_predictor.condnet.0.*'", fn);
  h.f0_channels = i32(wshape(v + "f0_predictor.condnet.0")[0]);
}

const PrefixMap& s3gen_prefixes() {
  // Longest upstream prefixes first. speaker_encoder.xvector.* loses "xvector." to keep
  // every name under GGML's 64-byte limit (campplus.block2.tdnnd24....running_mean).
  static const PrefixMap m{
      {"flow.decoder.estimator.", "cfm."},
      {"speaker_encoder.xvector.", "campplus."},
      {"speaker_encoder.head.", "campplus.head."},
      {"tokenizer.", "s3tok."},
      {"flow.", "flow."},
      {"mel2wav.", "hift."},
  };
  return m;
}

// Deterministic DSP buffers the runtime computes itself (spec §13.2).
const std::set<std::string>& s3gen_dropped() {
  static const std::set<std::string> s{"tokenizer._mel_filters", "tokenizer.window", "mel2wav.stft_window",
                                       "trim_fade"};
  return s;
}

const PrefixMap& ve_prefixes() {
  static const PrefixMap m{{"", "ve."}};
  return m;
}

}  // namespace cbx
