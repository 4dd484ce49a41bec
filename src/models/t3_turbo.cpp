#include "models/t3_turbo.h"

#include <chrono>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace cbx {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
Tensor ids_tensor(const int32_t* ids, int64_t n) {
  return make_tensor(DType::I32, {n}, const_cast<int32_t*>(ids), size_t(n) * 4);
}
}  // namespace

T3Turbo::T3Turbo(const GgufFile& f, ThreadPool& pool, const T3TurboOptions& o) : cfg_(read_config(f)), pool_(pool) {
  init(f, o);
}

T3Turbo::T3Turbo(const ModelConfig& c, const GgufFile& f, ThreadPool& pool, const T3TurboOptions& o)
    : cfg_(c), pool_(pool) {
  init(f, o);
}

void T3Turbo::init(const GgufFile& f, const T3TurboOptions& o) {
  const T3Config& t = cfg_.t3;
  CBX_CHECK(cfg_.variant == Variant::Turbo || cfg_.variant == Variant::Nano,
            "%s: T3 Turbo needs a turbo or nano model, got variant '%s'", f.path().c_str(), variant_name(cfg_.variant));
  bind_t3_gpt2(f, t, w_);
  CBX_CHECK(t.start_speech_token >= 0 && t.start_speech_token < t.speech_vocab && t.stop_speech_token >= 0 &&
                t.stop_speech_token < t.speech_vocab,
            "%s: start/stop speech tokens %d/%d outside the speech vocabulary %d", f.path().c_str(),
            t.start_speech_token, t.stop_speech_token, t.speech_vocab);
  max_text_ = o.max_text;
  max_prompt_ = o.max_prompt > 0 ? o.max_prompt : t.cond_prompt_len;
  max_new_ = o.max_new >= 0 ? o.max_new : cfg_.pipeline.max_new_tokens;
  CBX_CHECK(max_text_ > 0 && max_prompt_ >= 0 && max_new_ >= 0,
            "t3 turbo: bad limits (text %lld, prompt %lld, new %lld)", (long long)max_text_, (long long)max_prompt_,
            (long long)max_new_);
  T3Gpt2Options go;
  go.max_batch = 1 + max_prompt_ + max_text_ + 1;
  go.max_ctx = go.max_batch + 1 + max_new_;  // + the prefill token + max_new decoded ones
  CBX_CHECK(go.max_ctx <= t.n_ctx,
            "t3 turbo: speaker + %lld prompt + %lld text + BOS + %lld new tokens exceed the %d positions",
            (long long)max_prompt_, (long long)max_text_, (long long)(max_new_ + 1), t.n_ctx);
  go.kv_type = o.kv_type;
  go.pack_planar = o.pack_planar;
  go.row_prefill_max = o.row_prefill_max;
  go.on_packed = o.on_packed;
  gpt_ = std::make_unique<T3Gpt2>(t, w_, pool_, go);

  const int64_t d = t.n_embd;
  // The kept buffers (one generic lambda: run on the plan, then on the arena), then the
  // scratch of the speaker projection the prompt assembly runs.
  auto buffers = [&](auto& a) {
    prompt_buf_ = a.alloc(DType::F32, {go.max_batch, d}, "t3 prompt embeddings");
    tok_emb_ = a.alloc(DType::F32, {1, d}, "t3 token embedding");
    tok_id_ = a.alloc(DType::I32, {1}, "t3 token id");
  };
  ArenaPlan plan;
  buffers(plan);
  plan.scratch(matmul_scratch_bytes(w_.spkr_enc_w.dtype, 1, d, t.speaker_embed_size, pool_.size()));
  arena_.reserve(plan.bytes());
  buffers(arena_);
  mark_ = arena_.mark();
  prefix_cache_ = o.prefix_cache;
  if (prefix_cache_) {  // pages are touched only when a prefix is kept
    prefix_kv_.reset(new uint8_t[gpt_->kv_rows_bytes(1 + max_prompt_)]);
    prefix_spk_.reserve(size_t(t.speaker_embed_size));
    prefix_ids_.reserve(size_t(max_prompt_));
  }
}

bool T3Turbo::prefix_matches(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens,
                             int64_t n_prompt) const {
  return prefix_rows_ == 1 + n_prompt && int64_t(prefix_spk_.size()) == n_speaker &&
         int64_t(prefix_ids_.size()) == n_prompt &&
         std::memcmp(prefix_spk_.data(), speaker_emb, size_t(n_speaker) * 4) == 0 &&
         (n_prompt == 0 || std::memcmp(prefix_ids_.data(), prompt_tokens, size_t(n_prompt) * 4) == 0);
}

const Tensor& T3Turbo::prefill(const Tensor& embeds, const float* speaker_emb, int64_t n_speaker,
                               const int32_t* prompt_tokens, int64_t n_prompt, bool* reused) {
  const int64_t P = 1 + n_prompt, L = embeds.shape[0];
  CBX_CHECK(embeds.ndim == 2 && L > P && n_speaker == cfg_.t3.speaker_embed_size && n_prompt <= max_prompt_,
            "t3 turbo: prefill of %s rows with a %lld-token voice prefix", embeds.shape_str().c_str(), (long long)P);
  if (reused) *reused = false;
  gpt_->reset();
  if (!prefix_cache_ || gpt_->has_capture()) return gpt_->forward(embeds);
  const bool hit = prefix_matches(speaker_emb, n_speaker, prompt_tokens, n_prompt);
  if (hit) {
    // The cache still holds the kept prefix when it was last saved to or loaded from prefix_kv_
    // (by this object: a load through backbone() names its own buffer), prefix_kv_ has not
    // changed since, and no forward has written its rows (the usual case for a server's voice):
    // reuse it in place instead of copying its K/V back (37 MB at upstream's prompt size).
    if (cache_holds_prefix_ && gpt_->kv_rows_source() == prefix_kv_.get() && gpt_->kv_rows_unchanged() >= P)
      gpt_->reuse_kv_rows(P);
    else
      gpt_->load_kv_rows(P, prefix_kv_.get());
    cache_holds_prefix_ = true;
  } else {
    prefix_rows_ = 0;
    gpt_->forward(slice(embeds, 0, 0, P));
    gpt_->save_kv_rows(P, prefix_kv_.get());
    cache_holds_prefix_ = true;
    prefix_spk_.assign(speaker_emb, speaker_emb + n_speaker);
    prefix_ids_.assign(prompt_tokens, prompt_tokens + n_prompt);
    prefix_rows_ = P;
  }
  if (reused) *reused = hit;
  return gpt_->forward(slice(embeds, 0, P, L - P));
}

T3Turbo::KeptPrefix T3Turbo::kept_prefix() const {
  KeptPrefix k;
  if (prefix_rows_ == 0) return k;
  k.rows = prefix_rows_;
  k.speaker = prefix_spk_.data();
  k.n_speaker = int64_t(prefix_spk_.size());
  k.tokens = prefix_ids_.data();
  k.n_prompt = int64_t(prefix_ids_.size());
  k.kv = prefix_kv_.get();
  k.kv_bytes = gpt_->kv_rows_bytes(prefix_rows_);
  return k;
}

size_t T3Turbo::prefix_kv_bytes(int64_t n_prompt) const { return gpt_->kv_rows_bytes(1 + n_prompt); }

void T3Turbo::keep_prefix(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens, int64_t n_prompt,
                          const uint8_t* kv) {
  CBX_CHECK(prefix_cache_, "t3 turbo: keep_prefix with the prefix cache off");
  CBX_CHECK(
      n_speaker == cfg_.t3.speaker_embed_size && n_prompt >= 0 && n_prompt <= max_prompt_ && kv != nullptr,
      "t3 turbo: keep_prefix of a %lld-float speaker embedding and %lld prompt tokens (this model: %lld, <= %lld)",
      (long long)n_speaker, (long long)n_prompt, (long long)cfg_.t3.speaker_embed_size, (long long)max_prompt_);
  prefix_rows_ = 0;
  cache_holds_prefix_ = false;  // prefix_kv_ gets other rows than the cache's
  std::memcpy(prefix_kv_.get(), kv, gpt_->kv_rows_bytes(1 + n_prompt));
  prefix_spk_.assign(speaker_emb, speaker_emb + n_speaker);
  prefix_ids_.assign(prompt_tokens, prompt_tokens + n_prompt);
  prefix_rows_ = 1 + n_prompt;
}

double T3Turbo::warm_prefix(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens,
                            int64_t n_prompt) {
  const double t0 = now_ms();
  if (!prefix_cache_ || prefix_matches(speaker_emb, n_speaker, prompt_tokens, n_prompt)) return 0.0;
  Tensor embeds = build_prompt(nullptr, 0, speaker_emb, n_speaker, prompt_tokens, n_prompt);
  prefill(embeds, speaker_emb, n_speaker, prompt_tokens, n_prompt);
  gpt_->reset();
  return now_ms() - t0;
}

SamplerParams T3Turbo::default_sampler() const {
  SamplerParams s;
  s.temperature = cfg_.pipeline.temperature;
  s.top_k = cfg_.pipeline.top_k;
  s.top_p = cfg_.pipeline.top_p;
  s.repetition_penalty = cfg_.pipeline.repetition_penalty;
  return s;
}

Tensor T3Turbo::build_prompt(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
                             const int32_t* prompt_tokens, int64_t n_prompt) {
  const T3Config& t = cfg_.t3;
  CBX_CHECK(n_speaker == t.speaker_embed_size, "t3 turbo: speaker embedding has %lld values, expected %d",
            (long long)n_speaker, t.speaker_embed_size);
  CBX_CHECK(n_text >= 0 && n_text <= max_text_, "t3 turbo: %lld text tokens (reserved for at most %lld)",
            (long long)n_text, (long long)max_text_);
  CBX_CHECK(n_prompt >= 0 && n_prompt <= max_prompt_, "t3 turbo: %lld prompt speech tokens (at most %lld)",
            (long long)n_prompt, (long long)max_prompt_);
  const int64_t L = 1 + n_prompt + n_text + 1;
  arena_.rewind(mark_);
  Tensor out = slice(prompt_buf_, 0, 0, L);

  Tensor spk = make_tensor(DType::F32, {1, n_speaker}, const_cast<float*>(speaker_emb), size_t(n_speaker) * 4);
  Tensor row0 = slice(out, 0, 0, 1);
  matmul_bias(pool_, w_.spkr_enc_w, w_.spkr_enc_b, spk, row0, &arena_);
  if (n_prompt > 0) {
    Tensor rows = slice(out, 0, 1, n_prompt);
    get_rows(w_.speech_emb, ids_tensor(prompt_tokens, n_prompt), rows);
  }
  if (n_text > 0) {
    Tensor rows = slice(out, 0, 1 + n_prompt, n_text);
    get_rows(w_.text_emb, ids_tensor(text_ids, n_text), rows);
  }
  const int32_t bos = t.start_speech_token;
  Tensor last = slice(out, 0, L - 1, 1);
  get_rows(w_.speech_emb, ids_tensor(&bos, 1), last);
  return out;
}

std::vector<int32_t> T3Turbo::postprocess(const std::vector<int32_t>& tokens) const {
  std::vector<int32_t> out;
  out.reserve(tokens.size() + size_t(cfg_.pipeline.n_silence_tokens));
  // tts_turbo.py keeps speech_tokens < 6561 (S3 SPEECH_VOCAB_SIZE, = the SOS id).
  for (int32_t v : tokens)
    if (v >= 0 && v < cfg_.t3.start_speech_token) out.push_back(v);
  for (int i = 0; i < cfg_.pipeline.n_silence_tokens; ++i) out.push_back(cfg_.flow.silence_token);
  return out;
}

T3TurboResult T3Turbo::generate(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
                                const int32_t* prompt_tokens, int64_t n_prompt, const SamplerParams& sp,
                                int64_t max_new, const T3StepFn& on_step) {
  const T3Config& t = cfg_.t3;
  if (max_new < 0) max_new = max_new_;
  CBX_CHECK(max_new <= max_new_, "t3 turbo: %lld new tokens requested, %lld reserved", (long long)max_new,
            (long long)max_new_);
  T3TurboResult r;
  r.tokens.reserve(size_t(max_new) + 1);
  TurboSampler sampler(t.speech_vocab, sp);

  double t0 = now_ms();
  Tensor embeds = build_prompt(text_ids, n_text, speaker_emb, n_speaker, prompt_tokens, n_prompt);
  r.prompt_len = embeds.shape[0];
  const Tensor& logits = prefill(embeds, speaker_emb, n_speaker, prompt_tokens, n_prompt, &r.prefix_reused);
  const int32_t bos = t.start_speech_token;
  // Upstream samples the prefill token without the all -inf check or the EOS stop.
  const bool any = sampler.process(logits.ptr<float>(), &bos, 1);
  int32_t tok = any ? sampler.pick() : -1;
  if (on_step) on_step(0, logits.ptr<float>(), sampler.processed(), tok);
  CBX_CHECK(tok >= 0, "t3 turbo: every processed logit of the prefill is -inf");
  r.tokens.push_back(tok);
  r.prefill_ms = now_ms() - t0;

  t0 = now_ms();
  for (int64_t i = 0; i < max_new; ++i) {
    tok_id_.ptr<int32_t>()[0] = tok;
    get_rows(w_.speech_emb, tok_id_, tok_emb_);
    const Tensor& lg = gpt_->forward(tok_emb_);
    ++r.n_decode;
    tok = sampler.sample(lg.ptr<float>(), r.tokens.data(), int64_t(r.tokens.size()));
    if (on_step) on_step(i + 1, lg.ptr<float>(), sampler.processed(), tok);
    if (tok < 0) {
      r.stopped_all_inf = true;
      break;
    }
    r.tokens.push_back(tok);
    if (tok == t.stop_speech_token) {
      r.stopped_eos = true;
      break;
    }
  }
  r.decode_ms = now_ms() - t0;
  if (!r.tokens.empty() && r.tokens.back() == t.stop_speech_token) r.tokens.pop_back();
  r.speech_tokens = postprocess(r.tokens);
  return r;
}

}  // namespace cbx
