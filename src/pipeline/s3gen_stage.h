// S3Gen as both pipelines run it (spec §8-§10): flow encoder -> CFM (Turbo: mean-flow, 2 steps;
// Multilingual: 10 cosine steps with CFG as a batch of two, as the GGUF's cfm.* says) -> HiFT ->
// start trim/fade, with a Voice's reference dict (prompt_token, prompt_feat, embedding).
//
// Every buffer is reserved at construction for the worst case: max_speech generated tokens
// after the longest S3Gen prompt any valid voice has (dec_cond_seconds = 10 s of tokens, or the
// built-in voice's, if longer); to_audio allocates only its result.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "models/cfm_estimator.h"
#include "models/flow_encoder.h"
#include "models/model_config.h"
#include "pipeline/load_progress.h"
#include "pipeline/pipeline_common.h"

namespace cbx {

class CfmSolver;
class S3GenStream;
class GgufFile;
class HiftVocoder;
struct HiftDraws;
class ThreadPool;
struct Voice;

class S3GenStage {
 public:
  // f, c and pool must outlive this object. builtin sizes the reservations (see above). gemm:
  // the GEMM precision of the flow encoder, CFM and HiFT (ops/matmul.h; Auto: from their weights);
  // cfm_precision: the CFM estimator's (Auto: gemm; Int8: int8 transformer linears). progress
  // (may be null): told when the flow encoder, the CFM and HiFT are loaded (LoadStage::Flow, Cfm,
  // Hift); its AbortedError propagates.
  S3GenStage(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const Voice& builtin, int64_t max_speech,
             GemmPrecision gemm = GemmPrecision::Auto, GemmPrecision cfm_precision = GemmPrecision::Auto,
             LoadProgress* progress = nullptr);
  ~S3GenStage();
  S3GenStage(const S3GenStage&) = delete;
  S3GenStage& operator=(const S3GenStage&) = delete;

  // speech [1 .. max_speech] (ids < flow.vocab) with v's reference -> 24 kHz waveform after the
  // start trim/fade. Adds the flow / CFM / HiFT wall times to tm (may be null). Parity tests may
  // inject the random draws: cfm_noise F32 [80, 2 (Tp + N)] and HiFT's phases + noise.
  std::vector<float> to_audio(const Voice& v, const std::vector<int32_t>& speech, SynthTimings* tm,
                              const Tensor& cfm_noise = Tensor{}, const HiftDraws* hift_draws = nullptr);
  // Throws cbx::Error prefixed by `what` when v's S3Gen prompt exceeds the reservations.
  void check_fits(const Voice& v, const std::string& what) const;
  // Restarts the CFM noise and HiFT source generators.
  void reseed(uint64_t seed);
  // The CFM / HiFT generators' state, read and restored (pipeline_common.h S3GenRngState).
  S3GenRngState rng_state() const;
  void set_rng_state(const S3GenRngState& s);

  int64_t max_prompt_tokens() const { return max_prompt_tokens_; }
  int64_t max_speech() const { return max_speech_; }
  // What the CFM estimator's transformer linears run (the load-time choice resolved: F32, BF16, Int8).
  GemmPrecision cfm_linear_precision() const;
  CfmSolver& cfm() { return *cfm_; }
  FlowEncoder& flow() { return *flow_; }
  HiftVocoder& hift() { return *hift_; }
  const ModelConfig& config() const { return c_; }
  // The streaming front of this stage (pipeline/stream_synth.h), made on first use.
  S3GenStream& stream();

 private:
  const ModelConfig& c_;
  int64_t max_prompt_tokens_ = 0, max_speech_ = 0;
  // The per-call buffers of the flow encoder, the CFM estimator and HiFT: they run one after
  // the other and pass their results on in their own arenas, so one arena (the largest need)
  // serves all three. Declared before them: it outlives them.
  Arena work_;
  FlowEncoderWeights flow_w_;
  std::unique_ptr<FlowEncoder> flow_;
  CfmEstimatorWeights cfm_w_;
  std::unique_ptr<CfmSolver> cfm_;
  std::unique_ptr<HiftVocoder> hift_;
  std::unique_ptr<S3GenStream> stream_;
};

}  // namespace cbx
