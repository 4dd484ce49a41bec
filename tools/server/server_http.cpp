#include "server_http.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "cli/command.h"
#include "core/error.h"
#include "pipeline/c_api_internal.h"
#include "server_request.h"
#include "server_ui.h"
#include "server_util.h"

namespace cbx::server {

namespace {

const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e.status, e.what(), e.param, e.code, e.type), kJson);
}

// The metrics label of a path: the route it matched ("other" for the rest, so that scanners
// cannot grow the label set).
std::string endpoint_label(const std::string& method, const std::string& path) {
  static const char* known[] = {"/v1/audio/speech", "/v1/audio/voices", "/v1/models", "/v1/limits",
                                "/health",          "/metrics",         "/"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/audio/voices/", 0) == 0) return "/v1/audio/voices/{name}";
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

std::string model_id(const std::string& variant) {
  if (variant == "mtl") return "chatterbox-multilingual";
  return "chatterbox-" + variant;
}

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

SpeechServer::SpeechServer(ServeOptions o) : opt_(std::move(o)), voices_(opt_.voices_dir) {
  ctx_.voices = &voices_;
  ctx_.max_body_bytes = opt_.max_body_bytes;
  ctx_.max_input_chars = opt_.max_input_chars;
  started_unix_ = (long long)std::time(nullptr);
  http_ = std::make_unique<httplib::Server>();
  // One connection thread per queued or running request, plus a few for the quick endpoints:
  // requests beyond the queue are answered 429 instead of waiting for a thread.
  const size_t n_threads =
      size_t(opt_.max_queue) + size_t(opt_.max_batch) * std::max<size_t>(1, opt_.models.size()) + 8;
  http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http_->set_payload_max_length(std::max(opt_.max_body_bytes, opt_.max_upload_bytes));
  http_->set_keep_alive_timeout(5);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  routes();
}

SpeechServer::~SpeechServer() { shutdown(); }

std::string SpeechServer::model_names() const { return server::model_names(ctx_.models); }

Engine* SpeechServer::engine_for(const std::string& name) {
  const int i = model_index(ctx_.models, name);
  return i < 0 ? nullptr : engines_[size_t(i)].get();
}

bool SpeechServer::authorized(const httplib::Request& req, httplib::Response& res) {
  if (opt_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (h.rfind(bearer, 0) == 0 && same_secret(h.substr(bearer.size()), opt_.api_key)) return true;
  send_error(res, ApiError(401,
                           h.empty() ? "missing API key: send the header 'Authorization: Bearer KEY'"
                                     : "incorrect API key provided",
                           "", "invalid_api_key"));
  return false;
}

void SpeechServer::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!opt_.cors.empty()) {
      res.set_header("Access-Control-Allow-Origin", opt_.cors);
      if (opt_.cors != "*") res.set_header("Vary", "Origin");
    }
    // Once stopping, every answer closes its connection: a client polling on a keep-alive
    // connection (e.g. /health) would otherwise hold a connection thread, and the shutdown, open.
    if (stopping_) res.set_header("Connection", "close");
    if (req.method == "OPTIONS") {  // CORS preflight: no auth, no body
      if (!opt_.cors.empty()) {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
      }
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path.rfind("/v1/", 0) == 0) {
      if (!authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
      if (!ready_) {
        send_error(res, ApiError(503, "the model is loading; retry when GET /health answers 200", "", "loading"));
        res.set_header("Retry-After", "1");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (stopping_) {
        send_error(res, ApiError(503, "the server is shutting down", "", "shutting_down"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib answers itself (no route, body over the limit, bad request line): same shape.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg;
    if (res.status == 404)
      msg = "no such endpoint: " + req.method + " " + req.path;
    else if (res.status == 413)
      msg = "the request body is too large";
    else
      msg = "HTTP error " + std::to_string(res.status);
    res.set_content(error_body(res.status, msg, "", res.status == 404 ? "not_found" : ""), kJson);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(error_body(500, msg), kJson);
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (req.method == "OPTIONS") return;
    metrics_.count_request(endpoint_label(req.method, req.path), res.status);
    log_verbose(req.method + " " + printable(req.path) + " " + std::to_string(res.status));
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping_) {
      res.status = 503;
      res.set_content("{\"status\":\"shutting_down\"}\n", kJson);
    } else if (!ready_) {
      res.status = 503;
      res.set_content("{\"status\":\"loading\"}\n", kJson);
    } else {
      res.set_content("{\"status\":\"ok\"}\n", kJson);
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json data = nlohmann::json::array();
    for (const auto& e : engines_)
      data.push_back({{"id", e->model().id},
                      {"object", "model"},
                      {"created", started_unix_},
                      {"owned_by", "chatterbox.cpp"},
                      {"languages", e->model().languages}});
    res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump() + "\n", kJson);
  });
  // The server's limits, for clients that check input before sending it (the web page shows them).
  s.Get("/v1/limits", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(nlohmann::json{{"object", "limits"},
                                   {"max_input_chars", opt_.max_input_chars},
                                   {"max_body_bytes", opt_.max_body_bytes},
                                   {"max_upload_bytes", opt_.max_upload_bytes},
                                   {"voice_uploads", voices_.enabled()}}
                            .dump() +
                        "\n",
                    kJson);
  });
  if (opt_.ui) add_ui_routes(s);
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    Engine* e = engine_for(req.matches[1]);
    if (!e)
      return send_error(
          res, ApiError(404, "model '" + std::string(req.matches[1]) + "' does not exist; available: " + model_names(),
                        "model", "model_not_found"));
    res.set_content(
        nlohmann::json{
            {"id", e->model().id}, {"object", "model"}, {"created", started_unix_}, {"owned_by", "chatterbox.cpp"}}
                .dump() +
            "\n",
        kJson);
  });
  s.Post("/v1/audio/speech", [this](const httplib::Request& req, httplib::Response& res) { speech(req, res); });
  s.Get("/v1/audio/voices", [this](const httplib::Request& req, httplib::Response& res) { voices_list(req, res); });
  s.Post("/v1/audio/voices", [this](const httplib::Request& req, httplib::Response& res) { voices_create(req, res); });
  s.Delete(R"(/v1/audio/voices/(.+))",
           [this](const httplib::Request& req, httplib::Response& res) { voices_delete(req, res); });
}

int SpeechServer::start() {
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.host);
    CBX_CHECK(port_ > 0, "serve: cannot listen on %s (any port)", opt_.host.c_str());
  } else {
    CBX_CHECK(http_->bind_to_port(opt_.host, opt_.port),
              "serve: cannot listen on %s:%d (in use, or not an address of this machine?)", opt_.host.c_str(),
              opt_.port);
    port_ = opt_.port;
  }
  listen_thread_ = std::thread([this] {
    http_->listen_after_bind();
    listen_done_ = true;
  });
  return port_;
}

namespace {
// The model load's progress: a line rewritten in place on a terminal, one line per step with -v
// elsewhere (at most one per percent: a quantized T3 reports each matrix it packs), nothing
// otherwise.
struct LoadProgressLine {
  std::string path;
  bool tty = false;
  long last = -1;  // the percentage shown last
};
int show_load_progress(float fraction, void* user) {
  auto* l = static_cast<LoadProgressLine*>(user);
  const long pct = std::lround(double(fraction) * 100.0);
  if (pct == l->last) return 1;
  l->last = pct;
  const std::string line = "loading " + l->path + " " + std::to_string(pct) + "%";
  if (l->tty)
    log_progress(line);
  else
    log_line(line);
  return 1;
}
}  // namespace

void SpeechServer::load() {
  for (const std::string& path : opt_.models) {
    LoadProgressLine progress_line{path, cli::progress_wanted(false)};
    cbx_model_params mp = cbx_model_default_params();
    if (progress_line.tty || opt_.verbose) {
      mp.progress_callback = show_load_progress;
      mp.progress_callback_user_data = &progress_line;
    }
    mp.n_threads = opt_.threads;
    mp.max_new_tokens = opt_.max_tokens;
    mp.gemm_precision = opt_.gemm_precision;
    mp.cfm_precision = opt_.cfm_precision;
    cbx_model* m = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    if (cbx_model_load(path.c_str(), &mp, &m) != CBX_OK) fail("serve: %s: %s", path.c_str(), cbx_last_error());
    const auto t1 = std::chrono::steady_clock::now();
    models_.push_back(m);
    LoadedModel lm;
    lm.model = m;
    lm.variant = cbx_model_variant(m);
    lm.id = model_id(lm.variant);
    lm.sample_rate = cbx_model_sample_rate(m);
    for (int32_t i = 0; i < cbx_model_language_count(m); ++i) lm.languages.push_back(cbx_model_language(m, i));
    for (const auto& e : engines_)
      CBX_CHECK(e->model().id != lm.id, "serve: two models are %s (-m %s): serve one model per variant", lm.id.c_str(),
                path.c_str());
    // The built-in voice's T3 prefix, so that the first request does not pay for it.
    if (progress_line.tty || opt_.verbose) log_line("preparing the built-in voice of " + path);
    if (cbx_model_prepare_voice(m, nullptr) != CBX_OK)
      fail("serve: %s: preparing the built-in voice: %s", path.c_str(), cbx_last_error());
    const auto t2 = std::chrono::steady_clock::now();
    char took[96];
    std::snprintf(took, sizeof took, " in %.1f s (voice prefix %.0f ms)",
                  std::chrono::duration<double>(t2 - t0).count(),
                  std::chrono::duration<double, std::milli>(t2 - t1).count());
    log_line("loaded " + path + " as " + lm.id + took);
    engines_.push_back(std::make_unique<Engine>(std::move(lm), size_t(opt_.max_queue), metrics_, opt_.max_batch));
    ctx_.models.push_back(&engines_.back()->model());
    if (opt_.max_batch > 1 && cbx::model_turbo_pipeline(m))
      log_line(engines_.back()->model().id + ": up to " + std::to_string(opt_.max_batch) +
               " requests decoded together (--max-batch)");
  }
  ready_ = true;
}

void SpeechServer::shutdown() {
  if (stopping_.exchange(true)) {
    if (listen_thread_.joinable()) listen_thread_.join();
    return;
  }
  // httplib's stop() does nothing until the listen loop runs: a model that fails to load at once
  // can reach here before the listen thread has started it. Wait for it (bounded), then stop.
  for (int i = 0; i < 5000 && listen_thread_.joinable() && !listen_done_ && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();  // stop accepting; the listen thread then waits for the open connections
  const auto grace = std::chrono::milliseconds((long long)(opt_.grace_s * 1000));
  for (auto& e : engines_) e->stop(grace);
  if (listen_thread_.joinable()) listen_thread_.join();
  ctx_.models.clear();
  engines_.clear();
  for (cbx_model* m : models_) cbx_model_free(m);
  models_.clear();
}

// ---- voices ----

void SpeechServer::voices_list(const httplib::Request&, httplib::Response& res) {
  nlohmann::json data = nlohmann::json::array();
  for (const VoiceInfo& v : voices_.list())
    data.push_back({{"id", v.name}, {"object", "voice"}, {"name", v.name}, {"variant", v.variant}, {"builtin", false}});
  for (const std::string& n : openai_voice_names())
    if (!voices_.exists(n))
      data.push_back({{"id", n}, {"object", "voice"}, {"name", n}, {"variant", nullptr}, {"builtin", true}});
  res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump() + "\n", kJson);
}

void SpeechServer::voices_create(const httplib::Request& req, httplib::Response& res) {
  try {
    const VoiceUpload u = parse_voice_upload(req, ctx_);
    const std::string& name = u.name;
    Engine* engine = engines_[size_t(u.model)].get();
    if (!voices_.reserve(name))
      throw ApiError(409,
                     "voice '" + name + "' exists (or is being uploaded); DELETE /v1/audio/voices/" + name + " first",
                     "name", "voice_exists");
    auto job = std::make_shared<VoiceJob>();
    job->id = next_id_++;
    job->audio = u.file->content;
    job->filename = u.filename;
    job->path = voices_.path(name);
    if (!engine->submit(job)) {
      voices_.release(name);
      res.set_header("Retry-After", std::to_string(std::max(1, int(std::ceil(engine->estimated_wait_s())))));
      throw ApiError(429, "the server is busy: its queue is full (--max-queue " + std::to_string(opt_.max_queue) + ")",
                     "", "queue_full");
    }
    std::string message, variant;
    const cbx_status s = job->wait(message, variant);
    voices_.release(name);
    if (s == CBX_ERR_AUDIO || s == CBX_ERR_INVALID_ARGUMENT)
      throw ApiError(400, "the uploaded file cannot make a voice: " + message, "file", "invalid_audio");
    if (s == CBX_ERR_ABORTED) throw ApiError(503, message, "", "shutting_down");
    if (s != CBX_OK) throw ApiError(500, "voice '" + name + "': " + message);
    res.status = 201;
    res.set_content(
        nlohmann::json{{"id", name}, {"object", "voice"}, {"name", name}, {"variant", variant}, {"builtin", false}}
                .dump() +
            "\n",
        kJson);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void SpeechServer::voices_delete(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  try {
    if (!voices_.enabled()) throw ApiError(404, "no saved voices: the server was started without --voices", "name");
    if (const std::string p = VoiceStore::name_problem(name); !p.empty())
      throw ApiError(400, "invalid voice name '" + name + "': " + p, "name", "invalid_name");
    std::string error;
    if (!voices_.remove(name, error)) throw ApiError(404, error, "name", "voice_not_found");
    res.set_content(nlohmann::json{{"id", name}, {"object", "voice.deleted"}, {"deleted", true}}.dump() + "\n", kJson);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace cbx::server
