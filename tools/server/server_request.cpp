#include "server_request.h"

#include <httplib.h>

#include <algorithm>

#include "audio/time_stretch.h"
#include "core/error.h"
#include "models/model_config.h"
#include "pipeline/synth_options.h"
#include "server_util.h"

namespace cbx::server {

namespace {

struct FormatName {
  const char* name;
  AudioFormat format;
};
constexpr FormatName kFormats[] = {{"wav", AudioFormat::Wav},
                                   {"pcm", AudioFormat::Pcm16},
                                   {"flac", AudioFormat::Flac},
                                   {"mp3", AudioFormat::Mp3},
                                   {"opus", AudioFormat::Opus}};

AudioFormat parse_format(const std::optional<std::string>& name) {
  const std::string n = name.value_or("mp3");  // OpenAI's default
  std::string supported;
  for (const auto& f : kFormats) {
    if (!audio_format_available(f.format)) continue;
    if (n == f.name) return f.format;
    supported += std::string(supported.empty() ? "" : ", ") + f.name;
  }
  if (n == "aac")
    throw ApiError(400,
                   "response_format 'aac' is not supported: this server has no AAC encoder; use one of " + supported,
                   "response_format", "unsupported_format");
  throw ApiError(400, "response_format '" + n + "' is not supported; use one of " + supported, "response_format",
                 "unsupported_format");
}

// A float sampling parameter: checked with the CLI's and the C API's range and message.
float sampling_param(const nlohmann::json& body, const ParamSpec& spec) {
  const std::optional<double> v = number_field(body, spec.name);
  if (!v) return CBX_DEFAULT_FLOAT;
  try {
    check_param(spec, *v);
  } catch (const std::exception& e) {
    throw ApiError(400, e.what(), spec.name, "invalid_value");
  }
  return float(*v);
}

}  // namespace

int model_index(const std::vector<const LoadedModel*>& models, const std::string& name) {
  if (models.empty()) return -1;
  if (name == "tts-1" || name == "tts-1-hd" || name == "gpt-4o-mini-tts") return 0;
  for (size_t i = 0; i < models.size(); ++i)
    if (models[i]->id == name) return int(i);
  return -1;
}

std::string model_names(const std::vector<const LoadedModel*>& models) {
  std::string s;
  for (const LoadedModel* m : models) s += (s.empty() ? "" : ", ") + m->id;
  return s + " (tts-1, tts-1-hd and gpt-4o-mini-tts mean " + (models.empty() ? "" : models[0]->id) + ")";
}

SpeechRequest parse_speech_request(const std::string& text, const RequestContext& ctx) {
  CBX_CHECK(!ctx.models.empty() && ctx.voices, "parse_speech_request: no models or no voice store");
  SpeechRequest r;
  if (text.size() > ctx.max_body_bytes)
    throw ApiError(413,
                   "the request body is " + std::to_string(text.size()) + " bytes; the limit is " +
                       std::to_string(ctx.max_body_bytes),
                   "", "body_too_large");
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error for bad syntax; out_of_range for a number beyond a double (1e309).
    if (const auto at = invalid_utf8_at(text))
      throw ApiError(400, "the request body is not valid UTF-8 (byte " + std::to_string(*at) + ")", "input",
                     "invalid_utf8");
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!body.is_object())
    throw ApiError(400, std::string("the request body must be a JSON object, got ") + body.type_name());

  const std::optional<std::string> model = string_field(body, "model");
  r.model = model ? model_index(ctx.models, *model) : 0;
  if (r.model < 0)
    throw ApiError(400, "model '" + *model + "' does not exist; available: " + model_names(ctx.models), "model",
                   "model_not_found");
  const LoadedModel& lm = *ctx.models[size_t(r.model)];

  const std::optional<std::string> input = string_field(body, "input");
  if (!input) throw ApiError(400, "missing 'input': the text to speak", "input", "missing_input");
  if (const auto at = invalid_utf8_at(*input))
    throw ApiError(400, "'input' is not valid UTF-8 (byte " + std::to_string(*at) + ")", "input", "invalid_utf8");
  if (is_blank(*input)) throw ApiError(400, "'input' is empty (or only white space)", "input", "empty_input");
  if (utf8_length(*input) > size_t(ctx.max_input_chars))
    throw ApiError(400,
                   "'input' has " + std::to_string(utf8_length(*input)) + " characters; the limit is " +
                       std::to_string(ctx.max_input_chars) + " (--max-input-chars)",
                   "input", "input_too_long");
  r.text = *input;

  std::string voice_name;
  if (body.contains("voice") && body["voice"].is_object()) {  // OpenAI's newer {"id": NAME}
    const std::optional<std::string> id = string_field(body["voice"], "id");
    if (!id) throw ApiError(400, "'voice' as an object needs a string 'id'", "voice", "invalid_type");
    voice_name = *id;
  } else {
    voice_name = string_field(body, "voice").value_or("");
  }
  if (!voice_name.empty() && voice_name != "default") {
    const std::vector<std::string>& builtin = openai_voice_names();
    const bool builtin_name = std::find(builtin.begin(), builtin.end(), voice_name) != builtin.end();
    if (ctx.voices->exists(voice_name)) {
      std::string error;
      r.voice = ctx.voices->get(voice_name, error);
      if (!r.voice) throw ApiError(500, error, "voice");
    } else if (!builtin_name) {
      std::string names = "default";
      for (const VoiceInfo& v : ctx.voices->list()) names += ", " + v.name;
      for (const std::string& n : builtin) names += ", " + n;
      throw ApiError(400, "voice '" + voice_name + "' does not exist; voices: " + names, "voice", "voice_not_found");
    }
  }

  r.format = parse_format(string_field(body, "response_format"));
  const std::string stream_format = string_field(body, "stream_format").value_or("audio");
  if (stream_format != "audio" && stream_format != "sse")
    throw ApiError(400, "stream_format '" + stream_format + "' is not supported; use audio or sse", "stream_format",
                   "invalid_value");
  r.sse = stream_format == "sse";
  (void)string_field(body, "instructions");  // accepted (type-checked) and ignored: Chatterbox has no instructions
  if (const std::optional<double> sp = number_field(body, "speed")) {
    if (!(*sp >= kMinStretchSpeed && *sp <= kMaxStretchSpeed))
      throw ApiError(400, "speed must be in [0.25, 4], got " + nlohmann::json(*sp).dump(), "speed", "invalid_value");
    r.speed = *sp;
  }

  // Sampling extensions, checked with the CLI's and the C API's ranges and messages.
  r.params = cbx_synth_default_params();
  if (const std::optional<uint64_t> seed = unsigned_field(body, "seed")) r.params.seed = *seed;
  r.params.temperature = sampling_param(body, param::kTemperature);
  r.params.top_p = sampling_param(body, param::kTopP);
  r.params.min_p = sampling_param(body, param::kMinP);
  r.params.repetition_penalty = sampling_param(body, param::kRepetitionPenalty);
  r.params.exaggeration = sampling_param(body, param::kExaggeration);
  r.params.cfg_weight = sampling_param(body, param::kCfgWeight);
  if (const std::optional<int64_t> k = integer_field(body, "top_k")) {
    try {
      check_param(param::kTopK, double(*k));
    } catch (const std::exception& e) {
      throw ApiError(400, e.what(), "top_k", "invalid_value");
    }
    r.params.top_k = int32_t(*k);
  }
  // Multilingual without a language speaks English: OpenAI clients send none.
  std::optional<std::string> language = string_field(body, "language");
  if (!language && lm.variant == "mtl") language = "en";
  try {
    r.language = resolve_language(variant_from_name(lm.variant), lm.languages, language);
  } catch (const std::exception& e) {
    throw ApiError(400, e.what(), "language", "unsupported_language");
  }
  return r;
}

VoiceUpload parse_voice_upload(const httplib::Request& req, const RequestContext& ctx) {
  CBX_CHECK(!ctx.models.empty() && ctx.voices, "parse_voice_upload: no models or no voice store");
  if (!ctx.voices->enabled())
    throw ApiError(400, "voice uploads need a voices directory: start the server with --voices DIR", "",
                   "no_voices_dir");
  if (!req.is_multipart_form_data())
    throw ApiError(400,
                   "upload a voice as multipart/form-data with the fields 'name' and 'file' (the reference audio)");
  if (!req.has_file("name")) throw ApiError(400, "missing field 'name'", "name");
  VoiceUpload u;
  u.name = req.get_file_value("name").content;
  if (const std::string p = VoiceStore::name_problem(u.name); !p.empty())
    throw ApiError(400, "invalid voice name '" + u.name + "': " + p, "name", "invalid_name");
  const char* file_field = req.has_file("file") ? "file" : req.has_file("audio_sample") ? "audio_sample" : nullptr;
  if (!file_field) throw ApiError(400, "missing field 'file' (the reference audio)", "file");
  // get_file_value returns a copy; point into the request's own part instead.
  const auto part = req.files.find(file_field);
  u.file = &part->second;
  if (u.file->content.empty()) throw ApiError(400, "the uploaded file is empty", "file");
  u.filename = u.file->filename.empty() ? "upload" : u.file->filename;
  if (req.has_file("model")) {
    const std::string& m = req.files.find("model")->second.content;
    u.model = model_index(ctx.models, m);
    if (u.model < 0)
      throw ApiError(400, "model '" + m + "' does not exist; available: " + model_names(ctx.models), "model",
                     "model_not_found");
  }
  return u;
}

}  // namespace cbx::server
