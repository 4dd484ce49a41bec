// The C++ objects behind the C API's handles, for front ends in this repository that drive the
// pipeline between C API calls (tools/server's batching engine, pipeline/batch_synth.h). Not part
// of the public API (include/chatterbox.h); the caller must hold model_mutex while it uses the
// pipeline, as every C API call on the model does.
#pragma once
#include <mutex>

#include "chatterbox.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/pipeline.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace cbx {

// The pipeline of a model, any variant.
Pipeline* model_pipeline(cbx_model* model);
// Typed access where a feature is variant-specific (the batching engine):
// the Turbo / Nano pipeline of a model; null for a Multilingual model.
TurboPipeline* model_turbo_pipeline(cbx_model* model);
// The Multilingual pipeline of a model; null for a Turbo / Nano model.
MtlPipeline* model_mtl_pipeline(cbx_model* model);
std::mutex& model_mutex(cbx_model* model);
// The voice a handle holds (null for null: the built-in voice).
const Voice* voice_of_handle(const cbx_voice* voice);
// cbx_synth_params -> the Turbo pipeline's parameters, checked as cbx_synthesize_voice checks
// them (the same messages), p.stream and its schedule included. Throws InvalidArgumentError.
TurboSynthParams turbo_params_of(const cbx_model* model, const cbx_synth_params& p);
// The same for a Multilingual model (the language resolved and checked as cbx_synthesize_voice does).
MtlSynthParams mtl_params_of(const cbx_model* model, const cbx_synth_params& p);

}  // namespace cbx
