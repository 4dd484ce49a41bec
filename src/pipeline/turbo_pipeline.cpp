#include "pipeline/turbo_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/cpu.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/cfm_solver.h"
#include "models/hift_vocoder.h"
#include "models/sampler.h"
#include "models/t3_turbo.h"
#include "pipeline/prefix_cache.h"
#include "pipeline/s3gen_stage.h"
#include "pipeline/synth_options.h"
#include "pipeline/voice.h"
#include "text/gpt2_tokenizer.h"
#include "text/punc_norm.h"
#include "text/utf8.h"

namespace cbx {

namespace {

constexpr int64_t kDefaultChunkTokens = 80;

}  // namespace

struct TurboPipeline::Impl {
  std::unique_ptr<GgufFile> f;
  ModelConfig cfg;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Gpt2Tokenizer> tok;
  std::unique_ptr<T3Turbo> t3;
  std::unique_ptr<S3GenStage> s3gen;
  Voice builtin;                // the GGUF's voice.* tensors
  Voice voice;                  // the voice in use (set_voice)
  int64_t max_cond_tokens = 0;  // T3 prompt tokens reserved for
  int64_t max_new = 0, max_speech = 0;
  DType kv_type = DType::F16;
  GemmPrecision gemm = GemmPrecision::Auto;  // TurboLoadParams::gemm

  int64_t count_tokens(const std::string& s) const { return int64_t(tok->encode(s).size()); }
};

TurboPipeline::TurboPipeline(const std::string& path, const TurboLoadParams& p) : m_(std::make_unique<Impl>()) {
  Impl& m = *m_;
  LoadProgress progress(p.on_progress, path);
  m.f = GgufFile::open(path);
  const GgufFile& f = *m.f;
  progress.plan(f, p.repack);
  m.cfg = read_config(f);
  const ModelConfig& c = m.cfg;
  if (c.variant != Variant::Turbo && c.variant != Variant::Nano)
    throw UnsupportedModelError(std::string(path) + ": model variant '" + variant_name(c.variant) +
                                "' is not supported by the Turbo pipeline (turbo and nano only; mtl models run "
                                "in the Multilingual pipeline, pipeline/mtl_pipeline.h)");
  CBX_CHECK(c.t3.arch == "gpt2", "%s: T3 arch '%s', the Turbo pipeline needs gpt2", path.c_str(), c.t3.arch.c_str());
  CBX_CHECK(c.cfm.meanflow, "%s: the Turbo pipeline needs the mean-flow CFM (cfm.meanflow)", path.c_str());
  check_sampler_order(path, c, "turbo");
  CBX_CHECK(p.kv_type == DType::F16 || p.kv_type == DType::F32, "turbo pipeline: KV cache type must be f16 or f32");
  const int n_threads = p.n_threads == 0 ? available_cpus() : p.n_threads;
  check_param(param::kThreads, n_threads);
  m.pool = std::make_unique<ThreadPool>(n_threads);
  m.tok = std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_gguf(f));

  m.builtin = cbx::builtin_voice(f, c);
  m.voice = m.builtin;
  // Buffers are reserved for any voice set_voice accepts: up to cond_prompt_len T3 prompt tokens
  // and a 10 s S3Gen reference (or the built-in voice's sizes, if larger; S3GenStage).
  m.max_cond_tokens = std::max<int64_t>({1, int64_t(m.builtin.cond_prompt_tokens.size()), c.t3.cond_prompt_len});

  m.max_new = p.max_new_tokens < 0 ? c.pipeline.max_new_tokens : p.max_new_tokens;
  progress.done(LoadStage::Open);
  T3TurboOptions to;
  to.max_text = int64_t(m.tok->model_max_length() == Gpt2Tokenizer::kNoMaxLength ? 1024 : m.tok->model_max_length());
  // T3's positions hold the speaker row, the voice prompt, the text with BOS and EOS, the
  // prefill speech token and the decoded ones (T3Turbo).
  const int64_t new_limit = int64_t(c.t3.n_ctx) - (1 + m.max_cond_tokens + to.max_text + 1) - 1;
  check_param(param::kMaxNewTokens.limited(double(new_limit), "this model's T3 positions"), double(m.max_new));
  to.max_prompt = m.max_cond_tokens;
  to.max_new = m.max_new;
  to.kv_type = p.kv_type;
  to.pack_planar = p.repack;
  to.on_packed = [&progress](size_t bytes) { progress.advance(LoadStage::T3, bytes); };
  m.kv_type = p.kv_type;
  m.gemm = p.gemm;
  m.t3 = std::make_unique<T3Turbo>(c, f, *m.pool, to);
  progress.done(LoadStage::T3);

  // One generation: the prefill token + max_new, then the silence tokens.
  m.max_speech = 1 + m.max_new + c.pipeline.n_silence_tokens;
  m.s3gen = std::make_unique<S3GenStage>(f, c, *m.pool, m.builtin, m.max_speech, p.gemm, p.cfm_precision, &progress);
}

TurboPipeline::~TurboPipeline() = default;

const ModelConfig& TurboPipeline::config() const { return m_->cfg; }
int TurboPipeline::n_threads() const { return m_->pool->size(); }
int64_t TurboPipeline::max_new_tokens() const { return m_->max_new; }
GemmPrecision TurboPipeline::gemm_precision() const { return m_->gemm; }
GemmPrecision TurboPipeline::cfm_precision() const { return m_->s3gen->cfm_linear_precision(); }
int64_t TurboPipeline::chunk_token_limit() const { return m_->max_new + 1; }
std::vector<std::string> TurboPipeline::languages() const { return {"en"}; }
T3Turbo& TurboPipeline::t3() { return *m_->t3; }
const std::vector<float>& TurboPipeline::speaker_emb() const { return m_->voice.speaker_emb; }
double TurboPipeline::prepare_voice() {
  GemmPrecisionScope gemm_scope(m_->gemm);
  return m_->t3->warm_prefix(m_->voice.speaker_emb.data(), int64_t(m_->voice.speaker_emb.size()),
                             m_->voice.cond_prompt_tokens.data(), int64_t(m_->voice.cond_prompt_tokens.size()));
}
namespace {
PrefixCacheKey prefix_key(const GgufFile& f, const T3Turbo& t3, const Voice& v, DType kv_type, GemmPrecision gemm) {
  PrefixCacheKey k;
  k.model = prefix_cache_model_key(f);
  k.compute = prefix_cache_compute_key(dtype_name(kv_type), gemm);
  k.speaker = v.speaker_emb.data();
  k.n_speaker = int64_t(v.speaker_emb.size());
  k.tokens = v.cond_prompt_tokens.data();
  k.n_prompt = int64_t(v.cond_prompt_tokens.size());
  k.kv_bytes = t3.prefix_kv_bytes(k.n_prompt);
  return k;
}
}  // namespace

bool TurboPipeline::load_prefix_cache(const std::string& path, std::string* why) {
  Impl& m = *m_;
  check_prefix_cache_path(path);  // a FIFO would block the read below; a device is no cache
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    *why = "no such file yet";
    return false;
  }
  const std::streamoff size = in.tellg();
  CBX_CHECK(size >= 0, "prompt cache '%s': cannot read it", path.c_str());
  if (size == 0) {  // nothing to lose: a cache is written whole (via a .tmp file) or not at all
    *why = "empty file";
    return false;
  }
  const PrefixCacheKey key = prefix_key(*m.f, *m.t3, m.voice, m.kv_type, m.gemm);
  // A cache for this model is never larger than its header, the voice and the K/V.
  const uint64_t most = 1024 + 4 * uint64_t(key.n_speaker + m.max_cond_tokens) + key.kv_bytes;
  std::vector<uint8_t> data(size > 0 && uint64_t(size) <= most ? size_t(size) : std::min<size_t>(size_t(size), 64));
  in.seekg(0);
  CBX_CHECK(in.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size())),
            "prompt cache '%s': cannot read it", path.c_str());
  const uint8_t* kv = nullptr;
  const PrefixCacheStatus st = parse_prefix_cache(data.data(), data.size(), key, &kv, why);
  CBX_CHECK(st != PrefixCacheStatus::NotOurs, "prompt cache '%s': %s; not overwriting it", path.c_str(), why->c_str());
  if (st == PrefixCacheStatus::Match) {
    m.t3->keep_prefix(key.speaker, key.n_speaker, key.tokens, key.n_prompt, kv);
    return true;
  }
  if (data.size() != size_t(size)) *why = std::to_string(size) + " bytes, more than a cache of this model holds";
  return false;
}

double TurboPipeline::save_prefix_cache(const std::string& path) {
  Impl& m = *m_;
  const double ms = prepare_voice();
  const T3Turbo::KeptPrefix kp = m.t3->kept_prefix();
  CBX_CHECK(kp.rows == 1 + int64_t(m.voice.cond_prompt_tokens.size()), "prompt cache '%s': no voice prefix kept",
            path.c_str());
  write_prefix_cache(path, prefix_key(*m.f, *m.t3, m.voice, m.kv_type, m.gemm), kp.kv, {{"model", m.f->path()}});
  return ms;
}

const std::vector<int32_t>& TurboPipeline::cond_prompt_tokens() const { return m_->voice.cond_prompt_tokens; }
const Voice& TurboPipeline::voice() const { return m_->voice; }
const Voice& TurboPipeline::builtin_voice() const { return m_->builtin; }
const GgufFile& TurboPipeline::gguf() const { return *m_->f; }
ThreadPool& TurboPipeline::pool() { return *m_->pool; }

void TurboPipeline::set_voice(const Voice& v, const std::string& what) {
  Impl& m = *m_;
  check_voice(v, m.cfg, what);
  CBX_CHECK(int64_t(v.cond_prompt_tokens.size()) <= m.max_cond_tokens,
            "%s: %zu T3 prompt tokens exceed the %lld the pipeline reserved", what.c_str(), v.cond_prompt_tokens.size(),
            (long long)m.max_cond_tokens);
  m.s3gen->check_fits(v, what);
  m.voice = v;
}

void TurboPipeline::reset_voice() { m_->voice = m_->builtin; }

std::vector<int32_t> TurboPipeline::tokenize(const std::string& normalized) const {
  return m_->tok->encode(normalized, /*truncate=*/false);
}

std::vector<std::string> TurboPipeline::split_text(const std::string& text, int64_t max_chunk_tokens) const {
  const Impl& m = *m_;
  check_synth_text(text);
  const int64_t budget = max_chunk_tokens == 0 ? kDefaultChunkTokens : max_chunk_tokens;
  const int64_t t3_max =
      int64_t(m.tok->model_max_length() == Gpt2Tokenizer::kNoMaxLength ? 1024 : m.tok->model_max_length());
  check_param(param::kMaxChunkTokens.limited(double(t3_max), "the text tokens this model's T3 takes"), double(budget));
  // A chunk cut inside a sentence ends with "," (a Turbo sentence ender, continuation prosody)
  // rather than the "." punc_norm would append; the text's own ending stays on the last chunk.
  return split_into_chunks(
      punc_norm(text, PuncNormFlavor::Turbo), budget, [&](const std::string& s) { return m.count_tokens(s); },
      ChunkRules{});
}

void TurboPipeline::reseed_s3gen(uint64_t seed) { m_->s3gen->reseed(seed); }

S3GenRngState TurboPipeline::s3gen_rng_state() const { return m_->s3gen->rng_state(); }
void TurboPipeline::set_s3gen_rng_state(const S3GenRngState& st) { m_->s3gen->set_rng_state(st); }

std::vector<float> TurboPipeline::tokens_to_audio(const std::vector<int32_t>& speech, TurboTimings* tm) {
  return m_->s3gen->to_audio(m_->voice, speech, tm);
}

std::vector<float> TurboPipeline::tokens_to_audio_stream(const std::vector<int32_t>& speech, const StreamSchedule& s,
                                                         TurboTimings* tm, const StreamSink& on_piece) {
  const int64_t n_sil = std::min<int64_t>(m_->cfg.pipeline.n_silence_tokens, int64_t(speech.size()));
  return stream_tokens(m_->s3gen->stream(), m_->voice, s, speech, int64_t(speech.size()) - n_sil, tm, on_piece);
}

S3GenStream& TurboPipeline::s3gen_stream() { return m_->s3gen->stream(); }

SamplerParams TurboPipeline::sampler_params(const TurboSynthParams& p) const {
  // A negative value keeps the GGUF's default; anything else (NaN included) must be valid.
  SamplerParams sp = m_->t3->default_sampler();
  auto given = [](const ParamSpec& spec, double v) {
    if (v < 0) return false;
    check_param(spec, v);
    return true;
  };
  if (given(param::kTemperature, p.temperature)) sp.temperature = p.temperature;
  if (given(param::kTopK, p.top_k)) sp.top_k = p.top_k;
  if (given(param::kTopP, p.top_p)) sp.top_p = p.top_p;
  if (given(param::kRepetitionPenalty, p.repetition_penalty)) sp.repetition_penalty = p.repetition_penalty;
  CBX_CHECK(sp.top_p > 0 && sp.top_p <= 1, "synthesize: top_p %g must be in (0, 1]", sp.top_p);
  CBX_CHECK(sp.repetition_penalty > 0, "synthesize: repetition_penalty %g must be > 0", double(sp.repetition_penalty));
  return sp;
}

std::vector<float> TurboPipeline::synthesize_checked(const std::string& text, const SynthRequest& r,
                                                     const std::string& /*language: always en*/, SynthTimings* timings,
                                                     const SynthAudioFn& on_audio, const SynthAbortFn& should_abort) {
  TurboSynthParams p = to_turbo_params(r.options);
  copy_call_fields(r, p);
  return synthesize(text, p, timings, on_audio, should_abort);
}

std::vector<float> TurboPipeline::synthesize(const std::string& text, const TurboSynthParams& p, TurboTimings* timings,
                                             const TurboAudioFn& on_audio, const TurboAbortFn& should_abort) {
  Impl& m = *m_;
  GemmPrecisionScope gemm_scope(m.gemm);  // T3 (S3Gen's models hold their own)
  SynthLoop loop(sample_rate(), on_audio, should_abort);
  SynthTimings& tm = loop.timings();
  SamplerParams sp = sampler_params(p);
  const std::vector<std::vector<int32_t>> ids =
      loop.tokenize(split_text(text, p.max_chunk_tokens), [&](const std::string& c) { return tokenize(c); });
  const int64_t n_chunks = loop.n_chunks();

  reseed_s3gen(p.seed);
  for (int64_t k = 0; k < n_chunks; ++k) {
    loop.check_abort();
    sp.seed = chunk_seed(p.seed, k);
    int64_t steps = 0;
    // Streaming: S3Gen runs between decode steps on the schedule (stream_synth.h).
    StreamRun stream(p.stream ? &m.s3gen->stream() : nullptr, m.voice, p.stream_schedule, &tm, loop.audio(), on_audio,
                     k, n_chunks);
    auto on_step = [&](int64_t, const float*, const float*, int32_t tok) {
      if (p.on_progress) p.on_progress(k, n_chunks, ++steps);
      loop.check_abort();
      stream.on_token(tok, tok >= 0 && tok < m.cfg.t3.start_speech_token);
    };
    const std::vector<int32_t>& text_ids = ids[size_t(k)];
    T3TurboResult r = m.t3->generate(text_ids.data(), int64_t(text_ids.size()), m.voice.speaker_emb.data(),
                                     int64_t(m.voice.speaker_emb.size()), m.voice.cond_prompt_tokens.data(),
                                     int64_t(m.voice.cond_prompt_tokens.size()), sp, m.max_new, on_step);
    tm.t3_prefill_ms += r.prefill_ms;
    tm.t3_decode_ms += r.decode_ms - stream.ms();
    tm.n_decode_steps += r.n_decode;
    tm.n_speech_tokens += int64_t(r.tokens.size());
    if (!r.stopped_eos && !r.stopped_all_inf && r.n_decode >= m.max_new) ++tm.chunks_at_limit;
    if (r.prefix_reused) ++tm.chunks_prefix_reused;
    loop.check_abort();
    if (p.stream)
      stream.finish(r.speech_tokens);
    else
      loop.add_chunk(tokens_to_audio(r.speech_tokens, &tm), k);
  }
  return loop.finish(timings);
}

}  // namespace cbx
