// One entry point for every model variant: the interface TurboPipeline (Turbo / Nano,
// pipeline/turbo_pipeline.h) and MtlPipeline (Multilingual, pipeline/mtl_pipeline.h) implement,
// and load_pipeline, which picks the implementation from the GGUF's config. Front ends (the C
// API, `chatterbox say`) drive a model through it without knowing its variant.
//
// Parameters. synthesize takes the user's values (UserSynthOptions, pipeline/synth_options.h)
// and checks them the same way on every variant, in this order: the language
// (resolve_language), then every value in field order (validate: the fields a variant ignores
// are checked too, so a bad value gets the same InvalidArgumentError and message everywhere),
// then the streaming schedule (check_stream_schedule); the model's own limits follow in the
// implementation. Values a variant does not use are then dropped (ignored_options lists them).
//
// Which sampler chain runs is the model's: the GGUF's chatterbox.sampler.order ("turbo": Turbo's
// temperature, top-k, top-p, repetition order; "llama": Multilingual's CFG, repetition,
// temperature, min-p, top-p order; models/sampler.h). load_pipeline refuses a model whose
// stored order its pipeline does not run (UnsupportedModelError).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "pipeline/load_progress.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/stream_synth.h"
#include "pipeline/synth_options.h"

namespace cbx {

class GgufFile;
class ThreadPool;
struct Voice;

// One synthesize call's parameters, for any variant.
struct SynthRequest {
  UserSynthOptions options;  // checked by synthesize (see the header comment)
  // Streaming (docs/streaming.md): on_audio gets each text chunk's audio in pieces while T3
  // decodes, on this schedule (nullopt: default_stream_schedule of the model's variant).
  bool stream = false;
  std::optional<StreamSchedule> stream_schedule;
  SynthProgressFn on_progress;  // optional (pipeline_common.h)
};

class Pipeline {
 public:
  virtual ~Pipeline() = default;

  Variant variant() const { return config().variant; }
  virtual const ModelConfig& config() const = 0;
  int sample_rate() const { return config().pipeline.sample_rate; }
  virtual int n_threads() const = 0;
  // Speech tokens one generation may decode (the load option max_new_tokens, or the GGUF's).
  virtual int64_t max_new_tokens() const = 0;
  // The speech tokens a text chunk holds at most (SynthTimings::chunks_at_limit counts chunks
  // that reached it): Turbo's prefill token plus max_new_tokens; Multilingual max_new_tokens.
  virtual int64_t chunk_token_limit() const = 0;
  // Language codes the model speaks, sorted (Turbo / Nano: "en").
  virtual std::vector<std::string> languages() const = 0;

  // The request's language as the model names it (resolve_language), or InvalidArgumentError
  // for the first bad value (see the header comment).
  std::string check(const SynthRequest& r) const;
  // text (UTF-8) -> mono float audio at sample_rate(), with the voice in use. Not reentrant:
  // one call at a time. Throws TextError (empty / invalid UTF-8), InvalidArgumentError (check,
  // a value beyond the model's limits), AbortedError (should_abort, or on_audio returned
  // false), cbx::Error.
  std::vector<float> synthesize(const std::string& text, const SynthRequest& r, SynthTimings* timings = nullptr,
                                const SynthAudioFn& on_audio = nullptr, const SynthAbortFn& should_abort = nullptr);

  // Voices (pipeline/voice.h). set_voice throws cbx::Error prefixed by `what` for a voice the
  // model cannot use (variant, sizes) and keeps the previous one; reset_voice goes back to the
  // GGUF's built-in voice.
  virtual void set_voice(const Voice& v, const std::string& what = "voice") = 0;
  virtual void reset_voice() = 0;
  virtual const Voice& voice() const = 0;
  virtual const Voice& builtin_voice() const = 0;
  // The model file and thread pool, e.g. for a VoiceBuilder over the same weights.
  virtual const GgufFile& gguf() const = 0;
  virtual ThreadPool& pool() = 0;

  // The T3 voice prefix (Turbo / Nano: speaker row + voice prompt, independent of the text;
  // pipeline/prefix_cache.h). Multilingual keeps none (its prefix depends on the text):
  // keeps_voice_prefix() is false, prepare_voice does nothing and returns 0, and the cache
  // calls throw UnsupportedModelError.
  virtual bool keeps_voice_prefix() const { return false; }
  // Computes the prefix of the voice in use ahead of the next synthesize; returns its ms (0 when
  // already kept).
  virtual double prepare_voice() { return 0; }
  // See TurboPipeline::load_prefix_cache / save_prefix_cache.
  virtual bool load_prefix_cache(const std::string& path, std::string* why);
  virtual double save_prefix_cache(const std::string& path);

 protected:
  // The request's per-call fields (progress, streaming: the schedule or the variant's default)
  // onto a variant's own parameters (TurboSynthParams, MtlSynthParams).
  template <class Params>
  void copy_call_fields(const SynthRequest& r, Params& p) const {
    p.on_progress = r.on_progress;
    p.stream = r.stream;
    p.stream_schedule = r.stream_schedule.value_or(default_stream_schedule(variant()));
  }
  // synthesize after check: `language` is check's result.
  virtual std::vector<float> synthesize_checked(const std::string& text, const SynthRequest& r,
                                                const std::string& language, SynthTimings* timings,
                                                const SynthAudioFn& on_audio, const SynthAbortFn& should_abort) = 0;
};

// Throws UnsupportedModelError naming `path` unless c's sampler order (the GGUF's
// chatterbox.sampler.order) is `order`, the chain the calling pipeline runs.
void check_sampler_order(const std::string& path, const ModelConfig& c, const char* order);

// Loads the GGUF at `path` in the pipeline its config names (variant turbo / nano: TurboPipeline;
// mtl: MtlPipeline). Throws InvalidArgumentError for a load option out of range (validate, or the
// model's own limits), UnsupportedModelError for a model no pipeline runs, cbx::Error naming the
// file on any other problem. on_progress (optional) follows the load (pipeline/load_progress.h):
// its fractions rise to exactly 1 on success; returning false cancels the load (AbortedError,
// everything loaded so far freed).
std::unique_ptr<Pipeline> load_pipeline(const std::string& path, const UserLoadOptions& o = {},
                                        const LoadProgressFn& on_progress = nullptr);

}  // namespace cbx
