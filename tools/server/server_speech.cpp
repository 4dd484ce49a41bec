// POST /v1/audio/speech: OpenAI's body (+ Chatterbox's sampling extensions) -> a SpeechJob on the
// model's engine -> audio streamed to the client as the engine hands it over.
#include <httplib.h>

#include <cmath>

#include "audio/audio_encode.h"
#include "audio/time_stretch.h"
#include "core/error.h"
#include "server_http.h"
#include "server_request.h"
#include "server_socket.h"
#include "server_util.h"

namespace cbx::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);  // how often a waiting connection checks its client

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
          "data: " +
          nlohmann::json{{"type", "speech.audio.delta"}, {"audio", base64_encode(bytes.data(), bytes.size())}}.dump() +
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
          const std::string e =
              "data: " +
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
    r = parse_speech_request(req.body, ctx_);
  } catch (const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e.status, e.what(), e.param, e.code, e.type), "application/json");
    return;
  }

  Engine* engine = engines_[size_t(r.model)].get();
  auto job = std::make_shared<SpeechJob>();
  job->id = next_id_++;
  job->text = r.text;
  job->params = r.params;
  job->params.stream = opt_.stream_synthesis ? 1 : 0;  // the default schedule (stream_* fields untouched)
  job->language = r.language;
  job->voice = r.voice;
  job->received = received;
  job->metrics = &metrics_;
  job->sample_rate = engine->model().sample_rate;
  if (opt_.timeout_s > 0) job->deadline = received + std::chrono::microseconds((long long)(opt_.timeout_s * 1e6));
  if (!engine->submit(job)) {
    const int wait = std::max(1, int(std::ceil(engine->estimated_wait_s())));
    res.set_header("Retry-After", std::to_string(wait));
    const ApiError e =
        stopping_ ? ApiError(503, "the server is shutting down", "", "shutting_down")
                  : ApiError(429,
                             "the server is busy: its queue is full (--max-queue " + std::to_string(opt_.max_queue) +
                                 "); retry after " + std::to_string(wait) + " s",
                             "", "queue_full");
    res.status = e.status;
    res.set_content(error_body(e.status, e.what(), e.param, e.code, e.type), "application/json");
    return;
  }
  log_verbose("request " + std::to_string(job->id) + ": queued (" + std::to_string(utf8_length(r.text)) +
              " characters, " + engine->model().id + ")");

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
