#include "pipeline/pipeline.h"

#include "core/gguf.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/turbo_pipeline.h"

namespace cbx {

std::string Pipeline::check(const SynthRequest& r) const {
  const std::string language = resolve_language(variant(), languages(), r.options.language);
  validate(r.options);
  if (r.stream_schedule) check_stream_schedule(*r.stream_schedule);
  return language;
}

std::vector<float> Pipeline::synthesize(const std::string& text, const SynthRequest& r, SynthTimings* timings,
                                        const SynthAudioFn& on_audio, const SynthAbortFn& should_abort) {
  const std::string language = check(r);
  return synthesize_checked(text, r, language, timings, on_audio, should_abort);
}

namespace {
[[noreturn]] void no_voice_prefix(const Pipeline& p) {
  throw UnsupportedModelError(std::string(variant_name(p.variant())) +
                              " models keep no voice prefix (it depends on the text)");
}
}  // namespace

bool Pipeline::load_prefix_cache(const std::string&, std::string*) { no_voice_prefix(*this); }
double Pipeline::save_prefix_cache(const std::string&) { no_voice_prefix(*this); }

void check_sampler_order(const std::string& path, const ModelConfig& c, const char* order) {
  if (c.pipeline.sampler_order != order)
    throw UnsupportedModelError(path + ": sampler order '" + c.pipeline.sampler_order +
                                "' (chatterbox.sampler.order); a " + variant_name(c.variant) + " model runs the '" +
                                order + "' chain");
}

std::unique_ptr<Pipeline> load_pipeline(const std::string& path, const UserLoadOptions& o,
                                        const LoadProgressFn& on_progress) {
  validate(o);
  const ModelConfig cfg = read_config(*GgufFile::open(path));
  if (cfg.variant == Variant::Mtl) {
    MtlLoadParams p = to_mtl_load_params(o);
    p.on_progress = on_progress;
    return std::make_unique<MtlPipeline>(path, p);
  }
  TurboLoadParams p = to_turbo_load_params(o);
  p.on_progress = on_progress;
  return std::make_unique<TurboPipeline>(path, p);
}

}  // namespace cbx
