// chatterbox-bench serve -m MODEL.gguf [--concurrency 1,2,4,8] [--rounds R] [--tokens N] [--max-batch B]
//                        [--threads T] [--seed S] [--text TEXT] [--voice V] [--server-bin PATH]
//                        [--request-timeout S] [--load-timeout S]
// chatterbox-bench serve --soak -m MODEL.gguf [--warmup N] [--sequential N] [--clients K] [--per-client N]
//                        [--tokens N] [--max-batch B] [--threads T] [--server-bin PATH] ...
//
// A real client of a real server: starts `chatterbox serve -m MODEL --host 127.0.0.1 --port 0 -t T
// --max-batch B --max-tokens N-1` as a child process (the binary next to chatterbox-bench, or
// --server-bin; port 0 and the port read from its log, so no other process can take the port in
// between), waits for GET /health 200, then sends POST /v1/audio/speech requests (response_format
// pcm, read as the chunked response arrives) to 127.0.0.1 only. The server is stopped (SIGTERM,
// then SIGKILL) on every exit path, and gets SIGTERM if this process dies.
//
// Request length. The speech API has no per-request token count; the server's --max-tokens (the
// load parameter, speech tokens per generation after the prefill one) caps each text chunk at
// N tokens, and the default text is one sentence (one chunk) long enough that a real model is
// still speaking at 200 tokens (~8 s). A model that stops earlier (EOS) gives shorter requests:
// tokens_per_request reports the real count (GET /metrics chatterbox_speech_tokens_total).
//
// Throughput: for each concurrency C, one warm-up round (not counted) and --rounds rounds of C
// requests sent at once (same text, seed and voice). One line per C:
//   audio_s_per_s     audio seconds received (pcm bytes / 2 / 24000) / wall time of the rounds
//   t3_tok_s_total    speech tokens generated (chatterbox_speech_tokens_total before/after each
//                     round) / wall time of the rounds: S3Gen/HiFT and HTTP included (a lower
//                     bound of decode tok/s; the decode time itself is on the engine line below)
//   ttfa_p50_ms, ttfa_p95_ms  request sent -> first audio byte, over the counted requests
//   peak_rss_mb       the server's VmHWM so far (since start); rss_mb its VmRSS after the rounds
//   requests, failures, tokens_per_request, audio_s_per_request, wall_s
//   stream_gbps       stream reads by this process (--threads threads, a --sample-mb MiB huge-page
//                     buffer; bench/stream_read.h StreamSampler) just before each counted round,
//                     while the server is idle: mean over this C's rounds. The one-request decode
//                     is bound by memory bandwidth, which on a shared host moves within minutes,
//                     so the ratios between concurrencies move with it.
// A batched server (--max-batch > 1) adds a comment line per C: its engine thread's seconds per
// request by stage over the rounds (chatterbox_engine_seconds_total{stage} before/after each
// round: decode, s3gen_stream, s3gen_final, s3gen_chunk, flow, cfm, hift) and wall_per_request.
// then ratio_tok_s_4_vs_1= and ratio_audio_4_vs_1= when 1 and 4 were both measured.
//
// Soak (--soak): a warm-up (--warmup sequential requests, then --clients threads each sending one
// request per format) so that the allocator's arenas and the server's buffers reach their working size, the
// server's VmRSS read; then --sequential requests one after another and --clients threads x
// --per-client requests each; VmRSS read again. Seeds differ per request and the response
// formats rotate (pcm, wav, mp3, flac) so the encoders are exercised too. One line:
//   rss_warm_mb= rss_end_mb= rss_growth_pct= rss_peak_mb= requests= failures= server_exit= wall_s=
// (requests and failures count the measured requests; a warm-up failure is a failure too).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "serve_process.h"
#include "stream_read.h"

namespace cbx::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kPcmRate = 24000;  // pcm is 16-bit mono at 24 kHz (docs/server.md)

// One sentence: one Turbo text chunk (with the real GPT-2 tokenizer and the full-size synthetic
// one), about 9 s of speech on a real model, so 200 tokens are reached before it ends.
constexpr const char* kText =
    "The quick brown fox jumps over the lazy dog while the old farmer watches from his porch, sipping his "
    "coffee slowly and thinking about the long winter ahead.";
constexpr const char* kSoakText = "Hello there, this is a short test.";

const char* kUsage =
    "usage: chatterbox-bench serve -m MODEL.gguf [--concurrency 1,2,4,8] [--rounds R (2)] [--tokens N (200)]\n"
    "                              [--max-batch B (8)] [--threads T (2)] [--seed S] [--text TEXT] [--voice V]\n"
    "                              [--server-bin PATH] [--request-timeout S (600)] [--load-timeout S (600)]\n"
    "                              [--no-stream-synthesis (the server's flag: one S3Gen run per text chunk)]\n"
    "                              [--sample-mb MB (256; the stream-read buffer, read before each round)]\n"
    "       chatterbox-bench serve --soak -m MODEL.gguf [--warmup N (100)] [--sequential N (500)] [--clients K (8)]\n"
    "                              [--per-client N (25)] [--tokens N (5)] [--max-batch B (4)] ...\n"
    "  (see bench/bench_serve.cpp)";

struct Args {
  std::string model, server_bin, text, voice = "default";
  std::vector<int> concurrency{1, 2, 4, 8};
  std::vector<std::string> formats{"pcm", "wav", "mp3", "flac"};  // --soak rotates them
  int rounds = 2, tokens = -1, max_batch = -1, threads = 2;
  uint64_t seed = 0;
  double request_timeout = 600, load_timeout = 600;
  bool soak = false;
  bool no_stream_synthesis = false;  // passed on to the server
  int warmup = 100, sequential = 500, clients = 8, per_client = 25;
  int sample_mb = 256;
};

double seconds_arg(const std::string& flag, const char* v) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  CBX_CHECK(end != v && *end == '\0' && x > 0 && x <= 86400, "%s must be seconds in (0, 86400], got '%s'", flag.c_str(),
            v);
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool text_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "%s needs a value\n%s", f.c_str(), kUsage);
      return argv[++i];
    };
    if (f == "-m" || f == "--model")
      a.model = next();
    else if (f == "--server-bin")
      a.server_bin = next();
    else if (f == "--text")
      a.text = next(), text_given = true;
    else if (f == "--voice")
      a.voice = next();
    else if (f == "--no-stream-synthesis")
      a.no_stream_synthesis = true;
    else if (f == "--soak")
      a.soak = true;
    else if (f == "--rounds")
      a.rounds = int(int_arg(f, next(), 1, 1000));
    else if (f == "--tokens")
      a.tokens = int(int_arg(f, next(), 2, 100000));
    else if (f == "--max-batch")
      a.max_batch = int(int_arg(f, next(), 1, 256));
    else if (f == "--threads" || f == "-t")
      a.threads = int(int_arg(f, next(), 1, 1024));
    else if (f == "--seed")
      a.seed = uint64_t(int_arg(f, next(), 0, LLONG_MAX));
    else if (f == "--request-timeout")
      a.request_timeout = seconds_arg(f, next());
    else if (f == "--load-timeout")
      a.load_timeout = seconds_arg(f, next());
    else if (f == "--sample-mb")
      a.sample_mb = int(int_arg(f, next(), 1, 65536));
    else if (f == "--warmup")
      a.warmup = int(int_arg(f, next(), 0, 1000000));
    else if (f == "--sequential")
      a.sequential = int(int_arg(f, next(), 0, 1000000));
    else if (f == "--clients")
      a.clients = int(int_arg(f, next(), 1, 64));
    else if (f == "--per-client")
      a.per_client = int(int_arg(f, next(), 0, 1000000));
    else if (f == "--formats") {
      a.formats.clear();
      const std::string list = next();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        a.formats.push_back(list.substr(at, comma - at));
        CBX_CHECK(!a.formats.back().empty(), "--formats: an empty name in '%s'", list.c_str());
        at = comma + 1;
      }
    } else if (f == "--concurrency") {
      a.concurrency.clear();
      const std::string list = next();
      size_t at = 0;
      while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string item = list.substr(at, comma - at);
        a.concurrency.push_back(int(int_arg(f, item.c_str(), 1, 64)));
        at = comma + 1;
      }
    } else if (f == "-h" || f == "--help") {
      std::puts(kUsage);
      std::exit(0);
    } else {
      fail("unknown option '%s'\n%s", f.c_str(), kUsage);
    }
  }
  CBX_CHECK(!a.model.empty(), "-m MODEL.gguf is required\n%s", kUsage);
  if (!text_given) a.text = a.soak ? kSoakText : kText;
  CBX_CHECK(!a.text.empty(), "--text is empty");
  if (a.tokens < 0) a.tokens = a.soak ? 5 : 200;
  if (a.max_batch < 0) a.max_batch = a.soak ? 4 : 8;
  if (a.server_bin.empty()) {  // next to chatterbox-bench
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    CBX_CHECK(n > 0, "cannot find this program's path (/proc/self/exe); give --server-bin");
    std::string dir(self, size_t(n));
    a.server_bin = dir.substr(0, dir.rfind('/') + 1) + "chatterbox";
  }
  return a;
}

// The server's --max-queue: room for every request the bench has in flight. Not more: the server
// runs max_queue + max_batch + 8 connection threads, and each thread's stack pages join its RSS
// the first time that thread encodes (deeply for MP3), which a soak would read as growth until
// every thread has served every format.
int max_queue(const Args& a) {
  int most = a.soak ? a.clients : 1;
  for (const int c : a.concurrency) most = std::max(most, a.soak ? 0 : c);
  return std::max(16, 2 * most);
}

// The server, started and ready, with a temporary directory for its log (removed at the end).
struct Server {
  std::string dir;
  std::unique_ptr<ServerProcess> proc;
  int port = 0;

  explicit Server(const Args& a) {
    char tmpl[] = "/tmp/cbx-bench-serve-XXXXXX";
    CBX_CHECK(::mkdtemp(tmpl), "cannot create a temporary directory in /tmp");
    dir = tmpl;
    // --max-tokens counts the tokens after the prefill one: N tokens in all per chunk.
    std::vector<std::string> args{"serve",
                                  "-m",
                                  a.model,
                                  "--host",
                                  "127.0.0.1",
                                  "--port",
                                  "0",
                                  "-t",
                                  std::to_string(a.threads),
                                  "--max-batch",
                                  std::to_string(a.max_batch),
                                  "--max-tokens",
                                  std::to_string(a.tokens - 1),
                                  "--max-queue",
                                  std::to_string(max_queue(a)),
                                  "--timeout",
                                  std::to_string(int(std::ceil(a.request_timeout))),
                                  "--grace",
                                  "2",
                                  "--no-ui"};
    if (a.no_stream_synthesis) args.push_back("--no-stream-synthesis");
    try {
      proc = std::make_unique<ServerProcess>(a.server_bin, args, dir + "/server.log");
      port = proc->wait_ready(a.load_timeout);
    } catch (...) {
      cleanup();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  ~Server() { cleanup(); }
  void cleanup() {
    proc.reset();  // stops the child
    ::unlink((dir + "/server.log").c_str());
    ::rmdir(dir.c_str());
  }
  double metric(const std::string& name) const { return prometheus_value(http_get(port, "/metrics"), name); }
  std::string metrics_page() const { return http_get(port, "/metrics"); }
};

// The engine stages GET /metrics reports (chatterbox_engine_seconds_total{stage=...}, batched engines).
const char* const kStages[] = {"decode", "s3gen_stream", "s3gen_final", "s3gen_chunk", "flow", "cfm", "hift"};
constexpr size_t kNStages = sizeof(kStages) / sizeof(kStages[0]);

std::array<double, kNStages> stage_seconds(const std::string& page) {
  std::array<double, kNStages> v{};
  for (size_t i = 0; i < kNStages; ++i) {
    const double x =
        prometheus_value(page, std::string("chatterbox_engine_seconds_total{stage=\"") + kStages[i] + "\"}");
    v[i] = std::isnan(x) ? 0 : x;
  }
  return v;
}

std::string speech_body(const Args& a, uint64_t seed, const char* format) {
  return nlohmann::json{
      {"model", "tts-1"}, {"input", a.text}, {"voice", a.voice}, {"response_format", format}, {"seed", seed}}
      .dump();
}

// Runs n requests from n threads released together; returns them in order.
std::vector<SpeechResult> burst(int port, const std::vector<std::string>& bodies, double timeout_s) {
  std::vector<SpeechResult> out(bodies.size());
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      out[i] = post_speech(port, bodies[i], timeout_s);
    });
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  return out;
}

double percentile(std::vector<double> v, double p) {  // nearest rank
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t k = size_t(std::ceil(p * double(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

void report_failure(const SpeechResult& r) { std::fprintf(stderr, "request failed: %s\n", r.error.c_str()); }

int run_throughput(const Args& a) {
  Server srv(a);
  std::printf(
      "# chatterbox-bench serve: model=%s server=%s threads=%d max_batch=%d tokens_limit=%d rounds=%d "
      "(+1 warm-up) text_chars=%zu seed=%llu format=pcm synthesis=%s; audio_s_per_s = audio seconds received / round "
      "wall time; t3_tok_s_total = speech tokens (GET /metrics) / round wall time (S3Gen, HiFT and HTTP "
      "included; decode-only time: engine_s_per_request)\n",
      a.model.c_str(), a.server_bin.c_str(), a.threads, a.max_batch, a.tokens, a.rounds, a.text.size(),
      (unsigned long long)a.seed, a.no_stream_synthesis ? "per-chunk" : "streamed");
  std::fflush(stdout);
  double tok_s_1 = -1, tok_s_4 = -1, audio_1 = -1, audio_4 = -1;
  int total_failures = 0;
  ThreadPool pool(a.threads);
  StreamSampler streams(pool, size_t(a.sample_mb));
  for (const int c : a.concurrency) {
    const std::vector<std::string> bodies(size_t(c), speech_body(a, a.seed, "pcm"));
    for (const SpeechResult& r : burst(srv.port, bodies, a.request_timeout))  // warm-up round
      if (!r.ok) report_failure(r);
    double wall = 0, audio_s = 0, tokens = 0;
    int failures = 0, requests = 0;
    std::vector<double> ttfa;
    std::array<double, kNStages> stages{};
    double gbps_sum = 0;
    for (int round = 0; round < a.rounds; ++round) {
      streams.sample();  // the server is idle between rounds
      gbps_sum += streams.last_gbps();
      const std::string page0 = srv.metrics_page();
      const double tok0 = prometheus_value(page0, "chatterbox_speech_tokens_total");
      const std::array<double, kNStages> st0 = stage_seconds(page0);
      const Clock::time_point t0 = Clock::now();
      const std::vector<SpeechResult> rs = burst(srv.port, bodies, a.request_timeout);
      wall += std::chrono::duration<double>(Clock::now() - t0).count();
      const std::string page1 = srv.metrics_page();
      tokens += prometheus_value(page1, "chatterbox_speech_tokens_total") - tok0;
      const std::array<double, kNStages> st1 = stage_seconds(page1);
      for (size_t i = 0; i < kNStages; ++i) stages[i] += st1[i] - st0[i];
      for (const SpeechResult& r : rs) {
        ++requests;
        if (!r.ok) {
          ++failures;
          report_failure(r);
          continue;
        }
        audio_s += double(r.bytes) / 2 / kPcmRate;
        ttfa.push_back(r.ttfa_s * 1e3);
      }
    }
    const ProcessRss rss = process_rss(srv.proc->pid());
    const double audio_rate = audio_s / wall, tok_rate = tokens / wall;
    std::printf(
        "concurrency=%d audio_s_per_s=%.3f t3_tok_s_total=%.1f ttfa_p50_ms=%.0f ttfa_p95_ms=%.0f "
        "peak_rss_mb=%.0f rss_mb=%.0f requests=%d failures=%d tokens_per_request=%.1f "
        "audio_s_per_request=%.2f wall_s=%.2f stream_gbps=%.1f\n",
        c, audio_rate, tok_rate, percentile(ttfa, 0.5), percentile(ttfa, 0.95), rss.hwm_mb, rss.rss_mb, requests,
        failures, tokens / requests, audio_s / std::max(1, requests - failures), wall, gbps_sum / a.rounds);
    if (stages[0] > 0) {  // a batched engine: where its time went, per request
      std::printf("# engine_s_per_request concurrency=%d", c);
      for (size_t i = 0; i < kNStages; ++i) std::printf(" %s=%.3f", kStages[i], stages[i] / requests);
      std::printf(" wall_per_request=%.3f\n", wall / requests);
    }
    if (tokens / requests > a.tokens + 0.5)
      std::printf(
          "# note: %.1f tokens per request > the %d-token limit per text chunk: this model's tokenizer "
          "split the text into several chunks (a shorter --text makes one)\n",
          tokens / requests, a.tokens);
    std::fflush(stdout);
    total_failures += failures;
    if (c == 1) tok_s_1 = tok_rate, audio_1 = audio_rate;
    if (c == 4) tok_s_4 = tok_rate, audio_4 = audio_rate;
  }
  if (tok_s_1 > 0 && tok_s_4 > 0 && audio_1 > 0)
    std::printf("ratio_tok_s_4_vs_1=%.2f ratio_audio_4_vs_1=%.2f\n", tok_s_4 / tok_s_1, audio_4 / audio_1);
  const int exit_status = srv.proc->stop();
  std::printf("# server exit status %d\n", exit_status);
  return total_failures == 0 && exit_status == 0 ? 0 : 1;
}

int run_soak(const Args& a) {
  const Clock::time_point start = Clock::now();
  Server srv(a);
  std::atomic<uint64_t> next_seed{a.seed};
  std::atomic<int> failures{0}, warm_failures{0};
  auto one = [&](std::atomic<int>& fails) {
    const uint64_t s = next_seed++;
    const std::string& format = a.formats[s % a.formats.size()];
    const SpeechResult r = post_speech(srv.port, speech_body(a, s, format.c_str()), a.request_timeout);
    if (!r.ok) {
      ++fails;
      report_failure(r);
    }
  };
  auto concurrent = [&](int per_client, std::atomic<int>& fails) {
    std::vector<std::thread> threads;
    for (int k = 0; k < a.clients; ++k)
      threads.emplace_back([&] {
        for (int i = 0; i < per_client; ++i) one(fails);
      });
    for (std::thread& t : threads) t.join();
  };
  for (int i = 0; i < a.warmup; ++i) one(warm_failures);
  // Concurrent warm-up: each client goes once through every format, so that the server's
  // connection threads have held the concurrent pattern's buffers before the first RSS read.
  if (a.warmup > 0) concurrent(int(a.formats.size()), warm_failures);
  const double rss_warm = process_rss(srv.proc->pid()).rss_mb;
  for (int i = 0; i < a.sequential; ++i) one(failures);
  const double rss_seq = process_rss(srv.proc->pid()).rss_mb;
  concurrent(a.per_client, failures);
  const ProcessRss end = process_rss(srv.proc->pid());
  const double growth = rss_warm > 0 ? (end.rss_mb - rss_warm) / rss_warm * 100 : std::nan("");
  const int requests = a.sequential + a.clients * a.per_client;
  const int exit_status = srv.proc->stop();
  std::printf(
      "# chatterbox-bench serve --soak: model=%s threads=%d max_batch=%d tokens_limit=%d warm-up=%d "
      "sequential + %d concurrent (failed %d); rss_seq_mb=%.1f after the sequential part\n",
      a.model.c_str(), a.threads, a.max_batch, a.tokens, a.warmup, a.warmup > 0 ? a.clients * int(a.formats.size()) : 0,
      warm_failures.load(), rss_seq);
  std::printf(
      "rss_warm_mb=%.1f rss_end_mb=%.1f rss_growth_pct=%.2f rss_peak_mb=%.1f requests=%d failures=%d "
      "server_exit=%d wall_s=%.1f\n",
      rss_warm, end.rss_mb, growth, end.hwm_mb, requests, failures.load() + warm_failures.load(), exit_status,
      std::chrono::duration<double>(Clock::now() - start).count());
  return failures == 0 && warm_failures == 0 && exit_status == 0 ? 0 : 1;
}

int run_serve(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);  // a server that goes away must not kill the client
  return a.soak ? run_soak(a) : run_throughput(a);
}

RegisterBench reg("serve", "a real `chatterbox serve` under concurrent requests (audio s/s, tok/s, TTFA, RSS; --soak)",
                  run_serve);

}  // namespace
}  // namespace cbx::bench
