// POST /v1/audio/speech: OpenAI's body (+ Chatterbox's sampling extensions) -> a SpeechJob on the
// model's engine -> audio streamed to the client as the engine hands it over.
#include <httplib.h>

#include <cmath>

#include "audio/audio_encode.h"
#include "audio/time_stretch.h"
#include "core/error.h"
#include "models/model_config.h"
#include "pipeline/synth_options.h"
#include "server_http.h"
#include "server_socket.h"
#include "server_util.h"

namespace cbx::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);  // how often a waiting connection checks its client

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
    throw ApiError(400, "response_format 'aac' is not supported: this server has no AAC encoder; use one of " + supported,
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

// What a validated request asks for.
struct SpeechRequest {
  Engine* engine = nullptr;
  std::string text;
  std::shared_ptr<cbx_voice> voice;
  AudioFormat format = AudioFormat::Mp3;
  bool sse = false;
  double speed = 1;
  cbx_synth_params params{};
  std::string language;
};

// State of one streamed response, shared by httplib's content provider calls.
struct Stream {
  std::shared_ptr<SpeechJob> job;
  std::unique_ptr<AudioStreamEncoder> encoder;  // null when speed != 1 (the whole audio is stretched)
  AudioFormat format = AudioFormat::Wav;
  bool sse = false;
  double speed = 1;
  int sample_rate = 24000;
  int fd = -1;
  Metrics* metrics = nullptr;
  std::vector<float> first;  // the block that arrived before the headers went out
  std::vector<float> all;    // speed != 1: every block, stretched at the end
  bool first_sent = false;

  bool write(httplib::DataSink& sink, const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return true;
    bool ok;
    if (sse) {
      const std::string ev =
          "data: " + nlohmann::json{{"type", "speech.audio.delta"}, {"audio", base64_encode(bytes.data(), bytes.size())}}.dump() +
          "\n\n";
      ok = sink.write(ev.data(), ev.size());
    } else {
      ok = sink.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    if (ok && !first_sent) {
      first_sent = true;
      metrics->observe_ttfa(std::chrono::duration<double>(Clock::now() - job->received).count());
      log_verbose("request " + std::to_string(job->id) + ": first audio sent");
    }
    return ok;
  }

  // Encodes one block (or keeps it for the stretch); false when the client is gone.
  bool audio(httplib::DataSink& sink, const std::vector<float>& x) {
    if (speed != 1) {
      all.insert(all.end(), x.begin(), x.end());
      return true;
    }
    return write(sink, encoder->push(x.data(), x.size()));
  }

  bool finish(httplib::DataSink& sink) {
    std::vector<uint8_t> tail;
    if (speed != 1) {
      const std::vector<float> y = time_stretch(all.data(), all.size(), sample_rate, speed);
      tail = encode_audio(y.data(), y.size(), sample_rate, format);
    } else {
      tail = encoder->finish();
    }
    if (!write(sink, tail)) return false;
    if (sse) {
      const int64_t in = job->text_tokens(), out = job->speech_tokens();
      const std::string ev =
          "data: " +
          nlohmann::json{{"type", "speech.audio.done"},
                         {"usage", {{"input_tokens", in}, {"output_tokens", out}, {"total_tokens", in + out}}}}
              .dump() +
          "\n\n";
      if (!sink.write(ev.data(), ev.size())) return false;
    }
    metrics->observe_duration(std::chrono::duration<double>(Clock::now() - job->received).count());
    sink.done();
    return true;
  }

  // One call of httplib's chunked content provider: writes the next block (waiting for it) or
  // the end. Returning false drops the connection (the client sees a cut-off response).
  bool provide(httplib::DataSink& sink) {
    try {
      if (!first.empty()) {
        std::vector<float> x;
        x.swap(first);
        if (!audio(sink, x)) return gone();
        return true;
      }
      for (;;) {
        std::optional<SpeechEvent> ev = job->wait_event(kPoll);
        if (!ev) {
          if (peer_closed(fd)) return gone();
          continue;
        }
        if (ev->kind == SpeechEvent::Audio) return audio(sink, ev->samples) || gone();
        if (ev->kind == SpeechEvent::Done) return finish(sink) || gone();
        // Failed after the headers: the status cannot change any more.
        log_line("request " + std::to_string(job->id) + ": " + ev->message);
        if (sse) {
          const std::string e = "data: " +
                                nlohmann::json{{"type", "error"},
                                               {"error", nlohmann::json::parse(error_body(ev->http_status, ev->message))["error"]}}
                                    .dump() +
                                "\n\n";
          sink.write(e.data(), e.size());
        }
        return false;
      }
    } catch (const std::exception& e) {
      log_line("request " + std::to_string(job->id) + ": " + e.what());
      job->cancel = true;
      return false;
    }
  }

  bool gone() {
    job->cancel = true;
    log_verbose("request " + std::to_string(job->id) + ": client gone, cancelling");
    return false;
  }
};

}  // namespace

void SpeechServer::speech(const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point received = Clock::now();
  SpeechRequest r;
  try {
    if (req.body.size() > opt_.max_body_bytes)
      throw ApiError(413, "the request body is " + std::to_string(req.body.size()) + " bytes; the limit is " +
                              std::to_string(opt_.max_body_bytes), "", "body_too_large");
    nlohmann::json body;
    try {
      body = nlohmann::json::parse(req.body);
    } catch (const nlohmann::json::parse_error& e) {
      if (const auto at = invalid_utf8_at(req.body))
        throw ApiError(400, "the request body is not valid UTF-8 (byte " + std::to_string(*at) + ")", "input",
                       "invalid_utf8");
      throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
    if (!body.is_object()) throw ApiError(400, std::string("the request body must be a JSON object, got ") + body.type_name());

    const std::optional<std::string> model = string_field(body, "model");
    r.engine = model ? engine_for(*model) : engines_[0].get();
    if (!r.engine)
      throw ApiError(400, "model '" + *model + "' does not exist; available: " + model_names(), "model", "model_not_found");
    const LoadedModel& lm = r.engine->model();

    const std::optional<std::string> input = string_field(body, "input");
    if (!input) throw ApiError(400, "missing 'input': the text to speak", "input", "missing_input");
    if (const auto at = invalid_utf8_at(*input))
      throw ApiError(400, "'input' is not valid UTF-8 (byte " + std::to_string(*at) + ")", "input", "invalid_utf8");
    if (is_blank(*input)) throw ApiError(400, "'input' is empty (or only white space)", "input", "empty_input");
    if (utf8_length(*input) > size_t(opt_.max_input_chars))
      throw ApiError(400, "'input' has " + std::to_string(utf8_length(*input)) + " characters; the limit is " +
                              std::to_string(opt_.max_input_chars) + " (--max-input-chars)",
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
      const bool builtin_name = std::find(openai_voice_names().begin(), openai_voice_names().end(), voice_name) !=
                                openai_voice_names().end();
      if (voices_.exists(voice_name)) {
        std::string error;
        r.voice = voices_.get(voice_name, error);
        if (!r.voice) throw ApiError(500, error, "voice");
      } else if (!builtin_name) {
        std::string names = "default";
        for (const VoiceInfo& v : voices_.list()) names += ", " + v.name;
        for (const std::string& n : openai_voice_names()) names += ", " + n;
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
  } catch (const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e.status, e.what(), e.param, e.code, e.type), "application/json");
    return;
  }

  auto job = std::make_shared<SpeechJob>();
  job->id = next_id_++;
  job->text = r.text;
  job->params = r.params;
  job->language = r.language;
  job->voice = r.voice;
  job->received = received;
  job->metrics = &metrics_;
  job->sample_rate = r.engine->model().sample_rate;
  if (opt_.timeout_s > 0)
    job->deadline = received + std::chrono::microseconds((long long)(opt_.timeout_s * 1e6));
  if (!r.engine->submit(job)) {
    const int wait = std::max(1, int(std::ceil(r.engine->estimated_wait_s())));
    res.set_header("Retry-After", std::to_string(wait));
    const ApiError e = stopping_ ? ApiError(503, "the server is shutting down", "", "shutting_down")
                                 : ApiError(429, "the server is busy: its queue is full (--max-queue " +
                                                     std::to_string(opt_.max_queue) + "); retry after " +
                                                     std::to_string(wait) + " s",
                                            "", "queue_full");
    res.status = e.status;
    res.set_content(error_body(e.status, e.what(), e.param, e.code, e.type), "application/json");
    return;
  }
  log_verbose("request " + std::to_string(job->id) + ": queued (" + std::to_string(utf8_length(r.text)) +
              " characters, " + r.engine->model().id + ")");

  auto st = std::make_shared<Stream>();
  st->job = job;
  st->format = r.format;
  st->sse = r.sse;
  st->speed = r.speed;
  st->sample_rate = job->sample_rate;
  st->metrics = &metrics_;
  st->fd = find_connection_socket(req.remote_addr, req.remote_port, port_);

  // Wait for the first audio (or the failure) before the headers go out: a request that fails
  // before any audio gets a real status and an error body.
  std::optional<SpeechEvent> first;
  while (!(first = job->wait_event(kPoll))) {
    if (peer_closed(st->fd)) {
      st->gone();
      res.status = 499;
      return;
    }
  }
  if (first->kind != SpeechEvent::Audio) {
    const int status = first->kind == SpeechEvent::Done ? 500 : first->http_status;
    const std::string msg = first->kind == SpeechEvent::Done ? "the model produced no audio" : first->message;
    res.status = status;
    res.set_content(error_body(status, msg, "", status == 504 ? "timeout" : ""), "application/json");
    metrics_.observe_duration(std::chrono::duration<double>(Clock::now() - received).count());
    return;
  }
  st->first = std::move(first->samples);
  try {
    if (st->speed == 1) st->encoder = std::make_unique<AudioStreamEncoder>(r.format, st->sample_rate);
  } catch (const std::exception& e) {
    job->cancel = true;
    res.status = 500;
    res.set_content(error_body(500, e.what()), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      r.sse ? "text/event-stream" : audio_format_mime(r.format),
      [st](size_t, httplib::DataSink& sink) { return st->provide(sink); },
      [st](bool success) {
        if (!success) st->job->cancel = true;
      });
}

}  // namespace cbx::server
