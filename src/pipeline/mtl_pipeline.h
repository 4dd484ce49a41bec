// Chatterbox Multilingual end to end (spec §3.2, §7, §8, §9, §10, §14): text -> punc_norm
// (Multilingual) -> MtlTokenizer(language) -> T3 Llama with CFG (batch of two) -> speech-token
// post-processing -> S3Gen flow encoder -> 10-step cosine CFM with CFG 0.7 (batch of two) ->
// HiFT -> start trim/fade -> tail trim -> float audio at 24 kHz, with the GGUF's built-in voice
// or another (set_voice, src/pipeline/voice.h).
//
// Post-processing (upstream mtl_tts.py generate + drop_invalid_tokens):
//   tokens = generated[after the first SOS 6561 (if any) : before the first EOS 6562 (if any)]
//   then ids >= 6561 are dropped. Upstream does not filter (spec §15.11): such an id (T3's
//   vocabulary has 8194) would make its flow embedding lookup (6561 rows) fail. Upstream
//   assumes at most one SOS/EOS; with several, the first of each counts here.
//   audio  = S3Gen(tokens)[: max(1, N - 1) * 960]   (the last token's audio is dropped)
//   N = 0 gives no audio for that chunk (upstream would give the same empty tail-trimmed wave).
//
// Streaming (MtlSynthParams::stream, docs/streaming.md): the same post-processing decides, token
// by token, which sampled tokens the stream gets (after the first SOS, before the first EOS,
// ids < 6561); the last run caps the audio at the tail trim's length. One exception: a SOS
// sampled after audio of earlier tokens was already passed on cannot take it back; those
// tokens are kept (the SOS is dropped as an invalid id), where the non-streamed result drops them.
//
// Parameters: every sampler value defaults to the GGUF's sampler.* metadata (upstream generate:
// temperature 0.8, cfg_weight 0.5, min_p 0.05, top_p 1.0, repetition_penalty 1.2, exaggeration
// 0.5). As upstream, the exaggeration parameter always sets emotion_adv, whatever the voice
// stored (generate rebuilds T3Cond when they differ).
//
// Long text. One T3 generation holds at most max_new_tokens (1000 ~ 40 s) speech tokens. The
// normalised text is split into chunks of at most max_chunk_tokens MtlTokenizer tokens
// (default 150, language tag included; ~10-15 s of speech for alphabetic scripts) with the
// shared chunker (pipeline_common.h): sentences (". ! ? ؟ ।" then a space, or "。！？"
// anywhere), then clauses (", ; : ،" then a space, or "，、；："), then words, then
// code-point runs. Each chunk is synthesised on its own (own start trim/fade and tail trim) and
// the audio is concatenated. Text that fits in one chunk goes exactly the upstream path.
//
// Memory: loading reserves every buffer for the worst case (max_new_tokens speech tokens after
// the longest voice prompt S3Gen takes, 10 s); synthesize allocates only the output.
//
// Watermark: upstream applies Perth to every output; it is NOT ported (no watermark).
// Randomness: sampler, CFM noise and HiFT draws come from seeded generators: same text,
// language, parameters, voice and seed give the same samples.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "models/model_config.h"
#include "models/t3_mtl.h"
#include "ops/matmul.h"
#include "pipeline/load_progress.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/stream_synth.h"

namespace cbx {

class GgufFile;
class ThreadPool;
class MtlTokenizer;
struct HiftDraws;
struct Voice;

struct MtlLoadParams {
  int n_threads = 0;                         // 0 = available_cpus() (core/cpu.h); else 1 .. 1024
  DType kv_type = DType::F16;                // T3 KV cache: F16 or F32
  int64_t max_new_tokens = -1;               // speech tokens per generation; negative = the GGUF's (1000); else
                                             // 1 .. what the model's T3 positions hold
  bool repack = true;                        // as TurboLoadParams::repack
  GemmPrecision gemm = GemmPrecision::Auto;  // as TurboLoadParams::gemm
  GemmPrecision cfm_precision = GemmPrecision::Auto;  // as TurboLoadParams::cfm_precision
  LoadProgressFn on_progress;                         // as TurboLoadParams::on_progress
};

struct MtlSynthParams {
  std::string language;  // required: one of languages() (case-insensitive)
  uint64_t seed = 0;
  // Negative = the GGUF's sampler.* defaults; any other value (NaN too) must be in the range of
  // pipeline/synth_options.h (InvalidArgumentError).
  float temperature = -1, min_p = -1, top_p = -1, repetition_penalty = -1, cfg_weight = -1, exaggeration = -1;
  int64_t max_chunk_tokens = 0;  // text tokens per chunk; 0 = 150; else 1 .. the T3 text limit
  SynthProgressFn on_progress;   // optional (pipeline_common.h)
  // Streaming (docs/streaming.md): on_audio gets each text chunk's audio in pieces while T3
  // decodes, on this schedule; the concatenation has the non-streamed length (tail trim
  // included) for the same speech tokens.
  bool stream = false;
  StreamSchedule stream_schedule = default_stream_schedule(Variant::Mtl);
};

// `language` lower-cased when it is one of `supported` (case-insensitive); otherwise throws
// InvalidArgumentError listing the supported codes and names (also for an empty language).
std::string check_mtl_language(const std::vector<std::string>& supported, const std::string& language);

class MtlPipeline final : public Pipeline {
 public:
  // Throws cbx::Error naming the file on any problem, UnsupportedModelError for a non-MTL model.
  explicit MtlPipeline(const std::string& gguf_path, const MtlLoadParams& p = {});
  ~MtlPipeline() override;
  MtlPipeline(const MtlPipeline&) = delete;
  MtlPipeline& operator=(const MtlPipeline&) = delete;

  using Pipeline::synthesize;  // the variant-neutral call (pipeline/pipeline.h)
  // text (UTF-8) -> mono float audio at sample_rate() with the Multilingual parameters. Not
  // reentrant: one call at a time.
  // Throws TextError (empty / invalid UTF-8), InvalidArgumentError (unknown or missing
  // language: the message lists the supported ones; a parameter out of range), AbortedError,
  // cbx::Error.
  std::vector<float> synthesize(const std::string& text, const MtlSynthParams& p, SynthTimings* timings = nullptr,
                                const SynthAudioFn& on_audio = nullptr, const SynthAbortFn& should_abort = nullptr);
  // The T3 sampling values and the exaggeration synthesize uses for p: each negative field the
  // GGUF's default, the others checked (InvalidArgumentError, synthesize's messages).
  T3MtlSampling sampling_of(const MtlSynthParams& p, float* exaggeration) const;

  // The text front-end: punc_norm (Multilingual), then chunking. Throws TextError.
  std::vector<std::string> split_text(const std::string& text, const std::string& language,
                                      int64_t max_chunk_tokens = 0) const;
  std::vector<int32_t> tokenize(const std::string& normalized, const std::string& language) const;
  // Throws InvalidArgumentError listing the supported languages unless `language` is one
  // (case-insensitive); returns it lower-cased.
  std::string check_language(const std::string& language) const;

  // T3's output -> the tokens S3Gen takes (see the header comment).
  static std::vector<int32_t> postprocess(const std::vector<int32_t>& generated, const T3Config& c);
  // Post-processed speech tokens -> audio with the voice in use: flow encoder, CFM (10 steps,
  // CFG), HiFT, start trim/fade, tail trim. Adds to t's flow/cfm/hift times. Parity tests may
  // inject the random draws (S3GenStage::to_audio).
  std::vector<float> tokens_to_audio(const std::vector<int32_t>& speech, SynthTimings* t = nullptr,
                                     const Tensor& cfm_noise = Tensor{}, const HiftDraws* hift_draws = nullptr);
  // tokens_to_audio streamed as synthesize streams a chunk with these speech tokens
  // (stream_synth.h), tail trim included: on_piece (may be null) gets each piece as it comes;
  // the result is their concatenation (tokens_to_audio's length).
  std::vector<float> tokens_to_audio_stream(const std::vector<int32_t>& speech, const StreamSchedule& s,
                                            SynthTimings* t = nullptr, const StreamSink& on_piece = nullptr);
  // The streaming S3Gen of the voice in use (benches drive it between their own decode steps).
  S3GenStream& s3gen_stream();
  // The samples the tail trim keeps of n_speech speech tokens' audio: max(1, n - 1) tokens'.
  int64_t tail_keep_samples(int64_t n_speech) const;
  // Restart the CFM and HiFT generators (synthesize does this with its seed).
  void reseed_s3gen(uint64_t seed);
  // The generators' state (pipeline_common.h S3GenRngState; pipeline/batch_synth.h keeps one
  // per request).
  S3GenRngState s3gen_rng_state() const;
  void set_s3gen_rng_state(const S3GenRngState& s);
  // Wall time of each CFM estimator call (a batch of two) of the last tokens_to_audio, in ms.
  const std::vector<double>& cfm_step_ms() const;

  const ModelConfig& config() const override;
  int n_threads() const override;
  int64_t max_new_tokens() const override;
  int64_t chunk_token_limit() const override { return max_new_tokens(); }
  std::vector<std::string> languages() const override;  // codes, sorted
  GemmPrecision cfm_precision() const;                  // what the CFM estimator's linears run (S3GenStage)
  GemmPrecision gemm_precision() const;                 // MtlLoadParams::gemm (callers driving t3() hold a scope)
  T3Mtl& t3();

  // Voices (pipeline/voice.h), as TurboPipeline: buffers are reserved at load for any voice
  // check_voice accepts (<= cond_prompt_len T3 prompt tokens, a 10 s S3Gen reference), so
  // switching allocates nothing but the copy. set_voice throws cbx::Error prefixed by `what`
  // for an incompatible voice and keeps the previous one.
  void set_voice(const Voice& v, const std::string& what = "voice") override;
  void reset_voice() override;  // back to the built-in voice
  const Voice& voice() const override;
  const Voice& builtin_voice() const override;
  // The model file and thread pool, e.g. for a VoiceBuilder over the same weights.
  const GgufFile& gguf() const override;
  ThreadPool& pool() override;

 protected:
  std::vector<float> synthesize_checked(const std::string& text, const SynthRequest& r, const std::string& language,
                                        SynthTimings* timings, const SynthAudioFn& on_audio,
                                        const SynthAbortFn& should_abort) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_;
};

}  // namespace cbx
