// `chatterbox say`'s engine: one loaded model (any variant, through pipeline/pipeline.h), its
// voices and its prompt cache, behind one synthesize call.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "pipeline/pipeline.h"
#include "pipeline/synth_options.h"
#include "pipeline/voice.h"

namespace cbx::cli {

// Before the (long) model load: a .voice file is read and checked against the model; a reference
// recording must at least be readable. Throws naming the file.
void check_voice_early(const std::string& path, const ModelConfig& cfg);

class SayEngine {
 public:
  // Loads the model (the long part); on_progress (optional) follows it (pipeline/load_progress.h).
  SayEngine(const std::string& model, const UserLoadOptions& load, const LoadProgressFn& on_progress = nullptr);

  // The voice for the next synthesize calls: "" = the built-in voice; a .voice file or a
  // reference recording (built once, kept for later calls with the same path). Warnings of a
  // build go to *warnings.
  void use_voice(const std::string& path, std::vector<std::string>* warnings);

  // The voice prefix from / into a prompt cache file (pipeline/prefix_cache.h; models that keep
  // one only: Pipeline::keeps_voice_prefix).
  bool load_prefix_cache(const std::string& path, std::string* why);
  void save_prefix_cache(const std::string& path);

  // text -> audio chunk by chunk (on_audio: each text chunk's samples, as produced; with stream,
  // each streamed piece: pipeline/stream_synth.h, the variant's default schedule).
  SynthTimings synthesize(const std::string& text, const UserSynthOptions& o, const std::string& language,
                          const SynthAudioFn& on_audio, const SynthProgressFn& on_progress, bool stream = false);

  int sample_rate() const { return pipe_->sample_rate(); }
  int n_threads() const { return pipe_->n_threads(); }
  int64_t max_new_tokens() const { return pipe_->chunk_token_limit(); }  // the speech-token limit a chunk may reach
  const ModelConfig& config() const { return pipe_->config(); }

 private:
  std::unique_ptr<Pipeline> pipe_;
  std::string voice_path_;               // in use ("" = built-in)
  std::map<std::string, Voice> voices_;  // built / loaded, by path
};

}  // namespace cbx::cli
