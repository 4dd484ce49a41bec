#include "say_engine.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/gguf.h"

namespace cbx::cli {

void check_voice_early(const std::string& path, const ModelConfig& cfg) {
  if (is_gguf_file(path)) {
    check_voice(load_voice(path), cfg, path);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  CBX_CHECK(in, "voice '%s': cannot open it: %s", path.c_str(), std::strerror(errno));
}

SayEngine::SayEngine(const std::string& model, const UserLoadOptions& load, const LoadProgressFn& on_progress)
    : pipe_(load_pipeline(model, load, on_progress)) {}

void SayEngine::use_voice(const std::string& path, std::vector<std::string>* warnings) {
  if (path == voice_path_) return;
  if (path.empty()) {
    pipe_->reset_voice();
    voice_path_.clear();
    return;
  }
  auto it = voices_.find(path);
  if (it == voices_.end())
    it = voices_
             .emplace(path,
                      load_or_build_voice(path, pipe_->gguf(), pipe_->config(), pipe_->pool(), {}, nullptr, warnings))
             .first;
  pipe_->set_voice(it->second, path);
  voice_path_ = path;
}

bool SayEngine::load_prefix_cache(const std::string& path, std::string* why) {
  CBX_CHECK(pipe_->keeps_voice_prefix(), "--prompt-cache is for Turbo models");
  return pipe_->load_prefix_cache(path, why);
}

void SayEngine::save_prefix_cache(const std::string& path) {
  CBX_CHECK(pipe_->keeps_voice_prefix(), "--prompt-cache is for Turbo models");
  pipe_->save_prefix_cache(path);
}

SynthTimings SayEngine::synthesize(const std::string& text, const UserSynthOptions& o, const std::string& language,
                                   const SynthAudioFn& on_audio, const SynthProgressFn& on_progress, bool stream) {
  SynthRequest r;
  r.options = o;
  r.options.language = language;
  r.on_progress = on_progress;
  r.stream = stream;
  SynthTimings tm;
  pipe_->synthesize(text, r, &tm, on_audio);
  return tm;
}

}  // namespace cbx::cli
