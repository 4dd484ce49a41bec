// chatterbox-bench t3 -m MODEL.gguf [--threads N] [--steps S] [--prompt P] [--text L]
//                     [--kv-type f16|f32] [--mb MB] [--seed N] [--ab] [--no-pack]
//                     [--row-prefill N]
//
// T3 Turbo on random inputs: a prefill of 1 + P prompt speech tokens (default 375, the
// 15 s voice prompt) + L text tokens (default 30) + BOS, then S decode steps (default 200)
// with the default sampler; EOS does not stop the run, so every step is timed.
// Prints on one line:
//   t3_prefill_ms   the prefill forward (P + L + 2 rows)
//   t3_tok_s        decode steps per second (forward + sampling)
//   weight_mb_per_tok  weights one decode step reads (layer matrices, norms, speech head)
//   kv_mb_per_tok   KV cache read per step, averaged over the run
//   decode_gbps     (weights + KV) bytes per token x t3_tok_s
//   stream_gbps     mean read bandwidth of a --mb MiB huge-page buffer (default 256) with the
//                   same threads, sampled before step 0, every 20 steps and after the last
//                   (bench/stream_read.h StreamSampler; outside the decode's clock), so it
//                   sees the bandwidth level the decode saw
//   decode_bw_ratio decode_gbps / stream_gbps
//   cpu_ms_per_tok  process CPU time per decode step (all threads; with --threads 1 a
//                   figure that machine load disturbs much less than t3_tok_s)
//   packed_mb       re-laid-out weight copies the fused decode holds (--no-pack: none)
//   clock_ghz       the core clock at the stream samples (mean; bench/stream_read.h core_clock_ghz)
//   fma_per_cycle   vector FMAs a cycle one core retired there (mean; core_fma_per_cycle)
// --row-prefill N: T3TurboOptions::row_prefill_max (default -1: automatic; 0 = the prefill always on
// the GEMM). With --prompt 0 --text L (L + 2 rows) it times the path a cached voice prefix
// leaves for the text.
// --ab: steps alternate between the fused one-run decode and the op-by-op path (same
// logits), and the line adds fused_tok_s, opbyop_tok_s and fused_speedup (their ratio),
// measured step by step in the same run, so machine load hits both alike.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/sampler.h"
#include "models/t3_turbo.h"
#include "ops/elementwise.h"
#include "stream_read.h"

namespace cbx::bench {
namespace {

double cpu_s() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int run_t3(int argc, char** argv) {
  std::string model, kv = "f16";
  int threads = 2, steps = 200, prompt = 375, text = 30, mb = 256;
  uint64_t seed = 1;
  bool ab = false, pack_planar = true;
  int row_prefill = -1;
  const char* const usage =
      "usage: chatterbox-bench t3 -m MODEL.gguf [--threads N (2)] [--steps S] [--prompt P] [--text N] [--kv-type "
      "f16|f32]\n"
      "                           [--mb MB] [--seed S] [--ab] [--no-pack] [--row-prefill N]\n"
      "  T3 Turbo prefill ms and decode tokens/s vs stream read bandwidth  (see bench/bench_t3.cpp)\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench t3: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--threads")
      threads = int(int_arg("bench t3: " + a, next(), 1, 1024));
    else if (a == "--steps")
      steps = int(int_arg("bench t3: " + a, next(), 1, 100000));
    else if (a == "--prompt")
      prompt = int(int_arg("bench t3: " + a, next(), 0, 100000));
    else if (a == "--text")
      text = int(int_arg("bench t3: " + a, next(), 0, 100000));
    else if (a == "--kv-type")
      kv = next();
    else if (a == "--mb")
      mb = int(int_arg("bench t3: " + a, next(), 1, 65536));
    else if (a == "--seed")
      seed = u64_arg("bench t3: " + a, next());
    else if (a == "--ab")
      ab = true;
    else if (a == "--no-pack")
      pack_planar = false;
    else if (a == "--row-prefill")
      row_prefill = int(int_arg("bench t3: " + a, next(), -1, 100000));
    else if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else
      fail("bench t3: unknown option '%s' (see bench/bench_t3.cpp)", a.c_str());
  }
  CBX_CHECK(!model.empty(), "bench t3: -m MODEL.gguf is required\n%s", usage);

  auto f = GgufFile::open(model);
  ThreadPool pool(threads);
  T3TurboOptions o;
  o.max_text = std::max(text, 1);
  o.max_prompt = std::max(prompt, 1);
  o.max_new = steps;
  o.kv_type = dtype_from_name(kv.c_str());
  o.pack_planar = pack_planar;
  o.row_prefill_max = row_prefill;
  T3Turbo t3(*f, pool, o);
  const T3Config& c = t3.config().t3;

  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> text_ids(static_cast<size_t>(text)), prompt_ids(static_cast<size_t>(prompt));
  for (int32_t& v : text_ids) v = int32_t(rng() % uint32_t(c.text_vocab));
  for (int32_t& v : prompt_ids) v = int32_t(rng() % uint32_t(c.start_speech_token));
  std::vector<float> spk(size_t(c.speaker_embed_size));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : spk) v = nd(rng);

  StreamSampler streams(pool, size_t(mb));

  SamplerParams sp = t3.default_sampler();
  sp.seed = seed;
  TurboSampler sampler(c.speech_vocab, sp);
  T3Gpt2& gpt = t3.backbone();
  std::vector<int32_t> history;
  history.reserve(size_t(steps) + 1);

  double t0 = now_s();
  Tensor embeds = t3.build_prompt(text_ids.data(), text, spk.data(), int64_t(spk.size()), prompt_ids.data(), prompt);
  const int64_t n_prompt_rows = embeds.shape[0];
  gpt.reset();
  const Tensor& lg0 = gpt.forward(embeds);
  const int32_t bos = c.start_speech_token;
  int32_t tok = sampler.sample(lg0.ptr<float>(), &bos, 1);
  const double prefill_ms = (now_s() - t0) * 1e3;
  CBX_CHECK(tok >= 0, "bench t3: prefill logits all -inf");
  history.push_back(tok);

  // Decode: the speech-embedding row, the forward and the sampler, as in T3Turbo::generate.
  std::vector<float> row(size_t(c.n_embd));
  Tensor row_t = make_tensor(DType::F32, {1, c.n_embd}, row.data(), row.size() * 4);
  int32_t id = 0;
  Tensor id_t = make_tensor(DType::I32, {1}, &id, 4);
  const Tensor& emb = t3.weights().speech_emb;
  const double c0 = cpu_s();
  double mode_s[2] = {0, 0};
  int mode_n[2] = {0, 0};
  double decode_s = 0;
  for (int s = 0; s < steps; ++s) {
    if (s % 20 == 0) streams.sample();  // outside the decode's clocks
    const double ts = now_s();
    const int mode = ab ? s % 2 : 0;  // 0 fused, 1 op by op
    gpt.set_fused_decode(mode == 0);
    id = tok;
    get_rows(emb, id_t, row_t);
    const Tensor& lg = gpt.forward(row_t);
    tok = sampler.sample(lg.ptr<float>(), history.data(), int64_t(history.size()));
    CBX_CHECK(tok >= 0, "bench t3: step %d logits all -inf", s);
    history.push_back(tok);
    mode_s[mode] += now_s() - ts;
    decode_s += now_s() - ts;
    ++mode_n[mode];
  }
  streams.sample();
  gpt.set_fused_decode(true);
  const double stream = streams.mean_gbps();
  const double cpu_ms = (cpu_s() - c0 - streams.cpu_s()) * 1e3 / steps;
  const double tok_s = steps / decode_s;

  const double wbytes = double(t3_gpt2_decode_weight_bytes(c, t3.weights()));
  const double es = o.kv_type == DType::F16 ? 2.0 : 4.0;
  // Step s attends over n_prompt_rows + 1 + s keys: K and V of every layer.
  const double avg_keys = double(n_prompt_rows) + 1.0 + (steps - 1) / 2.0;
  const double kvbytes = 2.0 * c.n_layer * double(c.n_head) * c.head_dim * es * avg_keys;
  const double decode_gbps = (wbytes + kvbytes) * tok_s / 1e9;
  std::printf(
      "bench t3 model=%s threads=%d kv=%s prompt_rows=%lld steps=%d t3_prefill_ms=%.1f t3_tok_s=%.2f "
      "weight_mb_per_tok=%.1f kv_mb_per_tok=%.1f decode_gbps=%.2f stream_gbps=%.2f decode_bw_ratio=%.3f "
      "cpu_ms_per_tok=%.2f packed_mb=%.1f clock_ghz=%.2f fma_per_cycle=%.2f\n",
      model.c_str(), threads, kv.c_str(), (long long)n_prompt_rows, steps, prefill_ms, tok_s, wbytes / 1e6,
      kvbytes / 1e6, decode_gbps, stream, decode_gbps / stream, cpu_ms, double(gpt.packed_weight_bytes()) / 1e6,
      streams.mean_clock_ghz(), streams.mean_fma_per_cycle());
  if (ab && mode_n[0] > 0 && mode_n[1] > 0) {
    const double f = mode_n[0] / mode_s[0], u = mode_n[1] / mode_s[1];
    std::printf("bench t3 ab fused_tok_s=%.2f opbyop_tok_s=%.2f fused_speedup=%.3f\n", f, u, f / u);
  }
  return 0;
}

RegisterBench reg("t3", "T3 Turbo prefill ms and decode tokens/s vs stream read bandwidth", run_t3);

}  // namespace
}  // namespace cbx::bench
