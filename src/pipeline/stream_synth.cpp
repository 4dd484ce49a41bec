#include "pipeline/stream_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "audio/mel.h"
#include "models/cfm_solver.h"
#include "models/flow_encoder.h"
#include "models/hift_vocoder.h"
#include "pipeline/s3gen_stage.h"
#include "pipeline/voice.h"

namespace cbx {

namespace {

constexpr int64_t kScheduleMax = 10000;

// The start trim/fade gain of absolute sample i (hift_trim_fade's values).
float trim_fade_gain(int64_t i, int64_t n_trim) {
  if (n_trim <= 0 || i >= 2 * n_trim) return 1.f;
  if (i < n_trim) return 0.f;
  const int64_t k = i - n_trim;
  const double ang = n_trim == 1 ? M_PI : M_PI - M_PI * double(k) / double(n_trim - 1);
  return float((std::cos(ang) + 1.0) / 2.0);
}

}  // namespace

StreamSchedule default_stream_schedule(Variant v) {
  StreamSchedule s;
  if (v == Variant::Mtl) {
    s.first_tokens = 20;
    s.prompt_tokens = 50;
  }
  return s;
}

void check_stream_schedule(const StreamSchedule& s) {
  auto check = [](int64_t v, int64_t lo, const char* name) {
    if (v < lo || v > kScheduleMax)
      throw InvalidArgumentError("stream schedule: " + std::string(name) + " " + std::to_string(v) + " must be in " +
                                 std::to_string(lo) + " .. " + std::to_string(kScheduleMax));
  };
  check(s.first_tokens, 1, "first_tokens");
  check(s.chunk_tokens, 1, "chunk_tokens");
  check(s.context_tokens, 0, "context_tokens");
  check(s.prompt_tokens, 0, "prompt_tokens");
}

S3GenStream::S3GenStream(S3GenStage& s3, const ModelConfig& c) : s3_(s3), c_(c) {
  M_ = c.flow.mel_dim;
  ratio_ = c.flow.token_mel_ratio;
  HiftVocoder& h = s3.hift();
  spf_ = h.samples_per_frame();
  H1_ = h.n_harmonic_channels();
  max_flow_frames_ = ratio_ * (s3.max_prompt_tokens() + s3.max_speech());
  max_out_frames_ = h.max_frames();
  cfm_noise_.resize(size_t(M_ * max_flow_frames_));
  noise_win_.resize(size_t(M_ * max_flow_frames_));
  mel_.resize(size_t(M_ * max_out_frames_));
  // Untouched until filled: a generation touches only the blocks its audio needs.
  hift_noise_.reset(new float[size_t(H1_ * spf_ * max_out_frames_)]);
  hift_phases_.resize(size_t(H1_));
  cycles_.resize(size_t(H1_));
  tail_.resize(size_t(kHiftFade * spf_));
  out_.reserve(size_t(spf_ * max_out_frames_));
}

S3GenStream::~S3GenStream() = default;

void S3GenStream::begin(const Voice& v, const StreamSchedule& s) {
  check_stream_schedule(s);
  s3_.check_fits(v, "stream");
  v_ = &v;
  sched_ = s;
  next_at_ = s.first_tokens;
  mel_done_ = a_done_ = emitted_ = runs_ = cfm_frames_ = noise_blocks_ = 0;
  have_tail_ = false;
  std::fill(cycles_.begin(), cycles_.end(), 0.0);
  // The generator calls to_audio would make: one CFM noise, one HiFT draw.
  Tensor z = make_tensor(DType::F32, {M_, max_flow_frames_}, cfm_noise_.data(), cfm_noise_.size() * 4);
  s3_.cfm().draw_noise(z);
  hift_key_ = s3_.hift().take_draws(hift_phases_.data());
}

bool S3GenStream::restart() {
  CBX_CHECK(v_, "stream: restart before begin");
  if (emitted_ > 0) return false;
  next_at_ = sched_.first_tokens;
  mel_done_ = a_done_ = 0;
  have_tail_ = false;
  std::fill(cycles_.begin(), cycles_.end(), 0.0);
  return true;
}

void S3GenStream::push(const std::vector<int32_t>& tokens, SynthTimings* tm, const StreamSink& sink) {
  CBX_CHECK(v_, "stream: push before begin");
  run(tokens, false, tm, sink, -1);
  next_at_ = int64_t(tokens.size()) + sched_.chunk_tokens;
}

int64_t S3GenStream::finish(const std::vector<int32_t>& tokens, SynthTimings* tm, const StreamSink& sink,
                            int64_t keep_samples) {
  CBX_CHECK(v_, "stream: finish before begin");
  run(tokens, true, tm, sink, keep_samples);
  v_ = nullptr;
  return emitted_;
}

void S3GenStream::run(const std::vector<int32_t>& tokens, bool finalize, SynthTimings* tm, const StreamSink& sink,
                      int64_t keep_samples) {
  const Voice& v = *v_;
  const int64_t n = int64_t(tokens.size());
  CBX_CHECK(n >= 1 && n <= s3_.max_speech(), "stream: %lld speech tokens (1 .. %lld)", (long long)n,
            (long long)s3_.max_speech());
  const int64_t Tp = int64_t(v.prompt_token.size()), Tm = v.n_prompt_frames(), r = ratio_;
  // The window: prompt tokens [Dp, Tp) with their prompt mel, generated tokens [Dg, n).
  int64_t Dp = sched_.prompt_tokens > 0 ? std::max<int64_t>(0, Tp - sched_.prompt_tokens) : 0;
  Dp = std::min(Dp, Tm / r);
  const int64_t first_new = std::max<int64_t>(0, (Tm + mel_done_) / r - Tp);
  const int64_t Dg = sched_.context_tokens > 0 ? std::max<int64_t>(0, first_new - sched_.context_tokens) : 0;
  const int64_t Tpw = Tp - Dp, Tmw = Tm - r * Dp, Lw = Tpw + (n - Dg);
  const int64_t Tv = finalize ? r * Lw : r * Lw - r * c_.flow.pre_lookahead_len;
  // Full-sequence frame of window frame w.
  auto full_frame = [&](int64_t w) { return w < r * Tpw ? w + r * Dp : w + r * Dp + r * Dg; };
  const int64_t g_end = Tv > 0 ? full_frame(Tv - 1) + 1 - Tm : 0;
  if (Tv <= Tmw || g_end <= mel_done_) {
    CBX_CHECK(!finalize, "stream: the final run has no frames");  // finalize: Tv = 2 L > Tm (validate_voice)
    return;
  }
  ++runs_;
  ++runs_total_;
  const double t0 = pipeline_now_ms();
  FlowEncoderOutput fo =
      s3_.flow().forward(v.prompt_token.data() + Dp, Tpw, tokens.data() + Dg, n - Dg,
                         v.prompt_feat.data() + r * Dp * M_, Tmw, v.embedding.data(), int64_t(v.embedding.size()));
  const double t1 = pipeline_now_ms();
  // The noise of each window frame's full-sequence position.
  for (int64_t ch = 0; ch < M_; ++ch) {
    const float* src = cfm_noise_.data() + ch * max_flow_frames_;
    float* dst = noise_win_.data() + ch * Tv;
    const int64_t np = std::min(Tv, r * Tpw);
    std::memcpy(dst, src + r * Dp, size_t(np) * 4);
    if (Tv > np) std::memcpy(dst + np, src + r * (Dp + Tpw + Dg), size_t(Tv - np) * 4);
  }
  Tensor noise = make_tensor(DType::F32, {M_, Tv}, noise_win_.data(), size_t(M_ * Tv) * 4);
  const Tensor& mel = s3_.cfm().solve(slice(fo.mu, 1, 0, Tv), fo.spks, slice(fo.cond, 1, 0, Tv), Tmw, noise);
  cfm_frames_ += Tv;
  const double t2 = pipeline_now_ms();
  // Keep the frames not emitted before: window output column c is window frame Tmw + c.
  const float* mp = mel.ptr<float>();
  const int64_t cols = Tv - Tmw, first_col = (Tm + mel_done_ - r * Dp - r * Dg) - Tmw;
  CBX_CHECK(first_col >= 0 && first_col < cols && full_frame(Tmw + first_col) - Tm == mel_done_,
            "stream: window misses frame %lld", (long long)mel_done_);
  for (int64_t ch = 0; ch < M_; ++ch)
    std::memcpy(mel_.data() + ch * max_out_frames_ + mel_done_, mp + ch * cols + first_col,
                size_t(g_end - mel_done_) * 4);
  last_first_ = mel_done_;
  mel_done_ = g_end;
  if (tm) {  // before vocode: its sink may read them (time to first audio)
    tm->flow_ms += t1 - t0;
    tm->cfm_ms += t2 - t1;
  }
  vocode(g_end, finalize, tm, sink, keep_samples);
}

void S3GenStream::vocode(int64_t g_end, bool finalize, SynthTimings* tm, const StreamSink& sink, int64_t keep_samples) {
  const double t0 = pipeline_now_ms();
  HiftVocoder& h = s3_.hift();
  const int64_t s = std::max<int64_t>(0, a_done_ - kHiftContext), T = g_end - s;
  // The HiFT noise up to the last sample of this run.
  const int64_t stride = spf_ * max_out_frames_, need = spf_ * g_end;
  const int64_t blocks = (need + HiftVocoder::kNoiseBlock - 1) / HiftVocoder::kNoiseBlock;
  if (blocks > noise_blocks_) {
    h.fill_noise(hift_key_, noise_blocks_, blocks, hift_noise_.get(), stride, stride);
    noise_blocks_ = blocks;
  }
  HiftDraws d;
  d.phases = hift_phases_.data();
  d.noise = hift_noise_.get() + s * spf_;
  d.noise_stride = stride;
  d.cycle_start = cycles_.data();
  d.cycle_frame = a_done_ - s;
  Tensor mel_all = make_tensor(DType::F32, {M_, max_out_frames_}, mel_.data(), mel_.size() * 4);
  const Tensor& wave = h.forward(slice(mel_all, 1, s, T), &d);
  const float* w = wave.ptr<float>() + (a_done_ - s) * spf_;
  const int64_t emit_end = finalize ? g_end : g_end - kHiftHold;
  if (emit_end <= a_done_) {  // nothing certain yet: the next run starts from the same state
    if (tm) tm->hift_ms += pipeline_now_ms() - t0;
    return;
  }
  const int64_t n_new = (emit_end - a_done_) * spf_;
  out_.assign(w, w + n_new);
  if (have_tail_) {  // raised-cosine cross-fade from the held-back audio into this run's
    const int64_t nf = std::min<int64_t>(kHiftFade * spf_, n_new);
    for (int64_t i = 0; i < nf; ++i) {
      const float a = float(0.5 - 0.5 * std::cos(M_PI * (double(i) + 0.5) / double(kHiftFade * spf_)));
      out_[size_t(i)] = tail_[size_t(i)] * (1.f - a) + out_[size_t(i)] * a;
    }
  }
  if (!finalize) {
    std::memcpy(tail_.data(), w + n_new, tail_.size() * 4);
    have_tail_ = true;
    h.advance_cycles(h.last_f0().data() + (a_done_ - s), emit_end - a_done_, cycles_.data());
  }
  a_done_ = emit_end;
  if (tm) tm->hift_ms += pipeline_now_ms() - t0;
  emit(out_.data(), n_new, sink, keep_samples);
}

void S3GenStream::emit(float* x, int64_t n, const StreamSink& sink, int64_t keep_samples) {
  if (keep_samples >= 0) n = std::min(n, std::max<int64_t>(0, keep_samples - emitted_));
  const int64_t n_trim = c_.pipeline.trim_fade_samples;
  for (int64_t i = 0; i < n && emitted_ + i < 2 * n_trim; ++i) x[i] *= trim_fade_gain(emitted_ + i, n_trim);
  emitted_ += n;
  if (n > 0 && sink) sink(x, n);
}

StreamDistance stream_logmel_distance(const float* ref, const float* x, int64_t n, const std::vector<int64_t>& joins,
                                      int64_t near_frames) {
  S3GenMel mel;
  int64_t T = 0, T2 = 0;
  const std::vector<float> a = mel.compute(ref, size_t(n), &T);
  const std::vector<float> b = mel.compute(x, size_t(n), &T2);
  CBX_CHECK(T == T2, "stream distance: %lld vs %lld frames", (long long)T, (long long)T2);
  const int64_t M = S3GenMel::kMels, hop = S3GenMel::kHop;
  double num[2] = {0, 0}, den[2] = {0, 0};
  StreamDistance d;
  for (int64_t f = 0; f < T; ++f) {
    bool near = false;
    for (int64_t j : joins) near = near || std::llabs(f * hop + hop / 2 - j) <= near_frames * hop;
    double nf = 0, df = 0;
    for (int64_t m = 0; m < M; ++m) {
      const double e = double(b[size_t(f * M + m)]) - a[size_t(f * M + m)];
      nf += e * e;
      df += double(a[size_t(f * M + m)]) * a[size_t(f * M + m)];
    }
    num[near] += nf;
    den[near] += df;
    ++(near ? d.n_near : d.n_else);
  }
  d.near_joins = den[1] > 0 ? std::sqrt(num[1] / den[1]) : 0;
  d.elsewhere = den[0] > 0 ? std::sqrt(num[0] / den[0]) : 0;
  return d;
}

std::vector<float> stream_tokens(S3GenStream& s, const Voice& v, const StreamSchedule& sched,
                                 const std::vector<int32_t>& tokens, int64_t n_streamed, SynthTimings* tm,
                                 const StreamSink& sink, int64_t keep_samples) {
  CBX_CHECK(n_streamed >= 0 && n_streamed <= int64_t(tokens.size()), "stream: %lld of %zu tokens streamed",
            (long long)n_streamed, tokens.size());
  std::vector<float> audio;
  const StreamSink collect = [&](const float* x, int64_t n) {
    audio.insert(audio.end(), x, x + n);
    if (sink) sink(x, n);
  };
  s.begin(v, sched);
  std::vector<int32_t> so_far;
  for (int64_t i = 0; i < n_streamed; ++i) {
    so_far.push_back(tokens[size_t(i)]);
    if (s.due(int64_t(so_far.size()))) s.push(so_far, tm, collect);
  }
  s.finish(tokens, tm, collect, keep_samples);
  return audio;
}

StreamRun::StreamRun(S3GenStream* s, const Voice& v, const StreamSchedule& sched, SynthTimings* tm,
                     std::vector<float>& audio, const SynthAudioFn& on_audio, int64_t chunk, int64_t n_chunks)
    : s_(s), v_(v), sched_(sched), tm_(tm), audio_(audio), on_audio_(on_audio), chunk_(chunk), n_chunks_(n_chunks) {
  if (!s_) return;
  check_stream_schedule(sched_);
  sink_ = [this](const float* x, int64_t n) {
    audio_.insert(audio_.end(), x, x + n);
    ++pieces_;
    if (on_audio_ && !on_audio_(x, n, chunk_, n_chunks_)) throw AbortedError("synthesis stopped by the audio callback");
  };
}

void StreamRun::begin() {
  if (begun_) return;
  s_->begin(v_, sched_);
  begun_ = true;
}

void StreamRun::on_token(int32_t token, bool speech) {
  if (!s_ || !speech) return;
  begin();
  tokens_.push_back(token);
  if (!s_->due(int64_t(tokens_.size()))) return;
  const double t0 = pipeline_now_ms();
  s_->push(tokens_, tm_, sink_);
  ms_ += pipeline_now_ms() - t0;
}

bool StreamRun::restart() {
  if (!s_ || !begun_) {
    tokens_.clear();
    return true;
  }
  if (!s_->restart()) return false;
  tokens_.clear();
  return true;
}

void StreamRun::finish(const std::vector<int32_t>& speech_tokens, int64_t keep_samples) {
  if (!s_ || speech_tokens.empty()) return;
  begin();
  s_->finish(speech_tokens, tm_, sink_, keep_samples);
}

}  // namespace cbx
