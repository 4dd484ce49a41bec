// libFuzzer target for the body of POST /v1/audio/speech: raw bytes -> JSON -> the validated
// request, through the server's own parse_speech_request (tools/server/server_request.h) with
// three loaded models (Turbo, Nano, Multilingual: their ids, variants and languages) and an empty
// voices directory. Any input must either give a request whose fields are in range or an ApiError
// the server answers 4xx with an OpenAI-shaped JSON body; anything else (another exception, a 5xx,
// an error body that is not that JSON) is a finding. Each input is checked twice: with the
// server's default limits and with tiny ones (body and input length).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "models/model_config.h"
#include "pipeline/synth_options.h"
#include "server/server_request.h"
#include "server/server_util.h"

using namespace cbx::server;

namespace {

[[noreturn]] void finding(const std::string& what, const std::string& body) {
  std::fprintf(stderr, "fuzz_request_speech: %s (body of %zu bytes)\n", what.c_str(), body.size());
  std::abort();
}

cbx::server::LoadedModel model(cbx::Variant v, const char* id) {
  LoadedModel m;
  m.id = id;
  m.variant = cbx::variant_name(v);
  m.languages = cbx::default_config(v).languages;
  m.sample_rate = 24000;
  return m;
}

struct Setup {
  LoadedModel turbo = model(cbx::Variant::Turbo, "chatterbox-turbo");
  LoadedModel nano = model(cbx::Variant::Nano, "chatterbox-nano");
  LoadedModel mtl = model(cbx::Variant::Mtl, "chatterbox-multilingual");
  std::string dir;
  std::unique_ptr<VoiceStore> voices;
  RequestContext normal, tiny;
  Setup() {
    std::string tmpl = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fuzz_request_XXXXXX";
    if (!mkdtemp(tmpl.data())) finding("cannot make a temporary voices directory", "");
    dir = tmpl;
    voices = std::make_unique<VoiceStore>(dir);
    for (RequestContext* c : {&normal, &tiny}) {
      c->models = {&turbo, &nano, &mtl};
      c->voices = voices.get();
    }
    tiny.max_body_bytes = 64;
    tiny.max_input_chars = 8;
  }
  ~Setup() { rmdir(dir.c_str()); }
};

void check_error_body(const ApiError& e, const std::string& body) {
  if (e.status < 400 || e.status > 499) finding("status " + std::to_string(e.status) + ": " + e.what(), body);
  if (std::string(e.what()).empty()) finding("an error without a message", body);
  std::string text;
  try {
    text = error_body(e.status, e.what(), e.param, e.code, e.type);
  } catch (const std::exception& x) {
    finding(std::string("error_body threw: ") + x.what(), body);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& x) {
    finding(std::string("the error body is not JSON: ") + x.what(), body);
  }
  const auto& err = j.at("error");
  if (!err.at("message").is_string() || err.at("type") != "invalid_request_error")
    finding("the error body is not OpenAI-shaped: " + text, body);
}

void check_request(const SpeechRequest& r, const RequestContext& ctx, const std::string& body) {
  if (r.model < 0 || size_t(r.model) >= ctx.models.size()) finding("model index out of range", body);
  if (r.text.empty() || invalid_utf8_at(r.text) || is_blank(r.text) ||
      utf8_length(r.text) > size_t(ctx.max_input_chars))
    finding("an accepted input that the limits refuse", body);
  if (!(r.speed >= 0.25 && r.speed <= 4)) finding("speed out of range", body);
  const LoadedModel& m = *ctx.models[size_t(r.model)];
  if (m.variant == "mtl") {
    bool known = false;
    for (const std::string& l : m.languages) known |= l == r.language;
    if (!known) finding("language '" + r.language + "' is not the model's", body);
  }
  // The C API validates the float parameters again, with the same ranges: what the server
  // accepted must pass there too (after the conversion to float).
  const std::pair<const cbx::ParamSpec&, float> ps[] = {{cbx::param::kTemperature, r.params.temperature},
                                                        {cbx::param::kTopP, r.params.top_p},
                                                        {cbx::param::kMinP, r.params.min_p},
                                                        {cbx::param::kRepetitionPenalty, r.params.repetition_penalty},
                                                        {cbx::param::kExaggeration, r.params.exaggeration},
                                                        {cbx::param::kCfgWeight, r.params.cfg_weight}};
  for (const auto& [spec, v] : ps) {
    if (v == CBX_DEFAULT_FLOAT) continue;
    try {
      cbx::check_param(spec, double(v));
    } catch (const std::exception& e) {
      finding(std::string("accepted, but the C API refuses it: ") + e.what(), body);
    }
  }
  if (r.params.top_k != CBX_DEFAULT_INT && (r.params.top_k < 0 || r.params.top_k > 100000))
    finding("top_k out of range", body);
}

void run(const std::string& body, const RequestContext& ctx) {
  try {
    check_request(parse_speech_request(body, ctx), ctx, body);
  } catch (const ApiError& e) {
    check_error_body(e, body);
  } catch (const std::exception& e) {
    finding(std::string("not an ApiError: ") + e.what(), body);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup s;
  const std::string body(reinterpret_cast<const char*>(data), size);
  run(body, s.normal);
  run(body, s.tiny);
  return 0;
}
