// Chatterbox Turbo / Nano end to end (spec §3.1, §7, §10): text -> punc_norm (Turbo) -> GPT-2 BPE
// -> T3 Turbo -> speech-token post-processing -> S3Gen flow encoder -> mean-flow CFM -> HiFT ->
// start trim/fade -> float audio at 24 kHz, with the GGUF's built-in voice or another (set_voice).
//
// Loading reads the GGUF once and reserves every buffer for the worst case (one generation of
// max_new_tokens speech tokens plus the voice prompt); synthesize allocates only the output.
//
// Long text. One T3 generation holds at most max_new_tokens (+1) speech tokens (1000 ~ 40 s).
// Upstream would cut longer speech silently. Here the normalised text is split into chunks of
// about max_chunk_tokens BPE tokens (default 80, ~20-25 s of speech at a normal rate), at the
// highest level that fits: whole sentences (. ! ? then a space) are packed greedily; a longer
// sentence is cut at clause punctuation (, ; :), a longer clause between words, a longer word
// into byte runs. A chunk cut inside a sentence ends with "," (continuation prosody; may add one
// token). Each chunk is synthesised on its own (its own 40 ms start trim/fade, its own 3 silence
// tokens ~ 120 ms at the end) and the audio is concatenated. Text that fits in one chunk goes
// through exactly the upstream path. A chunk whose generation reaches max_new_tokens without EOS
// is reported (chunks_at_limit), never silently dropped.
//
// Watermark: upstream applies the Perth neural watermark to every output. It is NOT ported:
// the audio produced here carries no watermark.
//
// Randomness: the sampler, the CFM noise and the HiFT source draws come from seeded
// generators, so the same text, parameters and seed give the same samples (any thread count
// of the same build). Upstream is unseeded; draws do not reproduce torch's.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "models/model_config.h"
#include "models/sampler.h"
#include "ops/matmul.h"
#include "pipeline/load_progress.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/stream_synth.h"

namespace cbx {

class GgufFile;
class Gpt2Tokenizer;
class T3Turbo;
class ThreadPool;
struct Voice;

struct TurboLoadParams {
  int n_threads = 0;           // 0 = available_cpus() (core/cpu.h); else 1 .. 1024
  DType kv_type = DType::F16;  // T3 KV cache: F16 or F32
  // Speech tokens per generation after the first; negative = the GGUF's (1000); else 1 .. what
  // the model's T3 positions hold after the voice prompt and the text.
  int64_t max_new_tokens = -1;
  // T3 decode: Q4_0 / Q8_0 matrices copied into planar row pairs (kernels/matvec_q4p.h) where
  // their kernel exists; the same audio either way. false: no copies (Q8_0 Turbo: -328 MB),
  // a slower decode.
  bool repack = true;
  // GEMM precision of every stage (ops/matmul.h): Auto = from the weights (BF16 for lossy
  // weights, F32 for f32 ones), else that precision everywhere a GEMM runs (T3 prefill, flow,
  // CFM, HiFT). The S3 tokenizer of voice building keeps its own (F32).
  GemmPrecision gemm = GemmPrecision::Auto;
  // The CFM estimator's linears (ops/matmul.h): Auto = as `gemm`; Int8 runs its transformer
  // linears on the int8 GEMM (weights per channel, activations per row; faster, slightly lossier).
  GemmPrecision cfm_precision = GemmPrecision::Auto;
  // Called as the load's stages finish (pipeline/load_progress.h); false cancels the load
  // (AbortedError). Optional.
  LoadProgressFn on_progress;
};

struct TurboSynthParams {
  uint64_t seed = 0;
  // Negative = the GGUF's sampler.* defaults (Turbo: 0.8, 1000, 0.95, 1.2); any other value
  // (NaN too) must be in the range of pipeline/synth_options.h (InvalidArgumentError).
  float temperature = -1;
  int32_t top_k = -1;  // 0 disables top-k
  double top_p = -1;
  float repetition_penalty = -1;
  int64_t max_chunk_tokens = 0;  // BPE tokens per text chunk; 0 = 80; else 1 .. the T3 text limit
  SynthProgressFn on_progress;   // optional (pipeline_common.h)
  // Streaming (docs/streaming.md): on_audio gets each text chunk's audio in pieces while T3
  // decodes, on this schedule; the concatenation has the non-streamed length.
  bool stream = false;
  StreamSchedule stream_schedule;
};

// Shared with the Multilingual pipeline (pipeline/pipeline_common.h).
using TurboTimings = SynthTimings;
using TurboAudioFn = SynthAudioFn;
using TurboAbortFn = SynthAbortFn;

class TurboPipeline final : public Pipeline {
 public:
  // Throws cbx::Error naming the file on any problem, UnsupportedModelError for a non-Turbo model.
  explicit TurboPipeline(const std::string& gguf_path, const TurboLoadParams& p = {});
  ~TurboPipeline() override;
  TurboPipeline(const TurboPipeline&) = delete;
  TurboPipeline& operator=(const TurboPipeline&) = delete;

  using Pipeline::synthesize;  // the variant-neutral call (pipeline/pipeline.h)
  // text (UTF-8) -> mono float audio at sample_rate() with Turbo's own parameters. Not
  // reentrant: one call at a time. Throws TextError (empty / invalid UTF-8), AbortedError,
  // cbx::Error.
  std::vector<float> synthesize(const std::string& text, const TurboSynthParams& p, TurboTimings* timings = nullptr,
                                const TurboAudioFn& on_audio = nullptr, const TurboAbortFn& should_abort = nullptr);

  // The text front-end: punc_norm (Turbo), then chunking (see the header comment). Each chunk
  // is ready for the tokenizer. Throws TextError.
  std::vector<std::string> split_text(const std::string& text, int64_t max_chunk_tokens = 0) const;
  std::vector<int32_t> tokenize(const std::string& normalized) const;

  // Post-processed speech tokens (< 6561, silence appended) -> audio with the voice in use:
  // flow encoder, CFM, HiFT, start trim/fade. Adds to t's flow/cfm/hift times.
  std::vector<float> tokens_to_audio(const std::vector<int32_t>& speech_tokens, TurboTimings* t = nullptr);
  // tokens_to_audio streamed as synthesize streams a chunk with these tokens (stream_synth.h):
  // the tokens before the appended silence arrive one at a time, pieces go to on_piece; the
  // result is their concatenation (the non-streamed length).
  std::vector<float> tokens_to_audio_stream(const std::vector<int32_t>& speech_tokens, const StreamSchedule& s,
                                            TurboTimings* t = nullptr, const StreamSink& on_piece = nullptr);
  // The streaming S3Gen of the voice in use (benches drive it between their own decode steps).
  S3GenStream& s3gen_stream();
  // Restart the CFM and HiFT generators (synthesize does this with its seed).
  void reseed_s3gen(uint64_t seed);
  S3GenRngState s3gen_rng_state() const;
  void set_s3gen_rng_state(const S3GenRngState& s);
  // The sampler synthesize uses for p (the GGUF's defaults where p leaves a value negative;
  // seed not set). Throws InvalidArgumentError for a value out of range.
  SamplerParams sampler_params(const TurboSynthParams& p) const;

  const ModelConfig& config() const override;
  int n_threads() const override;
  int64_t max_new_tokens() const override;
  int64_t chunk_token_limit() const override;           // max_new_tokens() + 1 (the prefill token)
  std::vector<std::string> languages() const override;  // {"en"}
  GemmPrecision cfm_precision() const;                  // what the CFM estimator's linears run (S3GenStage)
  GemmPrecision gemm_precision() const;                 // TurboLoadParams::gemm (callers driving t3() hold a scope)
  T3Turbo& t3();
  // The voice in use (default: the built-in one, conds.pt) as the pipeline uses it.
  const std::vector<float>& speaker_emb() const;
  const std::vector<int32_t>& cond_prompt_tokens() const;

  // Voices (pipeline/voice.h). Buffers are reserved at load for any voice check_voice accepts
  // (up to cond_prompt_len T3 prompt tokens, a 10 s S3Gen reference), so switching allocates
  // nothing but the copy. set_voice throws cbx::Error prefixed by `what` for an incompatible
  // voice (variant, sizes) and keeps the previous one.
  void set_voice(const Voice& v, const std::string& what = "voice") override;
  void reset_voice() override;  // back to the built-in voice
  const Voice& voice() const override;
  bool keeps_voice_prefix() const override { return true; }
  // Computes the T3 voice prefix of the voice in use ahead of the next synthesize
  // (T3Turbo::warm_prefix); returns its ms (0 when already kept).
  double prepare_voice() override;
  // Disk cache of that prefix (pipeline/prefix_cache.h; chatterbox say --prompt-cache).
  // load_prefix_cache keeps the prefix stored in `path` when the file holds the voice in use
  // for these T3 weights, kernels and KV type, and returns true; it returns false, with the
  // reason in *why, when the file is absent, holds another voice / model / kernel path, or
  // is a damaged cache (then save_prefix_cache may overwrite it). Throws cbx::Error when the
  // file exists but is not a prompt cache (never overwrite it) or cannot be read.
  bool load_prefix_cache(const std::string& path, std::string* why) override;
  // Writes the voice's prefix to `path` (computing it first when not kept); returns the ms
  // spent computing (0 when it was kept). Throws cbx::Error naming the path on failure.
  double save_prefix_cache(const std::string& path) override;
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
