#include "models/model_config.h"

#include "core/error.h"
#include "core/gguf.h"

namespace cbx {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::Turbo:
      return "turbo";
    case Variant::Nano:
      return "nano";
    case Variant::Mtl:
      return "mtl";
  }
  return "?";
}

Variant variant_from_name(const std::string& s) {
  if (s == "turbo") return Variant::Turbo;
  if (s == "nano") return Variant::Nano;
  if (s == "mtl") return Variant::Mtl;
  fail("unknown chatterbox variant '%s' (expected turbo, nano or mtl)", s.c_str());
}

const char* tensor_class_name(TensorClass r) {
  switch (r) {
    case TensorClass::Matmul:
      return "matmul";
    case TensorClass::Head:
      return "head";
    case TensorClass::Embedding:
      return "embedding";
    case TensorClass::Conv:
      return "conv";
    case TensorClass::Vector:
      return "vector";
    case TensorClass::Data:
      return "data";
  }
  return "?";
}

ModelConfig default_config(Variant v) {
  ModelConfig c;
  c.variant = v;
  T3Config& t = c.t3;
  PipelineConfig& p = c.pipeline;
  if (v == Variant::Mtl) {
    // T3Config.multilingual() + Llama_520M (t3/llama_configs.py)
    t.arch = "llama";
    t.n_layer = 30, t.n_embd = 1024, t.n_head = 16, t.n_kv_head = 16, t.head_dim = 64;
    t.n_ff = 4096, t.n_ctx = 131072;
    t.rope_theta = 500000.0f, t.rope_factor = 8, t.rope_low_freq_factor = 1;
    t.rope_high_freq_factor = 4, t.rope_orig_max_pos = 8192;
    t.text_vocab = 2454, t.speech_vocab = 8194;
    t.cond_prompt_len = 150;
    t.learned_pos_emb = true, t.perceiver = true, t.perceiver_n_query = 32;
    t.perceiver_n_head = 4, t.emotion_adv = true, t.speech_head_bias = false, t.cfg = true;
    c.cfm.meanflow = false, c.cfm.n_timesteps = 10, c.cfm.t_scheduler = "cosine";
    c.cfm.cfg_rate = 0.7f;
    p.enc_cond_seconds = 6, p.n_silence_tokens = 0, p.tail_trim = true;
    p.norm_loudness = false;
    p.temperature = 0.8f, p.top_p = 1.0f, p.min_p = 0.05f, p.repetition_penalty = 1.2f;
    p.top_k = 0, p.cfg_weight = 0.5f, p.exaggeration = 0.5f, p.max_new_tokens = 1000;
    p.sampler_order = "llama";
    c.languages = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                   "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh"};
  } else {
    // tts_turbo.py: GPT2_medium (turbo) / GPT2_small (nano)
    t.arch = "gpt2";
    bool nano = v == Variant::Nano;
    t.n_layer = nano ? 12 : 24, t.n_embd = nano ? 768 : 1024, t.n_head = nano ? 12 : 16;
    t.n_kv_head = t.n_head, t.head_dim = 64, t.n_ff = 4 * t.n_embd, t.n_ctx = 8196;
    t.text_vocab = 50276, t.speech_vocab = 6563;
    t.cond_prompt_len = 375;
    t.learned_pos_emb = false, t.perceiver = false, t.emotion_adv = false;
    t.speech_head_bias = true, t.cfg = false;
    c.cfm.meanflow = true, c.cfm.n_timesteps = 2, c.cfm.t_scheduler = "linear";
    c.cfm.cfg_rate = 0.0f;
    p.enc_cond_seconds = 15, p.n_silence_tokens = 3, p.tail_trim = false;
    p.norm_loudness = true;
    p.temperature = 0.8f, p.top_p = 0.95f, p.min_p = 0.0f, p.repetition_penalty = 1.2f;
    p.top_k = 1000, p.cfg_weight = 0.0f, p.exaggeration = 0.0f, p.max_new_tokens = 1000;
    p.sampler_order = "turbo";
    c.languages = {"en"};
  }
  return c;
}

void visit_config(ModelConfig& c, ConfigVisitor& v) {
  std::string variant = variant_name(c.variant);
  v.str("chatterbox.variant", variant);
  c.variant = variant_from_name(variant);
  v.i32("chatterbox.format_version", c.format_version);
  v.str_array("chatterbox.languages", c.languages);

  T3Config& t = c.t3;
  v.str("chatterbox.t3.arch", t.arch);
  v.i32("chatterbox.t3.n_layer", t.n_layer);
  v.i32("chatterbox.t3.n_embd", t.n_embd);
  v.i32("chatterbox.t3.n_head", t.n_head);
  v.i32("chatterbox.t3.n_kv_head", t.n_kv_head);
  v.i32("chatterbox.t3.head_dim", t.head_dim);
  v.i32("chatterbox.t3.n_ff", t.n_ff);
  v.i32("chatterbox.t3.n_ctx", t.n_ctx);
  v.f32("chatterbox.t3.norm_eps", t.norm_eps);
  v.f32("chatterbox.t3.rope.theta", t.rope_theta);
  v.f32("chatterbox.t3.rope.factor", t.rope_factor);
  v.f32("chatterbox.t3.rope.low_freq_factor", t.rope_low_freq_factor);
  v.f32("chatterbox.t3.rope.high_freq_factor", t.rope_high_freq_factor);
  v.i32("chatterbox.t3.rope.original_max_pos", t.rope_orig_max_pos);
  v.i32("chatterbox.t3.text_vocab_size", t.text_vocab);
  v.i32("chatterbox.t3.speech_vocab_size", t.speech_vocab);
  v.i32("chatterbox.t3.start_text_token", t.start_text_token);
  v.i32("chatterbox.t3.stop_text_token", t.stop_text_token);
  v.i32("chatterbox.t3.start_speech_token", t.start_speech_token);
  v.i32("chatterbox.t3.stop_speech_token", t.stop_speech_token);
  v.i32("chatterbox.t3.max_text_tokens", t.max_text_tokens);
  v.i32("chatterbox.t3.max_speech_tokens", t.max_speech_tokens);
  v.i32("chatterbox.t3.cond_prompt_len", t.cond_prompt_len);
  v.i32("chatterbox.t3.speaker_embed_size", t.speaker_embed_size);
  v.boolean("chatterbox.t3.learned_pos_emb", t.learned_pos_emb);
  v.boolean("chatterbox.t3.perceiver", t.perceiver);
  v.i32("chatterbox.t3.perceiver.n_query", t.perceiver_n_query);
  v.i32("chatterbox.t3.perceiver.n_head", t.perceiver_n_head);
  v.boolean("chatterbox.t3.emotion_adv", t.emotion_adv);
  v.boolean("chatterbox.t3.speech_head_bias", t.speech_head_bias);
  v.boolean("chatterbox.t3.cfg", t.cfg);

  VeConfig& e = c.ve;
  v.i32("chatterbox.ve.n_mels", e.n_mels);
  v.i32("chatterbox.ve.n_hidden", e.n_hidden);
  v.i32("chatterbox.ve.n_layer", e.n_layer);
  v.i32("chatterbox.ve.embed_size", e.embed_size);
  v.i32("chatterbox.ve.sample_rate", e.sample_rate);
  v.i32("chatterbox.ve.n_fft", e.n_fft);
  v.i32("chatterbox.ve.hop", e.hop);
  v.i32("chatterbox.ve.win", e.win);
  v.f32("chatterbox.ve.fmin", e.fmin);
  v.f32("chatterbox.ve.fmax", e.fmax);
  v.i32("chatterbox.ve.partial_frames", e.partial_frames);
  v.f32("chatterbox.ve.partial_rate", e.partial_rate);
  v.f32("chatterbox.ve.min_coverage", e.min_coverage);
  v.boolean("chatterbox.ve.final_relu", e.final_relu);

  CampplusConfig& k = c.campplus;
  v.i32("chatterbox.campplus.feat_dim", k.feat_dim);
  v.i32("chatterbox.campplus.head_channels", k.head_channels);
  v.i32("chatterbox.campplus.head_blocks", k.head_blocks);
  v.i32("chatterbox.campplus.init_channels", k.init_channels);
  v.i32("chatterbox.campplus.tdnn_kernel", k.tdnn_kernel);
  v.i32("chatterbox.campplus.growth_rate", k.growth_rate);
  v.i32("chatterbox.campplus.bn_channels", k.bn_channels);
  v.i32_array("chatterbox.campplus.block_layers", k.block_layers);
  v.i32_array("chatterbox.campplus.block_kernels", k.block_kernels);
  v.i32_array("chatterbox.campplus.block_dilations", k.block_dilations);
  v.i32("chatterbox.campplus.embed_size", k.embed_size);
  v.i32("chatterbox.campplus.seg_len", k.seg_len);
  v.f32("chatterbox.campplus.bn_eps", k.bn_eps);

  S3TokConfig& s = c.s3tok;
  v.i32("chatterbox.s3tok.n_mels", s.n_mels);
  v.i32("chatterbox.s3tok.n_state", s.n_state);
  v.i32("chatterbox.s3tok.n_head", s.n_head);
  v.i32("chatterbox.s3tok.n_layer", s.n_layer);
  v.i32("chatterbox.s3tok.n_ff", s.n_ff);
  v.i32("chatterbox.s3tok.fsmn_kernel", s.fsmn_kernel);
  v.i32("chatterbox.s3tok.codebook_dim", s.codebook_dim);
  v.i32("chatterbox.s3tok.codebook_levels", s.codebook_levels);
  v.f32("chatterbox.s3tok.attn_ln_eps", s.attn_ln_eps);
  v.f32("chatterbox.s3tok.mlp_ln_eps", s.mlp_ln_eps);
  v.f32("chatterbox.s3tok.rope_theta", s.rope_theta);
  v.i32("chatterbox.s3tok.sample_rate", s.sample_rate);
  v.i32("chatterbox.s3tok.n_fft", s.n_fft);
  v.i32("chatterbox.s3tok.hop", s.hop);

  FlowConfig& f = c.flow;
  v.i32("chatterbox.flow.vocab_size", f.vocab);
  v.i32("chatterbox.flow.d_model", f.d_model);
  v.i32("chatterbox.flow.n_head", f.n_head);
  v.i32("chatterbox.flow.head_dim", f.head_dim);
  v.i32("chatterbox.flow.n_ff", f.n_ff);
  v.i32("chatterbox.flow.n_encoders", f.n_encoders);
  v.i32("chatterbox.flow.n_up_encoders", f.n_up_encoders);
  v.i32("chatterbox.flow.mel_dim", f.mel_dim);
  v.i32("chatterbox.flow.spk_embed_dim", f.spk_embed_dim);
  v.i32("chatterbox.flow.token_mel_ratio", f.token_mel_ratio);
  v.i32("chatterbox.flow.pre_lookahead_len", f.pre_lookahead_len);
  v.i32("chatterbox.flow.up_kernel", f.up_kernel);
  v.i32("chatterbox.flow.up_stride", f.up_stride);
  v.f32("chatterbox.flow.layer_ln_eps", f.layer_ln_eps);
  v.f32("chatterbox.flow.ln_eps", f.ln_eps);
  v.i32("chatterbox.flow.silence_token", f.silence_token);

  CfmConfig& m = c.cfm;
  v.i32("chatterbox.cfm.in_channels", m.in_channels);
  v.i32("chatterbox.cfm.out_channels", m.out_channels);
  v.i32("chatterbox.cfm.channels", m.channels);
  v.i32("chatterbox.cfm.conv_kernel", m.conv_kernel);
  v.i32("chatterbox.cfm.n_blocks", m.n_blocks);
  v.i32("chatterbox.cfm.n_mid_blocks", m.n_mid_blocks);
  v.i32("chatterbox.cfm.n_head", m.n_head);
  v.i32("chatterbox.cfm.head_dim", m.head_dim);
  v.i32("chatterbox.cfm.ff_dim", m.ff_dim);
  v.i32("chatterbox.cfm.time_emb_dim", m.time_emb_dim);
  v.i32("chatterbox.cfm.time_sin_dim", m.time_sin_dim);
  v.boolean("chatterbox.cfm.meanflow", m.meanflow);
  v.i32("chatterbox.cfm.n_timesteps", m.n_timesteps);
  v.str("chatterbox.cfm.t_scheduler", m.t_scheduler);
  v.f32("chatterbox.cfm.cfg_rate", m.cfg_rate);

  HiftConfig& h = c.hift;
  v.i32("chatterbox.hift.in_channels", h.in_channels);
  v.i32("chatterbox.hift.base_channels", h.base_channels);
  v.i32("chatterbox.hift.nb_harmonics", h.nb_harmonics);
  v.i32("chatterbox.hift.conv_pre_kernel", h.conv_pre_kernel);
  v.i32_array("chatterbox.hift.upsample_rates", h.upsample_rates);
  v.i32_array("chatterbox.hift.upsample_kernels", h.upsample_kernels);
  v.i32_array("chatterbox.hift.resblock_kernels", h.resblock_kernels);
  v.i32_array("chatterbox.hift.resblock_dilations", h.resblock_dilations);
  v.i32_array("chatterbox.hift.source_resblock_kernels", h.source_resblock_kernels);
  v.i32_array("chatterbox.hift.source_resblock_dilations", h.source_resblock_dilations);
  v.i32("chatterbox.hift.n_fft", h.n_fft);
  v.i32("chatterbox.hift.hop", h.hop);
  v.i32("chatterbox.hift.sample_rate", h.sample_rate);
  v.i32("chatterbox.hift.f0_layers", h.f0_layers);
  v.i32("chatterbox.hift.f0_channels", h.f0_channels);
  v.f32("chatterbox.hift.nsf_alpha", h.nsf_alpha);
  v.f32("chatterbox.hift.nsf_sigma", h.nsf_sigma);
  v.f32("chatterbox.hift.voiced_threshold", h.voiced_threshold);
  v.f32("chatterbox.hift.lrelu_slope", h.lrelu_slope);
  v.f32("chatterbox.hift.audio_limit", h.audio_limit);

  VoiceConfig& o = c.voice;
  v.i32("chatterbox.voice.n_cond_prompt_tokens", o.n_cond_prompt_tokens);
  v.i32("chatterbox.voice.n_prompt_tokens", o.n_prompt_tokens);
  v.i32("chatterbox.voice.n_prompt_frames", o.n_prompt_frames);

  PipelineConfig& p = c.pipeline;
  v.i32("chatterbox.sample_rate", p.sample_rate);
  v.i32("chatterbox.s3_sample_rate", p.s3_sample_rate);
  v.i32("chatterbox.token_rate", p.token_rate);
  v.i32("chatterbox.samples_per_token", p.samples_per_token);
  v.i32("chatterbox.trim_fade_samples", p.trim_fade_samples);
  v.f32("chatterbox.enc_cond_seconds", p.enc_cond_seconds);
  v.f32("chatterbox.dec_cond_seconds", p.dec_cond_seconds);
  v.i32("chatterbox.n_silence_tokens", p.n_silence_tokens);
  v.boolean("chatterbox.tail_trim", p.tail_trim);
  v.boolean("chatterbox.norm_loudness", p.norm_loudness);
  v.f32("chatterbox.loudness_target", p.loudness_target);
  v.f32("chatterbox.sampler.temperature", p.temperature);
  v.f32("chatterbox.sampler.top_p", p.top_p);
  v.f32("chatterbox.sampler.min_p", p.min_p);
  v.f32("chatterbox.sampler.repetition_penalty", p.repetition_penalty);
  v.i32("chatterbox.sampler.top_k", p.top_k);
  v.f32("chatterbox.sampler.cfg_weight", p.cfg_weight);
  v.f32("chatterbox.sampler.exaggeration", p.exaggeration);
  v.i32("chatterbox.sampler.max_new_tokens", p.max_new_tokens);
  v.str("chatterbox.sampler.order", p.sampler_order);
}

namespace {

struct Writer : ConfigVisitor {
  GgufWriter& w;
  explicit Writer(GgufWriter& w) : w(w) {}
  void i32(const char* k, int32_t& v) override { w.set_i32(k, v); }
  void f32(const char* k, float& v) override { w.set_f32(k, v); }
  void boolean(const char* k, bool& v) override { w.set_bool(k, v); }
  void str(const char* k, std::string& v) override { w.set_string(k, v); }
  void i32_array(const char* k, std::vector<int32_t>& v) override { w.set_i32_array(k, v); }
  void str_array(const char* k, std::vector<std::string>& v) override { w.set_string_array(k, v); }
};

struct Reader : ConfigVisitor {
  const GgufFile& f;
  explicit Reader(const GgufFile& f) : f(f) {}
  const GgufValue& get(const char* k) {
    const GgufValue* v = f.find(k);
    CBX_CHECK(v, "%s: missing metadata key '%s' (not a chatterbox.cpp GGUF, or an older format)", f.path().c_str(), k);
    return *v;
  }
  template <typename Fn>
  auto typed(const char* k, Fn fn) {
    const GgufValue& v = get(k);
    try {
      return fn(v);
    } catch (const Error& e) {
      fail("%s: metadata key '%s' has type %s: %s", f.path().c_str(), k, gguf_type_name(v.type), e.what());
    }
  }
  void i32(const char* k, int32_t& v) override {
    int64_t x = typed(k, [](const GgufValue& g) { return g.as_int(); });
    CBX_CHECK(x >= INT32_MIN && x <= INT32_MAX, "%s: metadata key '%s' = %lld out of range", f.path().c_str(), k,
              (long long)x);
    v = int32_t(x);
  }
  void f32(const char* k, float& v) override {
    v = float(typed(k, [](const GgufValue& g) { return g.as_float(); }));
  }
  void boolean(const char* k, bool& v) override {
    v = typed(k, [](const GgufValue& g) { return g.as_bool(); });
  }
  void str(const char* k, std::string& v) override {
    v = typed(k, [](const GgufValue& g) { return g.as_string(); });
  }
  void i32_array(const char* k, std::vector<int32_t>& v) override {
    auto a = typed(k, [](const GgufValue& g) { return g.as_int_array(); });
    v.assign(a.begin(), a.end());
  }
  void str_array(const char* k, std::vector<std::string>& v) override {
    v = typed(k, [](const GgufValue& g) { return g.as_string_array(); });
  }
};

}  // namespace

void write_config(const ModelConfig& c, GgufWriter& w) {
  ModelConfig copy = c;
  Writer wr(w);
  visit_config(copy, wr);
}

ModelConfig read_config(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  CBX_CHECK(arch && arch->type == GgufType::STRING && arch->as_string() == "chatterbox",
            "%s: general.architecture is not 'chatterbox'", f.path().c_str());
  ModelConfig c;
  Reader rd(f);
  visit_config(c, rd);
  CBX_CHECK(c.format_version == kConfigFormatVersion, "%s: chatterbox.format_version %d, this build reads %d",
            f.path().c_str(), c.format_version, kConfigFormatVersion);
  return c;
}

}  // namespace cbx
