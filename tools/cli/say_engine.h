// `chatterbox say`'s engine: one loaded model (Turbo / Nano or Multilingual, dispatched on the
// GGUF's variant), its voices and its prompt cache, behind one synthesize call.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/synth_options.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace cbx::cli {

// Before the (long) model load: a .voice file is read and checked against the model; a reference
// recording must at least be readable. Throws naming the file.
void check_voice_early(const std::string& path, const ModelConfig& cfg);

class SayEngine {
 public:
  // Loads the model (the long part). cfg: its config, read before (cheap).
  SayEngine(const std::string& model, const ModelConfig& cfg, const UserLoadOptions& load);

  // The voice for the next synthesize calls: "" = the built-in voice; a .voice file or a
  // reference recording (built once, kept for later calls with the same path). Warnings of a
  // build go to *warnings.
  void use_voice(const std::string& path, std::vector<std::string>* warnings);

  // Turbo: the voice prefix from / into a prompt cache file (pipeline/prefix_cache.h).
  bool load_prefix_cache(const std::string& path, std::string* why);
  void save_prefix_cache(const std::string& path);

  // text -> audio chunk by chunk (on_audio: each text chunk's samples, as produced).
  // stream: Turbo's token-chunked streaming (pipeline/stream_synth.h; Multilingual: an error).
  SynthTimings synthesize(const std::string& text, const UserSynthOptions& o, const std::string& language,
                          const SynthAudioFn& on_audio, const SynthProgressFn& on_progress, bool stream = false);

  bool multilingual() const { return mtl_ != nullptr; }
  int sample_rate() const;
  int n_threads() const;
  int64_t max_new_tokens() const;  // the speech-token limit a chunk may reach
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  std::unique_ptr<TurboPipeline> turbo_;
  std::unique_ptr<MtlPipeline> mtl_;
  std::string voice_path_;                // in use ("" = built-in)
  std::map<std::string, Voice> voices_;   // built / loaded, by path
};

}  // namespace cbx::cli
