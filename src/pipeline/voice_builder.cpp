// VoiceBuilder: reference audio -> Voice, as upstream prepare_conditionals + S3Gen.embed_ref
// (voice.h has the recipe and where it deliberately differs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "audio/audio_file.h"
#include "audio/loudness.h"
#include "audio/mel.h"
#include "audio/resample.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/campplus.h"
#include "models/s3_tokenizer.h"
#include "models/voice_encoder.h"
#include "pipeline/voice.h"

namespace cbx {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string base_name_of(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Peak at or below this (-80 dBFS, a quarter of one 16-bit step) is digital silence.
constexpr float kSilencePeak = 1e-4f;
// Full-scale samples: clipping is reported when more than this share of samples sit there.
constexpr float kClipLevel = 0.999f;
constexpr double kClipShareWarn = 1e-3;
// Extra seconds decoded past max_seconds when the file is longer, so the soxr filter tail at the
// cut is computed from real samples (audio_file.h, load_audio).
constexpr double kDecodeMargin = 0.05;

}  // namespace

VoiceRecipe voice_recipe(const ModelConfig& c, const VoiceBuildOptions& o, const std::string& what) {
  VoiceRecipe r;
  r.variant = c.variant;
  r.sr24 = c.pipeline.sample_rate;
  r.sr16 = c.pipeline.s3_sample_rate;
  CBX_CHECK(r.sr24 == S3GenMel::kSampleRate && r.sr16 == S3TokenizerMel::kSampleRate,
            "%s: voice cloning needs 24 kHz / 16 kHz rates, the model says %d / %d", what.c_str(), r.sr24, r.sr16);
  CBX_CHECK(c.flow.mel_dim == S3GenMel::kMels, "%s: flow.mel_dim %d, the S3Gen mel front-end has %d bins", what.c_str(),
            c.flow.mel_dim, S3GenMel::kMels);
  CBX_CHECK(std::isfinite(o.max_seconds) && o.max_seconds >= c.pipeline.dec_cond_seconds && o.max_seconds <= 600,
            "voice builder: max_seconds %g must be in [%g, 600]", o.max_seconds, double(c.pipeline.dec_cond_seconds));
  r.max_seconds = o.max_seconds;
  r.enc_cond_16k = int64_t(std::lround(double(c.pipeline.enc_cond_seconds) * r.sr16));
  r.dec_cond_24k = int64_t(std::lround(double(c.pipeline.dec_cond_seconds) * r.sr24));
  r.min_seconds = c.variant == Variant::Mtl ? kMinReferenceSecondsMtl : kMinReferenceSecondsTurbo;
  r.norm_loudness = c.pipeline.norm_loudness && o.norm_loudness;
  r.loudness_target = c.pipeline.loudness_target;
  return r;
}

double voice_decode_seconds(const VoiceRecipe& r) { return r.max_seconds + kDecodeMargin; }

VoiceSignals voice_signals(const AudioData& a, const VoiceRecipe& r, const std::string& name,
                           std::vector<std::string>* warnings, VoiceBuildTimings* tm) {
  const char* src = name.c_str();
  auto warn = [&](const std::string& s) {
    if (warnings) warnings->push_back(s);
  };
  VoiceBuildTimings local;
  if (!tm) tm = &local;
  CBX_CHECK(a.sample_rate > 0 && !a.samples.empty(), "%s: no audio samples", src);

  // Clipping and silence are judged on the decoded file signal (mono mix).
  float peak = 0;
  size_t n_full = 0;
  for (float x : a.samples) {
    const float ax = std::fabs(x);
    CBX_CHECK(std::isfinite(x), "%s: the audio holds non-finite samples", src);
    peak = std::max(peak, ax);
    n_full += ax >= kClipLevel;
  }

  // librosa.load(path, sr=24000): soxr HQ to 24 kHz; cut to max_seconds when longer.
  VoiceSignals sig;
  double t0 = now_ms();
  sig.full =
      a.sample_rate == r.sr24 ? a.samples : resample_soxr(a.samples.data(), a.samples.size(), a.sample_rate, r.sr24);
  std::vector<float>& full = sig.full;
  const size_t max_24k = size_t(std::llround(r.max_seconds * r.sr24));
  if (full.size() > max_24k) {
    full.resize(max_24k);
    char b[256];
    std::snprintf(b, sizeof b,
                  "%s: only the first %g s are used (upstream feeds the whole file to the loudness meter and the "
                  "voice encoder)",
                  src, r.max_seconds);
    warn(b);
  }
  tm->resample_24k_ms = now_ms() - t0;

  const double seconds = double(full.size()) / r.sr24;
  if (r.variant == Variant::Mtl) {
    CBX_CHECK(seconds >= r.min_seconds, "%s: the reference is %.2f s long; at least %.1f s is required", src, seconds,
              r.min_seconds);
  } else {
    CBX_CHECK(seconds > r.min_seconds,
              "%s: the reference is %.2f s long; Chatterbox %s needs more than %.1f s (upstream asserts it)", src,
              seconds, variant_name(r.variant), r.min_seconds);
  }

  // Silence: a flat-zero file or one whose every 400 ms block is under the -70 LUFS gate gives
  // no voice to clone (upstream: infinite loudness gain, skipped; then an empty trimmed signal).
  t0 = now_ms();
  CBX_CHECK(peak > kSilencePeak, "%s: the reference is silent (peak %.1f dBFS): there is no voice to clone", src,
            peak > 0 ? 20.0 * std::log10(double(peak)) : -INFINITY);
  sig.lufs = integrated_loudness(full.data(), full.size(), r.sr24);
  CBX_CHECK(std::isfinite(sig.lufs),
            "%s: the reference is silent (every 400 ms block is below the -70 LUFS gate): there is no voice to "
            "clone",
            src);
  const double clip_share = double(n_full) / double(a.samples.size());
  if (clip_share > kClipShareWarn) {
    char b[256];
    std::snprintf(b, sizeof b,
                  "%s: %.2f%% of the samples are at full scale (clipped); the cloned voice may sound distorted", src,
                  100.0 * clip_share);
    warn(b);
  }
  if (r.norm_loudness) {
    // tts_turbo.py norm_loudness: full * 10^((target - L) / 20); numpy keeps a float32 array
    // times a Python float in float32 (the gain rounded to float first), as normalize_loudness.
    const double g = loudness_gain(sig.lufs, r.loudness_target);
    if (std::isfinite(g) && g > 0.0) {
      sig.gain = float(g);
      for (float& x : full) x *= sig.gain;
    } else {
      warn(std::string(src) + ": loudness normalisation skipped (gain not finite)");
    }
  }
  tm->loudness_ms = now_ms() - t0;

  // ref_16k_wav = librosa.resample(full, 24000 -> 16000): the whole reference.
  t0 = now_ms();
  sig.ref16 = resample_soxr(full.data(), full.size(), r.sr24, r.sr16);
  tm->resample_16k_ms = now_ms() - t0;
  sig.t3_samples = std::min<int64_t>(int64_t(sig.ref16.size()), r.enc_cond_16k);
  sig.s3gen_samples = int64_t(std::min(full.size(), size_t(r.dec_cond_24k)));
  return sig;
}

struct VoiceBuilder::Impl {
  const GgufFile* f = nullptr;
  ModelConfig c;
  ThreadPool* pool = nullptr;
  VoiceBuildOptions o;
  VoiceRecipe r;
  std::string model_name;
  std::unique_ptr<VoiceEncoder> ve;
  std::unique_ptr<CampPlus> campplus;
  std::unique_ptr<S3Tokenizer> s3tok;
  S3GenMel s3gen_mel;
  std::unique_ptr<SincResampler> sinc;
  VoiceCapture capture;
  ProgressFn progress;
  void cap(const char* name, const float* x, size_t n) const {
    if (capture) capture(name, x, int64_t(n));
  }
  void step(int64_t i, const char* what) const {
    if (!progress) return;
    ProgressEvent e;
    e.stage = "step";
    e.done = i;
    e.total = kVoiceBuildSteps;
    e.item = what;
    progress(e);
  }
};

VoiceBuilder::VoiceBuilder(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const VoiceBuildOptions& o)
    : m_(std::make_unique<Impl>()) {
  Impl& m = *m_;
  m.f = &f;
  m.c = c;
  m.pool = &pool;
  m.o = o;
  m.model_name = base_name_of(f.path());
  m.r = voice_recipe(c, o, f.path());
  // The whole (bounded) reference at 16 kHz goes to the voice encoder; the tokenizer sees at most
  // max(enc_cond, 10 s at 16 kHz); CAMPPlus the 10 s copy.
  const int64_t max_16k = int64_t(std::ceil(o.max_seconds * m.r.sr16)) + 1;
  const int64_t dec_16k = int64_t(std::ceil(double(m.r.dec_cond_24k) * m.r.sr16 / m.r.sr24));
  m.ve = std::make_unique<VoiceEncoder>(f, c, max_16k);
  m.campplus = std::make_unique<CampPlus>(f, c, dec_16k, pool.size());
  m.s3tok = std::make_unique<S3Tokenizer>(f, c, std::max(m.r.enc_cond_16k, dec_16k), pool.size());
  m.sinc = std::make_unique<SincResampler>(m.r.sr24, m.r.sr16);
}

VoiceBuilder::~VoiceBuilder() = default;

const VoiceBuildOptions& VoiceBuilder::options() const { return m_->o; }
double VoiceBuilder::min_seconds() const { return m_->r.min_seconds; }
void VoiceBuilder::set_capture(VoiceCapture fn) { m_->capture = std::move(fn); }
void VoiceBuilder::set_progress(ProgressFn fn) { m_->progress = std::move(fn); }

Voice VoiceBuilder::build(const std::string& path, VoiceBuildTimings* t, std::vector<std::string>* warnings) {
  const double t0 = now_ms();
  m_->step(1, "decoding audio");
  // Decode a little more than max_seconds so that a file longer than it can be told apart.
  AudioData a = read_audio(path, voice_decode_seconds(m_->r));
  const double t1 = now_ms();
  VoiceBuildTimings tm;
  Voice v = build_from_audio(a, base_name_of(path), &tm, warnings);
  tm.decode_ms = t1 - t0;
  tm.total_ms += tm.decode_ms;
  if (t) *t = tm;
  return v;
}

Voice VoiceBuilder::build_from_memory(const void* data, size_t size, const std::string& name, VoiceBuildTimings* t,
                                      std::vector<std::string>* warnings) {
  const double t0 = now_ms();
  m_->step(1, "decoding audio");
  AudioData a = read_audio_memory(data, size, name, voice_decode_seconds(m_->r));
  const double t1 = now_ms();
  VoiceBuildTimings tm;
  Voice v = build_from_audio(a, name, &tm, warnings);
  tm.decode_ms = t1 - t0;
  tm.total_ms += tm.decode_ms;
  if (t) *t = tm;
  return v;
}

Voice VoiceBuilder::build_from_audio(const AudioData& a, const std::string& name, VoiceBuildTimings* t,
                                     std::vector<std::string>* warnings) {
  Impl& m = *m_;
  const ModelConfig& c = m.c;
  const char* src = name.c_str();
  VoiceBuildTimings tm;
  const double t_start = now_ms();
  m.step(2, "resampling and loudness");
  const VoiceSignals sig = voice_signals(a, m.r, name, warnings, &tm);
  const std::vector<float>& full = sig.full;
  const std::vector<float>& ref16 = sig.ref16;

  Voice v;
  v.variant = c.variant;
  v.mel_dim = c.flow.mel_dim;
  v.source = name;
  v.model = m.model_name;
  v.source_sample_rate = a.sample_rate;
  v.source_channels = a.file_channels;
  v.source_samples = int64_t(a.samples.size());
  v.ref_samples = int64_t(full.size());
  v.loudness_lufs = float(sig.lufs);
  v.loudness_gain = sig.gain;
  v.emotion_adv = m.o.exaggeration >= 0 ? m.o.exaggeration : c.pipeline.exaggeration;
  m.cap("ref24", full.data(), full.size());
  m.cap("ref16", ref16.data(), ref16.size());

  // T3 prompt tokens: the first enc_cond seconds, at most cond_prompt_len tokens.
  m.step(3, "S3 tokenizer (T3 prompt)");
  double t0 = now_ms();
  const int64_t n_t3 = sig.t3_samples;
  v.cond_prompt_tokens = m.s3tok->tokenize(*m.pool, ref16.data(), n_t3, c.t3.cond_prompt_len);
  v.t3_samples = n_t3;
  m.cap("t3_16", ref16.data(), size_t(n_t3));
  tm.s3tok_t3_ms = now_ms() - t0;

  // VE speaker embedding of the whole 16 kHz reference.
  m.step(4, "voice encoder");
  t0 = now_ms();
  v.speaker_emb = m.ve->embed(*m.pool, ref16.data(), int64_t(ref16.size()));
  tm.ve_ms = now_ms() - t0;

  // S3Gen.embed_ref on the first 10 s at 24 kHz.
  const size_t n24 = size_t(sig.s3gen_samples);
  v.s3gen_samples = sig.s3gen_samples;
  m.step(5, "S3Gen mel");
  t0 = now_ms();
  int64_t tm_frames = 0;
  v.prompt_feat = m.s3gen_mel.compute(full.data(), n24, &tm_frames);
  tm.s3gen_mel_ms = now_ms() - t0;

  t0 = now_ms();
  std::vector<float> s3_16 = m.sinc->process(full.data(), n24);
  tm.resample_sinc_ms = now_ms() - t0;
  m.cap("s3gen_24", full.data(), n24);
  m.cap("s3gen_16", s3_16.data(), s3_16.size());

  m.step(6, "CAMPPlus");
  t0 = now_ms();
  v.embedding = m.campplus->embed(*m.pool, s3_16.data(), int64_t(s3_16.size()));
  tm.campplus_ms = now_ms() - t0;

  m.step(7, "S3 tokenizer (S3Gen prompt)");
  t0 = now_ms();
  v.prompt_token = m.s3tok->tokenize(*m.pool, s3_16.data(), int64_t(s3_16.size()), -1);
  tm.s3tok_s3gen_ms = now_ms() - t0;
  // embed_ref: when Tm != 2 Tp the tokens are cut to Tm // 2 (never padded).
  if (tm_frames != 2 * int64_t(v.prompt_token.size()) && int64_t(v.prompt_token.size()) > tm_frames / 2)
    v.prompt_token.resize(size_t(tm_frames / 2));

  check_voice(v, c, std::string(src));
  tm.total_ms = now_ms() - t_start;
  if (t) *t = tm;
  return v;
}

Voice load_or_build_voice(const std::string& path, const GgufFile& f, const ModelConfig& c, ThreadPool& pool,
                          const VoiceBuildOptions& o, VoiceBuildTimings* t, std::vector<std::string>* warnings) {
  if (is_gguf_file(path)) {
    Voice v = load_voice(path);
    check_voice(v, c, path);
    if (t) *t = VoiceBuildTimings{};
    return v;
  }
  VoiceBuilder b(f, c, pool, o);
  return b.build(path, t, warnings);
}

}  // namespace cbx
