// chatterbox serve: an OpenAI-compatible speech server (docs/server.md).
#include <signal.h>
#include <sys/stat.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "cli/command.h"
#include "core/error.h"
#include "pipeline/synth_options.h"
#include "server_http.h"

namespace cbx::server {
namespace {

const char* kUsage =
    "usage: chatterbox serve -m MODEL.gguf [-m MTL.gguf] [options]\n"
    "  An OpenAI-compatible speech server: POST /v1/audio/speech, GET/POST/DELETE /v1/audio/voices,\n"
    "  GET /v1/models, GET /v1/limits, GET /health, GET /metrics, and a web page at GET /\n"
    "  (docs/server.md).\n\n"
    "  -m, --model F           GGUF from `chatterbox convert`; repeat for one Turbo/Nano and one\n"
    "                          Multilingual model (the first is what tts-1 / tts-1-hd / gpt-4o-mini-tts mean)\n"
    "  --host H                address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N                TCP port (default 8080; 0: any free port, printed)\n"
    "  -t, --threads N         threads per model (default: the CPUs this process may use)\n"
    "  --voices DIR            saved voices: DIR/NAME.voice (uploads are written there)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/* (not /health, /metrics)\n"
    "  --api-key-file F        the same, the key read from the first line of F\n"
    "  --max-batch N           requests decoded together as one batch, per model (default 4, at most\n"
    "                          64; 1: one request at a time; Multilingual: each a CFG pair of rows)\n"
    "  --max-queue N           requests waiting per model before 429 (default 64)\n"
    "  --max-input-chars N     longest 'input', in characters (default 4096, as OpenAI)\n"
    "  --timeout S             per request, queue wait included; 0 = none (default 600)\n"
    "  --grace S               at SIGINT/SIGTERM: how long running requests may finish before they\n"
    "                          are cancelled (default 10)\n"
    "  --max-tokens N          speech tokens per generation (default: the model's, 1000 ~ 40 s)\n"
    "  --gemm-precision P      auto, f32 or bf16: GEMM precision (default auto: bf16 for quantized or\n"
    "                          f16 GGUFs, f32 for f32 ones; bf16 is faster with AMX or on AMD Zen 4+)\n"
    "  --cfm-precision P       auto, f32, bf16 or int8: the S3Gen CFM estimator's linears (default auto:\n"
    "                          int8 for quantized or f16 GGUFs with AVX-512 VNNI, else as --gemm-precision)\n"
    "  --cors ORIGIN           send Access-Control-Allow-Origin: ORIGIN (and answer preflights)\n"
    "  --no-ui                 do not serve the web page at GET /\n"
    "  --no-stream-synthesis   hand out audio per text chunk only (default: in pieces while the\n"
    "                          chunk is still decoding, the first after ~25 speech tokens)\n"
    "  -v, --verbose           log every request and its stages\n";

int64_t int_flag(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  const int64_t v = parse_int(flag, text);
  CBX_CHECK(v >= lo && v <= hi, "%s must be in [%lld, %lld], got %s", flag.c_str(), (long long)lo, (long long)hi,
            text.c_str());
  return v;
}

double seconds_flag(const std::string& flag, const std::string& text) {
  const double v = parse_number(flag, text);
  CBX_CHECK(v >= 0 && v <= 86400, "%s must be in [0, 86400] seconds, got %s", flag.c_str(), text.c_str());
  return v;
}

std::string read_key_file(const std::string& path) {
  std::ifstream f(path);
  CBX_CHECK(f.good(), "--api-key-file %s: cannot be read", path.c_str());
  std::string key;
  std::getline(f, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
  CBX_CHECK(!key.empty(), "--api-key-file %s: the first line is empty", path.c_str());
  return key;
}

// SIGINT / SIGTERM arrive here (blocked in every other thread) and end the wait in main.
std::mutex g_mu;
std::condition_variable g_cv;
bool g_stop = false;

// glibc gives each thread that allocates under contention an arena of its own (up to eight per
// CPU). The server's connection threads allocate per request (bodies, encoders, audio blocks), so
// every thread that has served a large response keeps those pages in its arena: RSS climbs as
// more threads take turns, and settles only when all have. The engine's decode and synthesis work
// in arenas of their own, so the heap sees a few allocations per request, not per step; two
// malloc arenas keep RSS lower and flat without contention. MALLOC_ARENA_MAX (or GLIBC_TUNABLES)
// set by the user still wins.
void limit_malloc_arenas() {
#if defined(__GLIBC__)
  if (!std::getenv("MALLOC_ARENA_MAX") && !std::getenv("GLIBC_TUNABLES")) mallopt(M_ARENA_MAX, 2);
#endif
}

int serve_main(int argc, char** argv) {
  limit_malloc_arenas();
  ServeOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      CBX_CHECK(i + 1 < argc, "%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      o.models.push_back(next());
    } else if (a == "--host") {
      o.host = next();
    } else if (a == "--port") {
      o.port = int(int_flag(a, next(), 0, 65535));
    } else if (a == "-t" || a == "--threads") {
      o.threads = int32_t(int_flag(a, next(), 1, 1024));
    } else if (a == "--voices") {
      o.voices_dir = next();
      struct stat st;
      CBX_CHECK(::stat(o.voices_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "--voices %s: not a directory",
                o.voices_dir.c_str());
    } else if (a == "--api-key") {
      o.api_key = next();
      CBX_CHECK(!o.api_key.empty(), "--api-key: the key is empty");
    } else if (a == "--api-key-file") {
      o.api_key = read_key_file(next());
    } else if (a == "--max-batch") {
      o.max_batch = int(int_flag(a, next(), 1, 64));
    } else if (a == "--max-queue") {
      o.max_queue = int(int_flag(a, next(), 1, 100000));
    } else if (a == "--max-input-chars") {
      o.max_input_chars = int(int_flag(a, next(), 1, 1000000));
    } else if (a == "--timeout") {
      o.timeout_s = seconds_flag(a, next());
    } else if (a == "--grace") {
      o.grace_s = seconds_flag(a, next());
    } else if (a == "--max-tokens") {
      o.max_tokens = int32_t(int_flag(a, next(), 1, 100000));
    } else if (a == "--gemm-precision") {
      switch (parse_gemm_precision_flag(a, next())) {
        case GemmPrecision::F32:
          o.gemm_precision = CBX_GEMM_F32;
          break;
        case GemmPrecision::BF16:
          o.gemm_precision = CBX_GEMM_BF16;
          break;
        default:
          o.gemm_precision = CBX_GEMM_DEFAULT;
          break;
      }
    } else if (a == "--cfm-precision") {
      switch (parse_cfm_precision_flag(a, next())) {
        case GemmPrecision::F32:
          o.cfm_precision = CBX_GEMM_F32;
          break;
        case GemmPrecision::BF16:
          o.cfm_precision = CBX_GEMM_BF16;
          break;
        case GemmPrecision::Int8:
          o.cfm_precision = CBX_GEMM_INT8;
          break;
        default:
          o.cfm_precision = CBX_GEMM_DEFAULT;
          break;
      }
    } else if (a == "--cors") {
      o.cors = next();
    } else if (a == "--no-ui") {
      o.ui = false;
    } else if (a == "--no-stream-synthesis") {
      o.stream_synthesis = false;
    } else if (a == "-v" || a == "--verbose") {
      o.verbose = true;
    } else {
      fail("unknown option '%s'\n%s", a.c_str(), kUsage);
    }
  }
  CBX_CHECK(!o.models.empty(), "-m MODEL.gguf is required\n%s", kUsage);
  CBX_CHECK(o.models.size() <= 2, "at most two models (one Turbo or Nano, one Multilingual), got %zu", o.models.size());
  set_verbose(o.verbose);

  // Signals: a dedicated thread takes SIGINT / SIGTERM; a client that goes away must not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::atomic<bool> done{false};
  std::thread sig_thread([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int s = sigtimedwait(&set, nullptr, &tick);
      if (s == SIGINT || s == SIGTERM) {
        log_line(std::string("received ") + (s == SIGINT ? "SIGINT" : "SIGTERM") + ", shutting down");
        std::lock_guard<std::mutex> lock(g_mu);
        g_stop = true;
        g_cv.notify_all();
      }
    }
  });

  int rc = 0;
  {
    SpeechServer server(o);
    try {
      const int port = server.start();
      log_line("listening on http://" + o.host + ":" + std::to_string(port) + " (loading)");
      if (o.ui) log_line("web page: http://" + o.host + ":" + std::to_string(port) + "/");
      server.load();
      log_line("ready");
      std::unique_lock<std::mutex> lock(g_mu);
      g_cv.wait(lock, [] { return g_stop; });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "chatterbox serve: error: %s\n", e.what());
      rc = 1;
    }
    server.shutdown();
  }
  done = true;
  sig_thread.join();
  if (rc == 0) log_line("stopped");
  return rc;
}

cli::RegisterCommand reg("serve", "OpenAI-compatible speech server (HTTP)", serve_main);

}  // namespace
}  // namespace cbx::server
