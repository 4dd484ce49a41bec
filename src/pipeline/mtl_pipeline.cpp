#include "pipeline/mtl_pipeline.h"

#include <algorithm>
#include <cctype>

#include "core/cpu.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/cfm_solver.h"
#include "models/t3_mtl.h"
#include "pipeline/s3gen_stage.h"
#include "pipeline/synth_options.h"
#include "pipeline/voice.h"
#include "text/mtl_tokenizer.h"
#include "text/punc_norm.h"

namespace cbx {

namespace {

constexpr int64_t kDefaultChunkTokens = 150;

// Upstream MTL punc_norm's enders plus the Arabic and Devanagari ones (spec §4.1); CJK
// full-width punctuation is written without a following space.
ChunkRules mtl_chunk_rules() {
  ChunkRules r;
  r.sentence_enders = U".!?\u061F\u0964";
  r.clause_enders = U",;:\u060C";
  r.closers = U"\"')]\u300D\u300F\uFF09\u3011";
  r.wide_sentence_enders = U"\u3002\uFF01\uFF1F";
  r.wide_clause_enders = U"\uFF0C\u3001\uFF1B\uFF1A";
  r.chunk_enders = U".!?-,\u061F\u0964\u060C\u3002\uFF01\uFF1F\uFF0C\u3001";
  return r;
}

std::string lower_ascii(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

struct MtlPipeline::Impl {
  std::unique_ptr<GgufFile> f;
  ModelConfig cfg;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<MtlTokenizer> tok;
  std::unique_ptr<T3Mtl> t3;
  std::unique_ptr<S3GenStage> s3gen;
  Voice builtin, voice;  // the built-in voice, the one in use
  std::vector<std::string> languages;
  int64_t max_new = 0, max_text = 0;
  GemmPrecision gemm = GemmPrecision::Auto;  // MtlLoadParams::gemm
};

MtlPipeline::MtlPipeline(const std::string& path, const MtlLoadParams& p) : m_(std::make_unique<Impl>()) {
  Impl& m = *m_;
  LoadProgress progress(p.on_progress, path);
  m.f = GgufFile::open(path);
  const GgufFile& f = *m.f;
  progress.plan(f, p.repack);
  m.cfg = read_config(f);
  const ModelConfig& c = m.cfg;
  if (c.variant != Variant::Mtl)
    throw UnsupportedModelError(path + ": model variant '" + variant_name(c.variant) +
                                "' is not a Multilingual model (the Multilingual pipeline needs variant 'mtl')");
  CBX_CHECK(c.t3.arch == "llama", "%s: T3 arch '%s', the Multilingual pipeline needs llama", path.c_str(),
            c.t3.arch.c_str());
  CBX_CHECK(!c.cfm.meanflow, "%s: the Multilingual pipeline needs the CFG Euler CFM, not mean-flow", path.c_str());
  check_sampler_order(path, c, "llama");
  CBX_CHECK(p.kv_type == DType::F16 || p.kv_type == DType::F32, "mtl pipeline: KV cache type must be f16 or f32");
  const int n_threads = p.n_threads == 0 ? available_cpus() : p.n_threads;
  check_param(param::kThreads, n_threads);
  m.pool = std::make_unique<ThreadPool>(n_threads);
  m.tok = std::make_unique<MtlTokenizer>(MtlTokenizer::from_gguf(f));
  m.languages = c.languages.empty() ? m.tok->languages() : c.languages;
  std::sort(m.languages.begin(), m.languages.end());
  m.builtin = cbx::builtin_voice(f, c);
  m.voice = m.builtin;

  m.max_new = p.max_new_tokens < 0 ? c.pipeline.max_new_tokens : p.max_new_tokens;
  // Generated token k is fed back at speech position k + 1 (T3Mtl; the last is never fed).
  check_param(param::kMaxNewTokens.limited(double(c.t3.max_speech_tokens) + 3, "this model's T3 speech positions"),
              double(m.max_new));
  progress.done(LoadStage::Open);
  T3MtlLoadParams tp;
  tp.kv_type = p.kv_type;
  tp.pack_planar = p.repack;
  tp.on_packed = [&progress](size_t bytes) { progress.advance(LoadStage::T3, bytes); };
  tp.max_new_tokens = m.max_new;
  tp.max_text_tokens = c.t3.max_text_tokens;
  m.max_text = tp.max_text_tokens;
  m.gemm = p.gemm;
  m.t3 = std::make_unique<T3Mtl>(f, c, *m.pool, tp);
  progress.done(LoadStage::T3);

  // Checked before S3Gen loads: its last stage reports the load complete. CfmSolver guides when
  // the CFM is not mean-flow (checked above) and cfg_rate is nonzero.
  CBX_CHECK(c.cfm.cfg_rate != 0.f, "%s: the Multilingual CFM must use classifier-free guidance", path.c_str());
  // T3 returns at most max_new tokens (EOS included), so S3Gen takes at most max_new.
  m.s3gen = std::make_unique<S3GenStage>(f, c, *m.pool, m.builtin, m.max_new, p.gemm, p.cfm_precision, &progress);
}

MtlPipeline::~MtlPipeline() = default;

const ModelConfig& MtlPipeline::config() const { return m_->cfg; }
int MtlPipeline::n_threads() const { return m_->pool->size(); }
int64_t MtlPipeline::max_new_tokens() const { return m_->max_new; }
GemmPrecision MtlPipeline::gemm_precision() const { return m_->gemm; }
GemmPrecision MtlPipeline::cfm_precision() const { return m_->s3gen->cfm_linear_precision(); }
std::vector<std::string> MtlPipeline::languages() const { return m_->languages; }
T3Mtl& MtlPipeline::t3() { return *m_->t3; }
const Voice& MtlPipeline::voice() const { return m_->voice; }
const Voice& MtlPipeline::builtin_voice() const { return m_->builtin; }
const GgufFile& MtlPipeline::gguf() const { return *m_->f; }
ThreadPool& MtlPipeline::pool() { return *m_->pool; }

void MtlPipeline::set_voice(const Voice& v, const std::string& what) {
  Impl& m = *m_;
  check_voice(v, m.cfg, what);
  m.s3gen->check_fits(v, what);
  m.voice = v;
}

void MtlPipeline::reset_voice() { m_->voice = m_->builtin; }

std::string check_mtl_language(const std::vector<std::string>& supported, const std::string& language) {
  const std::string lang = lower_ascii(language);
  if (!lang.empty() && std::find(supported.begin(), supported.end(), lang) != supported.end()) return lang;
  std::string list;
  for (const std::string& code : supported) {
    const char* name = language_name(code);
    list += "\n  " + code + (name ? std::string("  ") + name : std::string());
  }
  if (language.empty())
    throw InvalidArgumentError("language (--lang): a Multilingual model needs a language; supported:" + list);
  throw InvalidArgumentError("language (--lang): '" + language + "' is not supported by this model; supported:" + list);
}

std::string MtlPipeline::check_language(const std::string& language) const {
  return check_mtl_language(m_->languages, language);
}

std::vector<int32_t> MtlPipeline::tokenize(const std::string& normalized, const std::string& language) const {
  return m_->tok->encode(normalized, check_language(language));
}

std::vector<std::string> MtlPipeline::split_text(const std::string& text, const std::string& language,
                                                 int64_t max_chunk_tokens) const {
  const Impl& m = *m_;
  const std::string lang = check_language(language);
  check_synth_text(text);
  const int64_t budget = max_chunk_tokens == 0 ? kDefaultChunkTokens : max_chunk_tokens;
  check_param(param::kMaxChunkTokens.limited(double(m.max_text - 2),
                                             "the text tokens this model's T3 takes, SOT/EOT "
                                             "added"),
              double(budget));
  return split_into_chunks(
      punc_norm(text, PuncNormFlavor::Multilingual), budget,
      [&](const std::string& s) { return int64_t(m.tok->encode(s, lang).size()); }, mtl_chunk_rules());
}

std::vector<int32_t> MtlPipeline::postprocess(const std::vector<int32_t>& generated, const T3Config& c) {
  auto first = [&](int32_t id) { return std::find(generated.begin(), generated.end(), id); };
  auto begin = generated.begin();
  if (auto it = first(c.start_speech_token); it != generated.end()) begin = it + 1;
  auto end = first(c.stop_speech_token);
  std::vector<int32_t> out;
  for (auto it = begin; it < end; ++it)
    if (*it >= 0 && *it < c.start_speech_token) out.push_back(*it);
  return out;
}

const std::vector<double>& MtlPipeline::cfm_step_ms() const { return m_->s3gen->cfm().last_step_ms(); }

void MtlPipeline::reseed_s3gen(uint64_t seed) { m_->s3gen->reseed(seed); }
S3GenRngState MtlPipeline::s3gen_rng_state() const { return m_->s3gen->rng_state(); }
void MtlPipeline::set_s3gen_rng_state(const S3GenRngState& st) { m_->s3gen->set_rng_state(st); }

std::vector<float> MtlPipeline::tokens_to_audio(const std::vector<int32_t>& speech, SynthTimings* tm,
                                                const Tensor& cfm_noise, const HiftDraws* hift_draws) {
  Impl& m = *m_;
  if (speech.empty()) return {};
  std::vector<float> out = m.s3gen->to_audio(m.voice, speech, tm, cfm_noise, hift_draws);
  const int64_t keep = tail_keep_samples(int64_t(speech.size()));
  if (int64_t(out.size()) > keep) out.resize(size_t(keep));
  return out;
}

int64_t MtlPipeline::tail_keep_samples(int64_t n_speech) const {
  // Tail trim (mtl_tts.py): the last token decodes to ~40 ms of noise.
  return std::max<int64_t>(1, n_speech - 1) * m_->cfg.pipeline.samples_per_token;
}

std::vector<float> MtlPipeline::tokens_to_audio_stream(const std::vector<int32_t>& speech, const StreamSchedule& s,
                                                       SynthTimings* tm, const StreamSink& on_piece) {
  if (speech.empty()) return {};
  return stream_tokens(m_->s3gen->stream(), m_->voice, s, speech, int64_t(speech.size()), tm, on_piece,
                       tail_keep_samples(int64_t(speech.size())));
}

S3GenStream& MtlPipeline::s3gen_stream() { return m_->s3gen->stream(); }

T3MtlSampling MtlPipeline::sampling_of(const MtlSynthParams& p, float* exaggeration) const {
  // A negative value keeps the GGUF's default; anything else (NaN included) must be valid.
  T3MtlSampling s = m_->t3->default_sampling();
  auto given = [](const ParamSpec& spec, double v) {
    if (v < 0) return false;
    check_param(spec, v);
    return true;
  };
  if (given(param::kTemperature, p.temperature)) s.temperature = p.temperature;
  if (given(param::kMinP, p.min_p)) s.min_p = p.min_p;
  if (given(param::kTopP, p.top_p)) s.top_p = p.top_p;
  if (given(param::kRepetitionPenalty, p.repetition_penalty)) s.repetition_penalty = p.repetition_penalty;
  if (given(param::kCfgWeight, p.cfg_weight)) s.cfg_weight = p.cfg_weight;
  const float ex = given(param::kExaggeration, p.exaggeration) ? p.exaggeration : m_->cfg.pipeline.exaggeration;
  auto bad = [](const char* what, double v, const char* range) {
    throw InvalidArgumentError(std::string("synthesize: ") + what + " " + std::to_string(v) + " must be " + range);
  };
  if (!(s.temperature > 0)) bad("temperature", s.temperature, "> 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) bad("top_p", s.top_p, "in (0, 1]");
  if (!(s.min_p >= 0 && s.min_p <= 1)) bad("min_p", s.min_p, "in [0, 1]");
  if (!(s.repetition_penalty > 0)) bad("repetition_penalty", s.repetition_penalty, "> 0");
  if (!(s.cfg_weight >= 0 && s.cfg_weight <= 100)) bad("cfg_weight", s.cfg_weight, "in [0, 100]");
  if (!(ex >= 0 && ex <= 100)) bad("exaggeration", ex, "in [0, 100]");
  *exaggeration = ex;
  return s;
}

std::vector<float> MtlPipeline::synthesize_checked(const std::string& text, const SynthRequest& r,
                                                   const std::string& language, SynthTimings* timings,
                                                   const SynthAudioFn& on_audio, const SynthAbortFn& should_abort) {
  MtlSynthParams p = to_mtl_params(r.options);
  p.language = language;
  copy_call_fields(r, p);
  return synthesize(text, p, timings, on_audio, should_abort);
}

std::vector<float> MtlPipeline::synthesize(const std::string& text, const MtlSynthParams& p, SynthTimings* timings,
                                           const SynthAudioFn& on_audio, const SynthAbortFn& should_abort) {
  Impl& m = *m_;
  GemmPrecisionScope gemm_scope(m.gemm);  // T3 (S3Gen's models hold their own)
  SynthLoop loop(sample_rate(), on_audio, should_abort);
  SynthTimings& tm = loop.timings();
  float exaggeration = 0;
  T3MtlSampling s = sampling_of(p, &exaggeration);

  const Voice& voice = m.voice;
  T3MtlCond cond;
  cond.speaker_emb = voice.speaker_emb;
  cond.cond_prompt_tokens = voice.cond_prompt_tokens;
  cond.exaggeration = exaggeration;

  const std::string lang = check_language(p.language);
  const std::vector<std::vector<int32_t>> ids = loop.tokenize(
      split_text(text, lang, p.max_chunk_tokens), [&](const std::string& c) { return m.tok->encode(c, lang); });
  const int64_t n_chunks = loop.n_chunks();

  reseed_s3gen(p.seed);
  CfmSolver& cfm = m.s3gen->cfm();
  cfm.set_step_capture([&](int, const Tensor&) { loop.check_abort(); });
  struct ClearCapture {
    CfmSolver& c;
    ~ClearCapture() { c.set_step_capture(nullptr); }
  } clear_capture{cfm};
  for (int64_t k = 0; k < n_chunks; ++k) {
    loop.check_abort();
    s.seed = chunk_seed(p.seed, k);
    T3MtlStats st;
    int64_t steps = 0;
    auto poll_step = [&]() {  // polled once a decode step
      if (p.on_progress) p.on_progress(k, n_chunks, ++steps);
      return loop.abort_requested();
    };
    // Streaming: S3Gen runs between decode steps on the schedule (stream_synth.h), over the
    // tokens postprocess would keep, decided as they come (see the header).
    StreamRun stream(p.stream ? &m.s3gen->stream() : nullptr, voice, p.stream_schedule, &tm, loop.audio(), on_audio, k,
                     n_chunks);
    bool seen_sos = false, ended = false;
    const T3Config& tc = m.cfg.t3;
    auto on_token = [&](int32_t tok) {
      if (ended) return;
      if (tok == tc.stop_speech_token) {
        ended = true;
      } else if (tok == tc.start_speech_token) {
        if (!seen_sos) (void)stream.restart();
        seen_sos = true;
      } else {
        stream.on_token(tok, tok >= 0 && tok < tc.start_speech_token);
      }
    };
    std::vector<int32_t> gen = m.t3->generate(cond, ids[size_t(k)], s, &st, poll_step, -1,
                                              p.stream ? on_token : std::function<void(int32_t)>());
    loop.check_abort();
    tm.t3_prefill_ms += st.prefill_ms;
    tm.t3_decode_ms += st.decode_ms - stream.ms();
    tm.n_decode_steps += st.n_decode;
    if (st.hit_limit) ++tm.chunks_at_limit;
    const std::vector<int32_t> speech = p.stream ? stream.tokens() : postprocess(gen, m.cfg.t3);
    tm.n_speech_tokens += int64_t(speech.size());
    if (p.stream)
      stream.finish(speech, tail_keep_samples(int64_t(speech.size())));
    else
      loop.add_chunk(tokens_to_audio(speech, &tm), k);
  }
  return loop.finish(timings);
}

}  // namespace cbx
