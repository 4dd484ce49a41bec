// include/chatterbox.h over the variant-neutral Pipeline (pipeline/pipeline.h). Every entry point
// catches everything.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "chatterbox.h"
#include "core/gguf.h"
#include "core/log.h"
#include "core/version.h"
#include "pipeline/c_api_internal.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/pipeline.h"
#include "pipeline/synth_options.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"
#include "text/mtl_tokenizer.h"

struct cbx_voice {
  cbx::Voice v;
  std::vector<std::string> warnings;
};

struct cbx_model {
  std::unique_ptr<cbx::Pipeline> pipe;  // TurboPipeline (Turbo / Nano) or MtlPipeline
  cbx::Variant variant = cbx::Variant::Turbo;
  std::vector<std::string> languages;          // pipe->languages(), kept for cbx_model_language
  mutable std::mutex mu;                       // one synthesis (or voice build) at a time per model
  std::unique_ptr<cbx::VoiceBuilder> builder;  // made on the first cbx_voice_create
  cbx::VoiceBuildOptions builder_opts;
  cbx::SynthTimings last;
  bool have_last = false;
};

namespace {

thread_local std::string g_last_error;

cbx_status set_error(cbx_status s, const std::string& msg) {
  g_last_error = msg;
  return s;
}

// Copies a caller's versioned struct over the defaults: fields past its struct_size keep them.
template <typename T>
bool read_versioned(const T* in, T& out, const char* what) {
  if (!in) return true;
  if (in->struct_size < sizeof(size_t) || in->struct_size > 65536) {
    set_error(CBX_ERR_INVALID_ARGUMENT, std::string(what) + ": struct_size " + std::to_string(in->struct_size) +
                                            " is invalid (start from the *_default_params function)");
    return false;
  }
  std::memcpy(static_cast<void*>(&out), in, std::min(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return true;
}

// The double a user meant by a float parameter (0.95f -> 0.95): the shortest decimal that
// reads back as the same float. The sampler forms 1 - top_p in double, as Python does.
double float_as_decimal(float v) {
  char buf[64];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(v));
    if (std::strtof(buf, nullptr) == v) return std::strtod(buf, nullptr);
  }
  return double(v);
}

// Runs fn, mapping exceptions to status codes and messages.
template <typename Fn>
cbx_status guarded(cbx_status fallback, Fn&& fn) {
  try {
    return fn();
  } catch (const cbx::TextError& e) {
    return set_error(CBX_ERR_TEXT, e.what());
  } catch (const cbx::InvalidArgumentError& e) {
    return set_error(CBX_ERR_INVALID_ARGUMENT, e.what());
  } catch (const cbx::UnsupportedModelError& e) {
    return set_error(CBX_ERR_UNSUPPORTED_MODEL, e.what());
  } catch (const cbx::AbortedError& e) {
    return set_error(CBX_ERR_ABORTED, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(CBX_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_error(fallback, e.what());
  } catch (...) {
    return set_error(CBX_ERR_INTERNAL, "unknown exception");
  }
}

// CBX_OK when voice is NULL (the built-in one) or the model can use it; else CBX_ERR_VOICE
// with the reason prefixed by `what`.
cbx_status usable_voice(const cbx_model* model, const cbx_voice* voice, const char* what) {
  if (!voice) return CBX_OK;
  return guarded(CBX_ERR_VOICE, [&]() {
    cbx::check_voice(voice->v, model->pipe->config(), what);
    return CBX_OK;
  });
}

// The voice of one synthesize call: set on entry, the built-in voice restored on exit.
struct VoiceScope {
  cbx_model& m;
  bool set = false;
  VoiceScope(cbx_model& model, const cbx_voice* v) : m(model) {
    if (!v) return;
    m.pipe->set_voice(v->v, "cbx_synthesize_voice: voice");
    set = true;
  }
  ~VoiceScope() {
    if (set) m.pipe->reset_voice();
  }
};

// The voice-prefix file calls: model, path and voice checked, a model that keeps no voice prefix
// (Multilingual) refused, then fn
// under the model's lock with the voice in use; failures of fn are CBX_ERR_FILE.
template <class Fn>
cbx_status with_prefix_file(cbx_model* model, const cbx_voice* voice, const char* path, const char* what, Fn&& fn) {
  if (!model || !path)
    return set_error(CBX_ERR_INVALID_ARGUMENT, std::string(what) + ": model and path must not be NULL");
  if (const cbx_status vs = usable_voice(model, voice, (std::string(what) + ": voice").c_str()); vs != CBX_OK)
    return vs;
  if (!model->pipe->keeps_voice_prefix())
    return set_error(CBX_ERR_UNSUPPORTED_MODEL,
                     std::string(what) + ": Multilingual models keep no voice prefix (it depends on the text)");
  return guarded(CBX_ERR_FILE, [&]() {
    std::lock_guard<std::mutex> lock(model->mu);
    VoiceScope voice_scope(*model, voice);
    fn();
    return CBX_OK;
  });
}

// A float field: nullopt for CBX_DEFAULT_FLOAT, else the decimal the caller meant.
std::optional<double> given(float v) {
  if (v == CBX_DEFAULT_FLOAT) return std::nullopt;
  return float_as_decimal(v);
}
std::optional<int64_t> given(int32_t v) {
  if (v == CBX_DEFAULT_INT) return std::nullopt;
  return v;
}

// cbx_synth_params as the shared validator sees it (pipeline/synth_options.h).
cbx::UserSynthOptions synth_options(const cbx_synth_params& p) {
  cbx::UserSynthOptions o;
  o.seed = p.seed;
  o.temperature = given(p.temperature);
  o.top_k = given(p.top_k);
  o.top_p = given(p.top_p);
  o.repetition_penalty = given(p.repetition_penalty);
  o.max_chunk_tokens = given(p.max_chunk_tokens);
  if (p.language && *p.language) o.language = p.language;
  o.min_p = given(p.min_p);
  o.cfg_weight = given(p.cfg_weight);
  o.exaggeration = given(p.exaggeration);
  return o;
}

// cbx_model_params as the shared validator sees it; throws InvalidArgumentError.
// cbx_gemm_precision -> GemmPrecision (the same numbering); CBX_GEMM_INT8 only where int8_ok.
cbx::GemmPrecision gemm_precision_of(int32_t v, bool int8_ok, const char* what) {
  static_assert(int(cbx::GemmPrecision::Auto) == CBX_GEMM_DEFAULT && int(cbx::GemmPrecision::F32) == CBX_GEMM_F32 &&
                int(cbx::GemmPrecision::BF16) == CBX_GEMM_BF16 && int(cbx::GemmPrecision::Int8) == CBX_GEMM_INT8);
  if (v >= CBX_GEMM_DEFAULT && v <= (int8_ok ? CBX_GEMM_INT8 : CBX_GEMM_BF16)) return cbx::GemmPrecision(v);
  throw cbx::InvalidArgumentError(
      std::string(what) +
      (int8_ok
           ? " must be CBX_GEMM_DEFAULT, CBX_GEMM_F32, CBX_GEMM_BF16 or CBX_GEMM_INT8 (auto, f32, bf16 or int8), got "
           : " must be CBX_GEMM_DEFAULT, CBX_GEMM_F32 or CBX_GEMM_BF16 (auto, f32 or bf16), got ") +
      std::to_string(v));
}

cbx::UserLoadOptions load_options(const cbx_model_params& p) {
  cbx::UserLoadOptions o;
  o.n_threads = given(p.n_threads);
  o.max_new_tokens = given(p.max_new_tokens);
  if (p.kv_type != CBX_KV_F16 && p.kv_type != CBX_KV_F32)
    throw cbx::InvalidArgumentError("kv_type (--kv-type) must be CBX_KV_F16 or CBX_KV_F32 (f16 or f32), got " +
                                    std::to_string(p.kv_type));
  o.kv_type = p.kv_type == CBX_KV_F32 ? cbx::DType::F32 : cbx::DType::F16;
  o.repack = p.no_repack == 0;
  o.gemm_precision = gemm_precision_of(p.gemm_precision, false, "gemm_precision (--gemm-precision)");
  o.cfm_precision = gemm_precision_of(p.cfm_precision, true, "cfm_precision (--cfm-precision)");
  cbx::validate(o);
  return o;
}

// Reads cbx_voice_params into builder options (false + error set when invalid).
bool voice_options(const cbx_voice_params* params, cbx::VoiceBuildOptions& o, const char* fn) {
  cbx_voice_params p = cbx_voice_default_params();
  if (!read_versioned(params, p, (std::string(fn) + ": params").c_str())) return false;
  return guarded(CBX_ERR_INVALID_ARGUMENT, [&]() {
           const std::optional<double> exaggeration = given(p.exaggeration), max_seconds = given(p.max_seconds);
           if (exaggeration) cbx::check_param(cbx::param::kExaggeration, *exaggeration);
           if (max_seconds) cbx::check_param(cbx::param::kVoiceMaxSeconds, *max_seconds);
           if (p.norm_loudness != 0 && p.norm_loudness != 1)
             throw cbx::InvalidArgumentError("norm_loudness (--no-norm-loudness) must be 0 or 1, got " +
                                             std::to_string(p.norm_loudness));
           o.exaggeration = exaggeration ? float(*exaggeration) : -1.0f;
           o.norm_loudness = p.norm_loudness != 0;
           o.max_seconds = max_seconds.value_or(30.0);
           return CBX_OK;
         }) == CBX_OK;
}

// Builds a voice with the model's VoiceBuilder (made once, remade when the options change);
// build(builder, warnings) returns the Voice.
template <typename Build>
cbx_status create_voice(cbx_model* model, const cbx_voice_params* params, cbx_voice** voice, const char* fn,
                        Build&& build) {
  cbx::VoiceBuildOptions o;
  if (!voice_options(params, o, fn)) return CBX_ERR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lock(model->mu);
  const bool same = model->builder && model->builder_opts.exaggeration == o.exaggeration &&
                    model->builder_opts.norm_loudness == o.norm_loudness &&
                    model->builder_opts.max_seconds == o.max_seconds;
  if (!same) {
    const cbx_status s = guarded(CBX_ERR_MODEL_LOAD, [&]() {
      model->builder.reset();
      model->builder =
          std::make_unique<cbx::VoiceBuilder>(model->pipe->gguf(), model->pipe->config(), model->pipe->pool(), o);
      model->builder_opts = o;
      return CBX_OK;
    });
    if (s != CBX_OK) return s;
  }
  return guarded(CBX_ERR_AUDIO, [&]() {
    auto v = std::make_unique<cbx_voice>();
    v->v = build(*model->builder, v->warnings);
    *voice = v.release();
    return CBX_OK;
  });
}

}  // namespace

extern "C" {

int32_t cbx_api_version(void) { return CBX_API_VERSION; }

const char* cbx_status_string(cbx_status s) {
  switch (s) {
    case CBX_OK:
      return "ok";
    case CBX_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case CBX_ERR_MODEL_LOAD:
      return "model load failed";
    case CBX_ERR_UNSUPPORTED_MODEL:
      return "unsupported model";
    case CBX_ERR_TEXT:
      return "invalid text";
    case CBX_ERR_ABORTED:
      return "aborted";
    case CBX_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case CBX_ERR_INTERNAL:
      return "internal error";
    case CBX_ERR_AUDIO:
      return "reference audio rejected";
    case CBX_ERR_VOICE:
      return "voice rejected";
    case CBX_ERR_FILE:
      return "prompt cache file error";
  }
  return "unknown status";
}

const char* cbx_last_error(void) { return g_last_error.c_str(); }

cbx_model_params cbx_model_default_params(void) {
  cbx_model_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.n_threads = CBX_DEFAULT_INT;
  p.kv_type = CBX_KV_F16;
  p.max_new_tokens = CBX_DEFAULT_INT;
  p.no_repack = 0;
  p.gemm_precision = CBX_GEMM_DEFAULT;
  p.cfm_precision = CBX_GEMM_DEFAULT;
  return p;
}

namespace {
// The C schedule as a StreamSchedule: CBX_DEFAULT_INT keeps the variant's default
// (default_stream_schedule); Pipeline::check checks the rest (check_stream_schedule).
cbx::StreamSchedule stream_schedule_from(const cbx_synth_params& p, cbx::Variant variant) {
  cbx::StreamSchedule s = cbx::default_stream_schedule(variant);
  if (p.stream_first_tokens != CBX_DEFAULT_INT) s.first_tokens = p.stream_first_tokens;
  if (p.stream_chunk_tokens != CBX_DEFAULT_INT) s.chunk_tokens = p.stream_chunk_tokens;
  if (p.stream_context_tokens != CBX_DEFAULT_INT) s.context_tokens = p.stream_context_tokens;
  if (p.stream_prompt_tokens != CBX_DEFAULT_INT) s.prompt_tokens = p.stream_prompt_tokens;
  return s;
}

// cbx_synth_params as one synthesize call of the model's pipeline (not yet checked).
cbx::SynthRequest synth_request(const cbx_model* model, const cbx_synth_params& p) {
  cbx::SynthRequest r;
  r.options = synth_options(p);
  r.stream = p.stream != 0;
  r.stream_schedule = stream_schedule_from(p, model->variant);
  return r;
}
}  // namespace

cbx_synth_params cbx_synth_default_params(void) {
  cbx_synth_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.seed = 0;
  p.temperature = CBX_DEFAULT_FLOAT;
  p.top_k = CBX_DEFAULT_INT;
  p.top_p = CBX_DEFAULT_FLOAT;
  p.repetition_penalty = CBX_DEFAULT_FLOAT;
  p.max_chunk_tokens = CBX_DEFAULT_INT;
  p.language = nullptr;
  p.min_p = CBX_DEFAULT_FLOAT;
  p.cfg_weight = CBX_DEFAULT_FLOAT;
  p.stream = 0;
  p.stream_first_tokens = CBX_DEFAULT_INT;
  p.stream_chunk_tokens = CBX_DEFAULT_INT;
  p.stream_context_tokens = CBX_DEFAULT_INT;
  p.stream_prompt_tokens = CBX_DEFAULT_INT;
  p.exaggeration = CBX_DEFAULT_FLOAT;
  return p;
}

cbx_status cbx_model_load(const char* path, const cbx_model_params* params, cbx_model** model) {
  if (!model) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_load: model is NULL");
  *model = nullptr;
  if (!path) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_load: path is NULL");
  cbx_model_params p = cbx_model_default_params();
  if (!read_versioned(params, p, "cbx_model_load: params")) return CBX_ERR_INVALID_ARGUMENT;
  cbx::UserLoadOptions lo;
  if (const cbx_status s = guarded(CBX_ERR_INVALID_ARGUMENT,
                                   [&]() {
                                     lo = load_options(p);
                                     return CBX_OK;
                                   });
      s != CBX_OK)
    return s;
  // The model's own limits (max_new_tokens and its T3 positions) are checked at load:
  // InvalidArgumentError, so CBX_ERR_INVALID_ARGUMENT.
  // The progress callback runs only inside load_pipeline, on this thread.
  cbx::LoadProgressFn on_progress;
  if (p.progress_callback)
    on_progress = [cb = p.progress_callback, ud = p.progress_callback_user_data](float f) { return cb(f, ud) != 0; };
  return guarded(CBX_ERR_MODEL_LOAD, [&]() {
    auto m = std::make_unique<cbx_model>();
    m->pipe = cbx::load_pipeline(path, lo, on_progress);
    m->variant = m->pipe->variant();
    m->languages = m->pipe->languages();
    *model = m.release();
    return CBX_OK;
  });
}

void cbx_model_free(cbx_model* model) {
  try {
    delete model;
  } catch (...) {
  }
}

int32_t cbx_model_sample_rate(const cbx_model* model) {
  if (!model) return 0;
  return model->pipe->sample_rate();
}

const char* cbx_model_variant(const cbx_model* model) { return model ? cbx::variant_name(model->variant) : nullptr; }

int32_t cbx_model_language_count(const cbx_model* model) { return model ? int32_t(model->languages.size()) : 0; }

const char* cbx_model_language(const cbx_model* model, int32_t i) {
  if (!model || i < 0 || size_t(i) >= model->languages.size()) return nullptr;
  return model->languages[size_t(i)].c_str();
}

const char* cbx_language_name(const char* code) {
  try {
    return code ? cbx::language_name(code) : nullptr;
  } catch (...) {
    return nullptr;
  }
}

cbx_status cbx_synthesize(cbx_model* model, const char* text, const cbx_synth_params* params, float** audio,
                          size_t* n_samples, const cbx_callbacks* callbacks) {
  return cbx_synthesize_voice(model, nullptr, text, params, audio, n_samples, callbacks);
}

cbx_status cbx_synthesize_voice(cbx_model* model, const cbx_voice* voice, const char* text,
                                const cbx_synth_params* params, float** audio, size_t* n_samples,
                                const cbx_callbacks* callbacks) {
  if (audio) *audio = nullptr;
  if (n_samples) *n_samples = 0;
  if (!model) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_synthesize: model is NULL");
  if (!text) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_synthesize: text is NULL");
  if ((audio == nullptr) != (n_samples == nullptr))
    return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_synthesize: give both audio and n_samples, or neither");
  cbx_synth_params p = cbx_synth_default_params();
  if (!read_versioned(params, p, "cbx_synthesize: params")) return CBX_ERR_INVALID_ARGUMENT;
  cbx_callbacks cb;
  std::memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  if (!read_versioned(callbacks, cb, "cbx_synthesize: callbacks")) return CBX_ERR_INVALID_ARGUMENT;
  if (!audio && !cb.on_audio)
    return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_synthesize: no audio output and no audio callback");
  // The pipeline's checks (pipeline/pipeline.h; the CLI's messages, word for word), before the
  // voice's.
  const cbx::SynthRequest request = synth_request(model, p);
  if (const cbx_status s = guarded(CBX_ERR_INVALID_ARGUMENT,
                                   [&]() {
                                     model->pipe->check(request);
                                     return CBX_OK;
                                   });
      s != CBX_OK)
    return s;
  if (const cbx_status vs = usable_voice(model, voice, "cbx_synthesize_voice: voice"); vs != CBX_OK) return vs;
  return guarded(CBX_ERR_INTERNAL, [&]() {
    std::lock_guard<std::mutex> lock(model->mu);
    VoiceScope voice_scope(*model, voice);
    const int32_t sr = cbx_model_sample_rate(model);
    cbx::SynthAudioFn on_audio;
    if (cb.on_audio)
      on_audio = [&](const float* s, int64_t n, int64_t, int64_t) {
        return cb.on_audio(s, size_t(n), sr, cb.user_data) == 0;
      };
    cbx::SynthAbortFn should_abort;
    if (cb.should_abort) should_abort = [&]() { return cb.should_abort(cb.user_data) != 0; };
    cbx::SynthTimings tm;
    const std::vector<float> wave = model->pipe->synthesize(text, request, &tm, on_audio, should_abort);
    model->last = tm;
    model->have_last = true;
    if (audio) {
      float* buf = static_cast<float*>(std::malloc(std::max<size_t>(1, wave.size()) * sizeof(float)));
      if (!buf) throw std::bad_alloc();
      if (!wave.empty()) std::memcpy(buf, wave.data(), wave.size() * sizeof(float));
      *audio = buf;
      *n_samples = wave.size();
    }
    return CBX_OK;
  });
}

cbx_status cbx_model_prepare_voice(cbx_model* model, const cbx_voice* voice) {
  if (!model) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_prepare_voice: model is NULL");
  if (const cbx_status vs = usable_voice(model, voice, "cbx_model_prepare_voice: voice"); vs != CBX_OK) return vs;
  if (!model->pipe->keeps_voice_prefix()) return CBX_OK;
  return guarded(CBX_ERR_INTERNAL, [&]() {
    std::lock_guard<std::mutex> lock(model->mu);
    VoiceScope voice_scope(*model, voice);
    model->pipe->prepare_voice();
    return CBX_OK;
  });
}

cbx_status cbx_model_save_voice_prefix(cbx_model* model, const cbx_voice* voice, const char* path) {
  return with_prefix_file(model, voice, path, "cbx_model_save_voice_prefix",
                          [&]() { model->pipe->save_prefix_cache(path); });
}

cbx_status cbx_model_load_voice_prefix(cbx_model* model, const cbx_voice* voice, const char* path, int32_t* loaded) {
  if (!loaded) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_load_voice_prefix: loaded is NULL");
  *loaded = 0;
  return with_prefix_file(model, voice, path, "cbx_model_load_voice_prefix", [&]() {
    std::string why;
    *loaded = model->pipe->load_prefix_cache(path, &why) ? 1 : 0;
  });
}

void cbx_audio_free(float* audio) { std::free(audio); }

cbx_voice_params cbx_voice_default_params(void) {
  cbx_voice_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.exaggeration = CBX_DEFAULT_FLOAT;
  p.norm_loudness = 1;
  p.max_seconds = CBX_DEFAULT_FLOAT;
  return p;
}

cbx_status cbx_voice_create(cbx_model* model, const char* audio_path, const cbx_voice_params* params,
                            cbx_voice** voice) {
  if (!voice) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_create: voice is NULL");
  *voice = nullptr;
  if (!model || !audio_path)
    return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_create: model and audio_path must not be NULL");
  const std::string path = audio_path;
  return create_voice(model, params, voice, "cbx_voice_create",
                      [&](cbx::VoiceBuilder& b, std::vector<std::string>& w) { return b.build(path, nullptr, &w); });
}

cbx_status cbx_voice_create_from_memory(cbx_model* model, const void* data, size_t size, const char* name,
                                        const cbx_voice_params* params, cbx_voice** voice) {
  if (!voice) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_create_from_memory: voice is NULL");
  *voice = nullptr;
  if (!model || !data || size == 0)
    return set_error(CBX_ERR_INVALID_ARGUMENT,
                     "cbx_voice_create_from_memory: model and data must not be NULL or empty");
  const std::string nm = name ? name : "<memory>";
  return create_voice(model, params, voice, "cbx_voice_create_from_memory",
                      [&](cbx::VoiceBuilder& b, std::vector<std::string>& w) {
                        return b.build_from_memory(data, size, nm, nullptr, &w);
                      });
}

cbx_status cbx_voice_load(const char* path, cbx_voice** voice) {
  if (!voice) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_load: voice is NULL");
  *voice = nullptr;
  if (!path) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_load: path is NULL");
  return guarded(CBX_ERR_VOICE, [&]() {
    auto v = std::make_unique<cbx_voice>();
    v->v = cbx::load_voice(path);
    *voice = v.release();
    return CBX_OK;
  });
}

cbx_status cbx_voice_save(const cbx_voice* voice, const char* path) {
  if (!voice || !path) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_voice_save: voice and path must not be NULL");
  return guarded(CBX_ERR_VOICE, [&]() {
    cbx::save_voice(voice->v, path);
    return CBX_OK;
  });
}

void cbx_voice_free(cbx_voice* voice) {
  try {
    delete voice;
  } catch (...) {
  }
}

const char* cbx_voice_variant(const cbx_voice* voice) { return voice ? cbx::variant_name(voice->v.variant) : nullptr; }

int32_t cbx_voice_warning_count(const cbx_voice* voice) { return voice ? int32_t(voice->warnings.size()) : 0; }

const char* cbx_voice_warning(const cbx_voice* voice, int32_t i) {
  if (!voice || i < 0 || size_t(i) >= voice->warnings.size()) return nullptr;
  return voice->warnings[size_t(i)].c_str();
}

cbx_status cbx_model_last_timings(const cbx_model* model, cbx_timings* timings) {
  if (!model || !timings) return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_last_timings: NULL argument");
  if (timings->struct_size < sizeof(size_t) || timings->struct_size > 65536)
    return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_last_timings: struct_size is invalid");
  std::lock_guard<std::mutex> lock(model->mu);
  if (!model->have_last)
    return set_error(CBX_ERR_INVALID_ARGUMENT, "cbx_model_last_timings: no successful synthesis yet");
  const cbx::SynthTimings& t = model->last;
  cbx_timings o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = std::min(timings->struct_size, sizeof o);
  o.text_ms = t.text_ms;
  o.t3_prefill_ms = t.t3_prefill_ms;
  o.t3_decode_ms = t.t3_decode_ms;
  o.flow_ms = t.flow_ms;
  o.cfm_ms = t.cfm_ms;
  o.hift_ms = t.hift_ms;
  o.total_ms = t.total_ms;
  o.n_chunks = t.n_chunks;
  o.n_text_tokens = t.n_text_tokens;
  o.n_speech_tokens = t.n_speech_tokens;
  o.chunks_at_limit = t.chunks_at_limit;
  o.chunks_prefix_reused = t.chunks_prefix_reused;
  o.n_samples = t.n_samples;
  o.rtf = t.rtf();
  std::memcpy(static_cast<void*>(timings), &o, o.struct_size);
  return CBX_OK;
}

const char* cbx_version(void) { return cbx::version_line(); }

void cbx_log_set(cbx_log_callback callback, void* user_data) {
  // The core's sink reaches the user's callback and data through `target`. Clearing the sink
  // first waits for a message in flight, so none reads `target` while it changes; `mu` orders
  // concurrent calls.
  struct Target {
    cbx_log_callback callback;
    void* user_data;
  };
  static Target target;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  cbx::set_log_sink(nullptr, nullptr);
  if (!callback) return;
  target = {callback, user_data};
  cbx::set_log_sink(
      [](cbx::LogLevel level, const char* message, void* t) {
        auto* tt = static_cast<Target*>(t);
        tt->callback(static_cast<cbx_log_level>(level), message, tt->user_data);
      },
      &target);
}

}  // extern "C"

namespace cbx {

Pipeline* model_pipeline(cbx_model* model) { return model ? model->pipe.get() : nullptr; }
TurboPipeline* model_turbo_pipeline(cbx_model* model) {
  return model ? dynamic_cast<TurboPipeline*>(model->pipe.get()) : nullptr;
}
MtlPipeline* model_mtl_pipeline(cbx_model* model) {
  return model ? dynamic_cast<MtlPipeline*>(model->pipe.get()) : nullptr;
}
std::mutex& model_mutex(cbx_model* model) { return model->mu; }
const Voice* voice_of_handle(const cbx_voice* voice) { return voice ? &voice->v : nullptr; }

TurboSynthParams turbo_params_of(const cbx_model* model, const cbx_synth_params& p) {
  CBX_CHECK(model && dynamic_cast<const TurboPipeline*>(model->pipe.get()),
            "turbo_params_of: not a Turbo / Nano model");
  const SynthRequest r = synth_request(model, p);
  model->pipe->check(r);
  TurboSynthParams sp = to_turbo_params(r.options);
  sp.stream = r.stream;
  sp.stream_schedule = *r.stream_schedule;
  return sp;
}

MtlSynthParams mtl_params_of(const cbx_model* model, const cbx_synth_params& p) {
  CBX_CHECK(model && dynamic_cast<const MtlPipeline*>(model->pipe.get()), "mtl_params_of: not a Multilingual model");
  const SynthRequest r = synth_request(model, p);
  MtlSynthParams mp = to_mtl_params(r.options);
  mp.language = model->pipe->check(r);
  mp.stream = r.stream;
  mp.stream_schedule = *r.stream_schedule;
  return mp;
}

}  // namespace cbx
