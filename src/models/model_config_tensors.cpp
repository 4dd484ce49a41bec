// The GGUF tensor table of a Chatterbox model, derived from its ModelConfig. Names are
// the upstream PyTorch state-dict keys under a component prefix (docs/gguf-format.md):
//   t3.*        <- t3_*.safetensors            ve.*       <- ve.safetensors / ve.pt
//   s3tok.*     <- s3gen: tokenizer.*          campplus.* <- s3gen: speaker_encoder.{head,xvector}.*
//   flow.*      <- s3gen: flow.* (encoder...)  cfm.*      <- s3gen: flow.decoder.estimator.*
//   hift.*      <- s3gen: mel2wav.*            voice.*    <- conds.pt
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"

namespace cbx {

namespace {

using R = TensorClass;

struct Table {
  std::vector<TensorSpec> specs;
  void add(std::string name, std::vector<int64_t> shape, R role, bool is_int = false) {
    CBX_ASSERT(name.size() < 64);  // GGML_MAX_NAME compatible
    for (int64_t d : shape) CBX_CHECK(d > 0, "tensor table: '%s' has a dimension %lld", name.c_str(), (long long)d);
    specs.push_back({std::move(name), std::move(shape), role, is_int});
  }
  // Linear layer: weight [out, in] (+ bias [out]).
  void linear(const std::string& p, int64_t out, int64_t in, bool bias = true, R role = R::Matmul) {
    add(p + ".weight", {out, in}, role);
    if (bias) add(p + ".bias", {out}, R::Vector);
  }
  void norm(const std::string& p, int64_t n, bool bias = true) {
    add(p + ".weight", {n}, R::Vector);
    if (bias) add(p + ".bias", {n}, R::Vector);
  }
  void conv1d(const std::string& p, int64_t out, int64_t in, int64_t k, bool bias = true) {
    add(p + ".weight", {out, in, k}, R::Conv);
    if (bias) add(p + ".bias", {out}, R::Vector);
  }
  // Folded eval-mode BatchNorm: y = x * scale + shift.
  void bn(const std::string& p, int64_t n) {
    add(p + ".scale", {n}, R::Vector);
    add(p + ".shift", {n}, R::Vector);
  }
};

std::string idx(const std::string& p, int i) { return p + "." + std::to_string(i); }

void t3_specs(const T3Config& t, Table& tb) {
  const int64_t d = t.n_embd;
  if (t.arch == "gpt2") {
    tb.add("t3.tfmr.wpe.weight", {t.n_ctx, d}, R::Embedding);
    for (int i = 0; i < t.n_layer; ++i) {
      std::string p = idx("t3.tfmr.h", i);
      tb.norm(p + ".ln_1", d);
      tb.linear(p + ".attn.c_attn", 3 * d, d);  // rows q | k | v
      tb.linear(p + ".attn.c_proj", d, d);
      tb.norm(p + ".ln_2", d);
      tb.linear(p + ".mlp.c_fc", t.n_ff, d);
      tb.linear(p + ".mlp.c_proj", d, t.n_ff);
    }
    tb.norm("t3.tfmr.ln_f", d);
  } else if (t.arch == "llama") {
    const int64_t q = int64_t(t.n_head) * t.head_dim, kv = int64_t(t.n_kv_head) * t.head_dim;
    for (int i = 0; i < t.n_layer; ++i) {
      std::string p = idx("t3.tfmr.layers", i);
      tb.linear(p + ".self_attn.q_proj", q, d, false);
      tb.linear(p + ".self_attn.k_proj", kv, d, false);
      tb.linear(p + ".self_attn.v_proj", kv, d, false);
      tb.linear(p + ".self_attn.o_proj", d, q, false);
      tb.linear(p + ".mlp.gate_proj", t.n_ff, d, false);
      tb.linear(p + ".mlp.up_proj", t.n_ff, d, false);
      tb.linear(p + ".mlp.down_proj", d, t.n_ff, false);
      tb.norm(p + ".input_layernorm", d, false);
      tb.norm(p + ".post_attention_layernorm", d, false);
    }
    tb.norm("t3.tfmr.norm", d, false);
  } else {
    fail("tensor table: unknown t3 arch '%s'", t.arch.c_str());
  }
  tb.add("t3.text_emb.weight", {t.text_vocab, d}, R::Embedding);
  tb.add("t3.speech_emb.weight", {t.speech_vocab, d}, R::Embedding);
  if (t.learned_pos_emb) {
    tb.add("t3.text_pos_emb.emb.weight", {int64_t(t.max_text_tokens) + 2, d}, R::Embedding);
    tb.add("t3.speech_pos_emb.emb.weight", {int64_t(t.max_speech_tokens) + 4, d}, R::Embedding);
  }
  tb.linear("t3.speech_head", t.speech_vocab, d, t.speech_head_bias, R::Head);
  tb.linear("t3.cond_enc.spkr_enc", d, t.speaker_embed_size);
  if (t.emotion_adv) tb.add("t3.cond_enc.emotion_adv_fc.weight", {d, 1}, R::Vector);
  if (t.perceiver) {
    tb.add("t3.cond_enc.perceiver.pre_attention_query", {1, t.perceiver_n_query, d}, R::Vector);
    tb.norm("t3.cond_enc.perceiver.attn.norm", d);
    for (const char* n : {"to_q", "to_k", "to_v", "proj_out"})
      tb.linear(std::string("t3.cond_enc.perceiver.attn.") + n, d, d);
  }
}

void ve_specs(const VeConfig& v, Table& tb) {
  const int64_t g = 4 * int64_t(v.n_hidden);  // gates i, f, g, o
  for (int l = 0; l < v.n_layer; ++l) {
    std::string s = std::to_string(l);
    tb.add("ve.lstm.weight_ih_l" + s, {g, l == 0 ? v.n_mels : v.n_hidden}, R::Matmul);
    tb.add("ve.lstm.weight_hh_l" + s, {g, v.n_hidden}, R::Matmul);
    tb.add("ve.lstm.bias_ih_l" + s, {g}, R::Vector);
    tb.add("ve.lstm.bias_hh_l" + s, {g}, R::Vector);
  }
  tb.linear("ve.proj", v.embed_size, v.n_hidden);
  tb.add("ve.similarity_weight", {1}, R::Vector);
  tb.add("ve.similarity_bias", {1}, R::Vector);
}

void campplus_specs(const CampplusConfig& k, Table& tb) {
  const int64_t m = k.head_channels;
  auto conv2d = [&](const std::string& p, int64_t out, int64_t in, int64_t kk) {
    tb.add(p + ".weight", {out, in, kk, kk}, R::Conv);
  };
  conv2d("campplus.head.conv1", m, 1, 3);
  tb.bn("campplus.head.bn1", m);
  for (int layer = 1; layer <= 2; ++layer) {
    for (int j = 0; j < k.head_blocks; ++j) {
      std::string p = "campplus.head.layer" + std::to_string(layer) + "." + std::to_string(j);
      conv2d(p + ".conv1", m, m, 3);
      tb.bn(p + ".bn1", m);
      conv2d(p + ".conv2", m, m, 3);
      tb.bn(p + ".bn2", m);
      if (j == 0) {  // stride (2, 1): projection shortcut
        conv2d(p + ".shortcut.0", m, m, 1);
        tb.bn(p + ".shortcut.1", m);
      }
    }
  }
  conv2d("campplus.head.conv2", m, m, 3);
  tb.bn("campplus.head.bn2", m);

  tb.conv1d("campplus.tdnn.linear", k.init_channels, m * (k.feat_dim / 8), k.tdnn_kernel, false);
  tb.bn("campplus.tdnn.nonlinear.batchnorm", k.init_channels);
  int64_t ch = k.init_channels;
  CBX_CHECK(k.block_layers.size() == k.block_kernels.size() && k.block_layers.size() == k.block_dilations.size(),
            "tensor table: campplus block lists differ in length");
  for (size_t b = 0; b < k.block_layers.size(); ++b) {
    std::string bp = "campplus.block" + std::to_string(b + 1);
    for (int l = 0; l < k.block_layers[b]; ++l) {
      std::string p = bp + ".tdnnd" + std::to_string(l + 1);
      int64_t in = ch + int64_t(l) * k.growth_rate;
      tb.bn(p + ".nonlinear1.batchnorm", in);
      tb.conv1d(p + ".linear1", k.bn_channels, in, 1, false);
      tb.bn(p + ".nonlinear2.batchnorm", k.bn_channels);
      tb.conv1d(p + ".cam_layer.linear_local", k.growth_rate, k.bn_channels, k.block_kernels[b], false);
      tb.conv1d(p + ".cam_layer.linear1", k.bn_channels / 2, k.bn_channels, 1);
      tb.conv1d(p + ".cam_layer.linear2", k.growth_rate, k.bn_channels / 2, 1);
    }
    ch += int64_t(k.block_layers[b]) * k.growth_rate;
    std::string tp = "campplus.transit" + std::to_string(b + 1);
    tb.bn(tp + ".nonlinear.batchnorm", ch);
    tb.conv1d(tp + ".linear", ch / 2, ch, 1, false);
    ch /= 2;
  }
  tb.bn("campplus.out_nonlinear.batchnorm", ch);
  tb.conv1d("campplus.dense.linear", k.embed_size, 2 * ch, 1, false);
  tb.bn("campplus.dense.nonlinear.batchnorm", k.embed_size);
}

void s3tok_specs(const S3TokConfig& s, Table& tb) {
  const int64_t n = s.n_state;
  tb.conv1d("s3tok.encoder.conv1", n, s.n_mels, 3);
  tb.conv1d("s3tok.encoder.conv2", n, n, 3);
  for (int i = 0; i < s.n_layer; ++i) {
    std::string p = idx("s3tok.encoder.blocks", i);
    tb.linear(p + ".attn.query", n, n);
    tb.linear(p + ".attn.key", n, n, false);
    tb.linear(p + ".attn.value", n, n);
    tb.linear(p + ".attn.out", n, n);
    tb.add(p + ".attn.fsmn_block.weight", {n, 1, s.fsmn_kernel}, R::Conv);  // depthwise
    tb.norm(p + ".attn_ln", n);
    tb.linear(p + ".mlp.0", s.n_ff, n);
    tb.linear(p + ".mlp.2", n, s.n_ff);
    tb.norm(p + ".mlp_ln", n);
  }
  tb.linear("s3tok.quantizer._codebook.project_down", s.codebook_dim, n);
}

void conformer_layer(const FlowConfig& f, const std::string& p, Table& tb) {
  const int64_t d = f.d_model;
  for (const char* n : {"linear_q", "linear_k", "linear_v", "linear_out"}) tb.linear(p + ".self_attn." + n, d, d);
  tb.linear(p + ".self_attn.linear_pos", d, d, false);
  tb.add(p + ".self_attn.pos_bias_u", {f.n_head, f.head_dim}, R::Vector);
  tb.add(p + ".self_attn.pos_bias_v", {f.n_head, f.head_dim}, R::Vector);
  tb.linear(p + ".feed_forward.w_1", f.n_ff, d);
  tb.linear(p + ".feed_forward.w_2", d, f.n_ff);
  tb.norm(p + ".norm_mha", d);
  tb.norm(p + ".norm_ff", d);
}

void flow_specs(const FlowConfig& f, Table& tb) {
  const int64_t d = f.d_model;
  tb.add("flow.input_embedding.weight", {f.vocab, d}, R::Embedding);
  tb.linear("flow.spk_embed_affine_layer", f.mel_dim, f.spk_embed_dim);
  tb.linear("flow.encoder_proj", f.mel_dim, d);
  tb.linear("flow.encoder.embed.out.0", d, d);
  tb.norm("flow.encoder.embed.out.1", d);
  tb.conv1d("flow.encoder.pre_lookahead_layer.conv1", d, d, f.pre_lookahead_len + 1);
  tb.conv1d("flow.encoder.pre_lookahead_layer.conv2", d, d, 3);
  for (int i = 0; i < f.n_encoders; ++i) conformer_layer(f, idx("flow.encoder.encoders", i), tb);
  tb.conv1d("flow.encoder.up_layer.conv", d, d, f.up_kernel);
  tb.linear("flow.encoder.up_embed.out.0", d, d);
  tb.norm("flow.encoder.up_embed.out.1", d);
  for (int i = 0; i < f.n_up_encoders; ++i) conformer_layer(f, idx("flow.encoder.up_encoders", i), tb);
  tb.norm("flow.encoder.after_norm", d);
}

void cfm_resnet(const CfmConfig& m, const std::string& p, int64_t in, int64_t out, Table& tb) {
  tb.conv1d(p + ".block1.block.0", out, in, m.conv_kernel);
  tb.norm(p + ".block1.block.2", out);
  tb.conv1d(p + ".block2.block.0", out, out, m.conv_kernel);
  tb.norm(p + ".block2.block.2", out);
  tb.linear(p + ".mlp.1", out, m.time_emb_dim);
  tb.conv1d(p + ".res_conv", out, in, 1);
}

void cfm_transformers(const CfmConfig& m, const std::string& p, Table& tb) {
  const int64_t c = m.channels, inner = int64_t(m.n_head) * m.head_dim;
  for (int j = 0; j < m.n_blocks; ++j) {
    std::string q = idx(p, j);
    tb.norm(q + ".norm1", c);
    tb.linear(q + ".attn1.to_q", inner, c, false);
    tb.linear(q + ".attn1.to_k", inner, c, false);
    tb.linear(q + ".attn1.to_v", inner, c, false);
    tb.linear(q + ".attn1.to_out.0", c, inner);
    tb.norm(q + ".norm3", c);
    tb.linear(q + ".ff.net.0.proj", m.ff_dim, c);
    tb.linear(q + ".ff.net.2", c, m.ff_dim);
  }
}

void cfm_specs(const CfmConfig& m, Table& tb) {
  const int64_t c = m.channels;
  tb.linear("cfm.time_mlp.linear_1", m.time_emb_dim, m.time_sin_dim);
  tb.linear("cfm.time_mlp.linear_2", m.time_emb_dim, m.time_emb_dim);
  if (m.meanflow) tb.linear("cfm.time_embed_mixer", m.time_emb_dim, 2 * int64_t(m.time_emb_dim), false);
  cfm_resnet(m, "cfm.down_blocks.0.0", m.in_channels, c, tb);
  cfm_transformers(m, "cfm.down_blocks.0.1", tb);
  tb.conv1d("cfm.down_blocks.0.2", c, c, m.conv_kernel);
  for (int i = 0; i < m.n_mid_blocks; ++i) {
    std::string p = idx("cfm.mid_blocks", i);
    cfm_resnet(m, p + ".0", c, c, tb);
    cfm_transformers(m, p + ".1", tb);
  }
  cfm_resnet(m, "cfm.up_blocks.0.0", 2 * c, c, tb);
  cfm_transformers(m, "cfm.up_blocks.0.1", tb);
  tb.conv1d("cfm.up_blocks.0.2", c, c, m.conv_kernel);
  tb.conv1d("cfm.final_block.block.0", c, c, m.conv_kernel);
  tb.norm("cfm.final_block.block.2", c);
  tb.conv1d("cfm.final_proj", m.out_channels, c, 1);
}

void hift_resblock(const std::string& p, int64_t ch, int64_t k, size_t n_dil, Table& tb) {
  for (size_t j = 0; j < n_dil; ++j) {
    tb.conv1d(idx(p + ".convs1", int(j)), ch, ch, k);
    tb.conv1d(idx(p + ".convs2", int(j)), ch, ch, k);
  }
  for (size_t j = 0; j < n_dil; ++j) tb.add(idx(p + ".activations1", int(j)) + ".alpha", {ch}, R::Vector);
  for (size_t j = 0; j < n_dil; ++j) tb.add(idx(p + ".activations2", int(j)) + ".alpha", {ch}, R::Vector);
}

void hift_specs(const HiftConfig& h, Table& tb) {
  const size_t nu = h.upsample_rates.size();
  CBX_CHECK(nu == h.upsample_kernels.size() && nu == h.source_resblock_kernels.size(),
            "tensor table: hift upsample lists differ in length");
  tb.linear("hift.m_source.l_linear", 1, h.nb_harmonics + 1);
  tb.conv1d("hift.conv_pre", h.base_channels, h.in_channels, h.conv_pre_kernel);
  for (size_t i = 0; i < nu; ++i) {  // ConvTranspose1d weight: [in, out, k]
    int64_t in = int64_t(h.base_channels) >> i, out = int64_t(h.base_channels) >> (i + 1);
    tb.add(idx("hift.ups", int(i)) + ".weight", {in, out, h.upsample_kernels[i]}, R::Conv);
    tb.add(idx("hift.ups", int(i)) + ".bias", {out}, R::Vector);
  }
  // source_downs[i] downsamples the source STFT by the product of the remaining rates.
  for (size_t i = 0; i < nu; ++i) {
    int64_t u = 1;
    for (size_t j = i + 1; j < nu; ++j) u *= h.upsample_rates[j];
    int64_t out = int64_t(h.base_channels) >> (i + 1);
    tb.conv1d(idx("hift.source_downs", int(i)), out, h.n_fft + 2, u == 1 ? 1 : 2 * u);
  }
  for (size_t i = 0; i < nu; ++i)
    hift_resblock(idx("hift.source_resblocks", int(i)), int64_t(h.base_channels) >> (i + 1),
                  h.source_resblock_kernels[i], h.source_resblock_dilations.size(), tb);
  const size_t nk = h.resblock_kernels.size();
  for (size_t i = 0; i < nu; ++i)
    for (size_t j = 0; j < nk; ++j)
      hift_resblock(idx("hift.resblocks", int(i * nk + j)), int64_t(h.base_channels) >> (i + 1), h.resblock_kernels[j],
                    h.resblock_dilations.size(), tb);
  tb.conv1d("hift.conv_post", h.n_fft + 2, int64_t(h.base_channels) >> nu, 7);
  for (int l = 0; l < h.f0_layers; ++l)
    tb.conv1d(idx("hift.f0_predictor.condnet", 2 * l), h.f0_channels, l == 0 ? h.in_channels : h.f0_channels, 3);
  tb.linear("hift.f0_predictor.classifier", 1, h.f0_channels);
}

void voice_specs(const ModelConfig& c, Table& tb) {
  const VoiceConfig& v = c.voice;
  tb.add("voice.speaker_emb", {c.t3.speaker_embed_size}, R::Data);
  tb.add("voice.cond_prompt_tokens", {v.n_cond_prompt_tokens}, R::Data, true);
  tb.add("voice.emotion_adv", {1}, R::Data);
  tb.add("voice.prompt_token", {v.n_prompt_tokens}, R::Data, true);
  tb.add("voice.prompt_feat", {v.n_prompt_frames, c.flow.mel_dim}, R::Data);
  tb.add("voice.embedding", {c.flow.spk_embed_dim}, R::Data);
}

}  // namespace

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  Table tb;
  t3_specs(c.t3, tb);
  ve_specs(c.ve, tb);
  s3tok_specs(c.s3tok, tb);
  campplus_specs(c.campplus, tb);
  flow_specs(c.flow, tb);
  cfm_specs(c.cfm, tb);
  hift_specs(c.hift, tb);
  voice_specs(c, tb);
  return std::move(tb.specs);
}

std::vector<std::string> check_model_tensors(const GgufFile& f, const ModelConfig& c) {
  std::vector<std::string> problems;
  std::map<std::string, const GgufTensorInfo*> have;
  for (const GgufTensorInfo& t : f.tensors()) have[t.name] = &t;
  auto shape_str = [](const int64_t* s, size_t n) {
    std::string r = "[";
    for (size_t i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  };
  for (const TensorSpec& s : model_tensor_specs(c)) {
    auto it = have.find(s.name);
    if (it == have.end()) {
      problems.push_back("missing tensor '" + s.name + "'");
      continue;
    }
    const GgufTensorInfo& t = *it->second;
    have.erase(it);
    if (size_t(t.ndim) != s.shape.size() || !std::equal(s.shape.begin(), s.shape.end(), t.shape))
      problems.push_back("tensor '" + s.name + "' has shape " + shape_str(t.shape, size_t(t.ndim)) + ", expected " +
                         shape_str(s.shape.data(), s.shape.size()));
    bool ok;
    if (s.is_int)
      ok = t.dtype == DType::I32;
    else if (s.role == TensorClass::Vector || s.role == TensorClass::Data)
      ok = t.dtype == DType::F32;
    else
      ok = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::Q8_0 ||
           t.dtype == DType::Q4_0 || t.dtype == DType::Q4_K;
    if (!ok)
      problems.push_back("tensor '" + s.name + "' (" + tensor_class_name(s.role) + ") has dtype " +
                         dtype_name(t.dtype));
  }
  for (const auto& [name, t] : have) problems.push_back("unexpected tensor '" + name + "'");
  return problems;
}

}  // namespace cbx
