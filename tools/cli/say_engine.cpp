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

SayEngine::SayEngine(const std::string& model, const ModelConfig& cfg, const UserLoadOptions& load) : cfg_(cfg) {
  if (cfg.variant == Variant::Mtl)
    mtl_ = std::make_unique<MtlPipeline>(model, to_mtl_load_params(load));
  else
    turbo_ = std::make_unique<TurboPipeline>(model, to_turbo_load_params(load));
}

void SayEngine::use_voice(const std::string& path, std::vector<std::string>* warnings) {
  if (path == voice_path_) return;
  if (path.empty()) {
    if (mtl_) mtl_->reset_voice();
    else turbo_->reset_voice();
    voice_path_.clear();
    return;
  }
  auto it = voices_.find(path);
  if (it == voices_.end()) {
    const GgufFile& f = mtl_ ? mtl_->gguf() : turbo_->gguf();
    ThreadPool& pool = mtl_ ? mtl_->pool() : turbo_->pool();
    it = voices_.emplace(path, load_or_build_voice(path, f, cfg_, pool, {}, nullptr, warnings)).first;
  }
  if (mtl_) mtl_->set_voice(it->second, path);
  else turbo_->set_voice(it->second, path);
  voice_path_ = path;
}

bool SayEngine::load_prefix_cache(const std::string& path, std::string* why) {
  CBX_CHECK(turbo_, "--prompt-cache is for Turbo models");
  return turbo_->load_prefix_cache(path, why);
}

void SayEngine::save_prefix_cache(const std::string& path) {
  CBX_CHECK(turbo_, "--prompt-cache is for Turbo models");
  turbo_->save_prefix_cache(path);
}

SynthTimings SayEngine::synthesize(const std::string& text, const UserSynthOptions& o, const std::string& language,
                                   const SynthAudioFn& on_audio, const SynthProgressFn& on_progress, bool stream) {
  SynthTimings tm;
  if (mtl_) {
    MtlSynthParams p = to_mtl_params(o);
    p.language = language;
    p.on_progress = on_progress;
    p.stream = stream;
    mtl_->synthesize(text, p, &tm, on_audio);
  } else {
    TurboSynthParams p = to_turbo_params(o);
    p.on_progress = on_progress;
    p.stream = stream;
    turbo_->synthesize(text, p, &tm, on_audio);
  }
  return tm;
}

int SayEngine::sample_rate() const { return mtl_ ? mtl_->sample_rate() : turbo_->sample_rate(); }
int SayEngine::n_threads() const { return mtl_ ? mtl_->n_threads() : turbo_->n_threads(); }
int64_t SayEngine::max_new_tokens() const { return mtl_ ? mtl_->max_new_tokens() : turbo_->max_new_tokens() + 1; }

}  // namespace cbx::cli
