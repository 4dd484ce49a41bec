// `chatterbox serve`: the HTTP front end (cpp-httplib) over the C API. It parses, validates,
// queues and streams; the models' work runs on their engines (server_engine.h).
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_engine.h"
#include "server_metrics.h"
#include "server_request.h"
#include "server_voices.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace cbx::server {

struct ServeOptions {
  std::vector<std::string> models;  // -m, in order; the first is what OpenAI's model names mean
  std::string host = "127.0.0.1";
  int port = 8080;                            // 0: any free port (printed)
  int32_t threads = CBX_DEFAULT_INT;          // per model; default: the CPUs this process may use
  int32_t max_tokens = CBX_DEFAULT_INT;       // speech tokens per generation (load parameter)
  int32_t gemm_precision = CBX_GEMM_DEFAULT;  // cbx_gemm_precision (load parameter)
  int32_t cfm_precision = CBX_GEMM_DEFAULT;   // cbx_gemm_precision of the CFM linears (load parameter)
  std::string voices_dir;
  std::string api_key;
  int max_batch = 4;  // Turbo / Nano requests decoded together (1: one at a time)
  int max_queue = 64;
  int max_input_chars = 4096;
  double timeout_s = 600;              // per request, queue wait included; 0 = none
  double grace_s = 10;                 // at shutdown: how long running work may finish before it is aborted
  size_t max_body_bytes = 1 << 20;     // JSON bodies
  size_t max_upload_bytes = 50 << 20;  // voice uploads
  std::string cors;                    // Access-Control-Allow-Origin value; "" = no CORS headers
  bool ui = true;                      // GET /: the web page (server_ui.h); --no-ui turns it off
  // Token-chunked streaming inside a text chunk (docs/streaming.md, default schedule): a request's
  // first audio leaves after ~25 speech tokens; --no-stream-synthesis: whole text chunks only.
  bool stream_synthesis = true;
  bool verbose = false;
};

class SpeechServer {
 public:
  explicit SpeechServer(ServeOptions o);
  ~SpeechServer();

  // Binds host:port (throws cbx::Error when it cannot) and starts answering on a thread:
  // /health says 503 until load() has finished. Returns the bound port.
  int start();
  // Loads every model, prepares each Turbo model's built-in voice prefix, starts the engines.
  void load();
  // Stops accepting, answers queued requests 503, lets running work finish for up to grace_s
  // (then aborts it), waits for the connections to end and frees the models.
  void shutdown();

 private:
  void routes();
  bool authorized(const httplib::Request& req, httplib::Response& res);
  Engine* engine_for(const std::string& model_name);  // nullptr: unknown
  std::string model_names() const;
  void speech(const httplib::Request& req, httplib::Response& res);
  void voices_list(const httplib::Request& req, httplib::Response& res);
  void voices_create(const httplib::Request& req, httplib::Response& res);
  void voices_delete(const httplib::Request& req, httplib::Response& res);

  ServeOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listen_thread_;
  Metrics metrics_;
  VoiceStore voices_;
  std::vector<std::unique_ptr<Engine>> engines_;
  RequestContext ctx_;  // what request validation sees: the engines' models, the voices, the limits
  std::vector<cbx_model*> models_;
  std::atomic<bool> ready_{false}, stopping_{false};
  std::atomic<bool> listen_done_{false};  // listen_after_bind has returned
  std::atomic<uint64_t> next_id_{1};
  int port_ = 0;
  long long started_unix_ = 0;
};

}  // namespace cbx::server
