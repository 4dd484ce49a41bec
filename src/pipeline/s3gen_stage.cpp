#include "pipeline/s3gen_stage.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/debug_env.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/cfm_solver.h"
#include "models/hift_vocoder.h"
#include "pipeline/stream_synth.h"
#include "pipeline/voice.h"

namespace cbx {

S3GenStage::S3GenStage(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const Voice& builtin,
                       int64_t max_speech, GemmPrecision gemm, GemmPrecision cfm_precision, LoadProgress* progress)
    : c_(c), max_speech_(max_speech) {
  CBX_CHECK(max_speech >= 1, "s3gen: max_speech %lld must be >= 1", (long long)max_speech);
  max_prompt_tokens_ = std::max<int64_t>(int64_t(builtin.prompt_token.size()),
                                         std::lround(double(c.pipeline.dec_cond_seconds) * c.pipeline.token_rate));
  const int64_t max_flow_tokens = max_prompt_tokens_ + max_speech_;
  // CBX_DEBUG_S3GEN_SHARED_ARENA=0: every stage keeps its own arena (tests/test_say.sh compares).
  Arena* work = debug_env().s3gen_shared_arena ? &work_ : nullptr;
  bind_flow_encoder(f, c.flow, flow_w_);
  FlowEncoderOptions fo;
  fo.max_tokens = max_flow_tokens;
  fo.work = work;
  fo.gemm = gemm;
  flow_ = std::make_unique<FlowEncoder>(c.flow, flow_w_, pool, fo);
  if (progress) progress->done(LoadStage::Flow);

  bind_cfm_estimator(f, c.cfm, cfm_w_);
  CfmSolverOptions co;
  co.max_frames = c.flow.token_mel_ratio * max_flow_tokens;
  co.work = work;
  co.gemm = cfm_precision != GemmPrecision::Auto ? cfm_precision : gemm;
  cfm_ = std::make_unique<CfmSolver>(c.cfm, cfm_w_, pool, co);
  if (progress) progress->done(LoadStage::Cfm);

  // Generated frames = ratio (Tp + N) - Tm; a voice has Tm >= 2 Tp - 2 (validate_voice).
  HiftOptions ho;
  ho.work = work;
  ho.gemm = gemm;
  const int64_t ratio = c.flow.token_mel_ratio;
  ho.max_frames = ratio * max_speech_ +
                  std::max<int64_t>(2, ratio * int64_t(builtin.prompt_token.size()) - builtin.n_prompt_frames());
  hift_ = std::make_unique<HiftVocoder>(c, f, pool, ho);
  if (progress) progress->done(LoadStage::Hift);
}

S3GenStage::~S3GenStage() = default;

GemmPrecision S3GenStage::cfm_linear_precision() const { return cfm_->estimator().linear_precision(); }

void S3GenStage::check_fits(const Voice& v, const std::string& what) const {
  CBX_CHECK(int64_t(v.prompt_token.size()) <= max_prompt_tokens_,
            "%s: %zu S3Gen prompt tokens exceed the %lld the pipeline reserved", what.c_str(), v.prompt_token.size(),
            (long long)max_prompt_tokens_);
  const int64_t extra = c_.flow.token_mel_ratio * int64_t(v.prompt_token.size()) - v.n_prompt_frames();
  CBX_CHECK(c_.flow.token_mel_ratio * max_speech_ + extra <= hift_->max_frames(),
            "%s: the prompt mel has %lld frames for %zu prompt tokens (too few)", what.c_str(),
            (long long)v.n_prompt_frames(), v.prompt_token.size());
}

S3GenStream& S3GenStage::stream() {
  if (!stream_) stream_ = std::make_unique<S3GenStream>(*this, c_);
  return *stream_;
}

S3GenRngState S3GenStage::rng_state() const {
  return {cfm_->generator_seed(), cfm_->generator_calls(), hift_->generator_seed(), hift_->generator_calls()};
}

void S3GenStage::set_rng_state(const S3GenRngState& st) {
  cfm_->set_generator(st.cfm_seed, st.cfm_calls);
  hift_->set_generator(st.hift_seed, st.hift_calls);
}

void S3GenStage::reseed(uint64_t seed) {
  cfm_->set_seed(seed);
  hift_->set_seed(seed ^ 0x5851F42D4C957F2Dull);
}

std::vector<float> S3GenStage::to_audio(const Voice& v, const std::vector<int32_t>& speech, SynthTimings* tm,
                                        const Tensor& cfm_noise, const HiftDraws* hift_draws) {
  CBX_CHECK(!speech.empty() && int64_t(speech.size()) <= max_speech_, "s3gen: %zu speech tokens (1 .. %lld)",
            speech.size(), (long long)max_speech_);
  const double t0 = pipeline_now_ms();
  FlowEncoderOutput fo =
      flow_->forward(v.prompt_token.data(), int64_t(v.prompt_token.size()), speech.data(), int64_t(speech.size()),
                     v.prompt_feat.data(), v.n_prompt_frames(), v.embedding.data(), int64_t(v.embedding.size()));
  const double t1 = pipeline_now_ms();
  const Tensor& mel = cfm_->solve(fo.mu, fo.spks, fo.cond, fo.n_prompt_frames, cfm_noise);
  const double t2 = pipeline_now_ms();
  const Tensor& wave = hift_->forward(mel, hift_draws);
  std::vector<float> out(wave.ptr<float>(), wave.ptr<float>() + wave.numel());
  hift_trim_fade(out.data(), int64_t(out.size()), c_.pipeline.trim_fade_samples);
  const double t3 = pipeline_now_ms();
  if (tm) {
    tm->flow_ms += t1 - t0;
    tm->cfm_ms += t2 - t1;
    tm->hift_ms += t3 - t2;
  }
  return out;
}

}  // namespace cbx
