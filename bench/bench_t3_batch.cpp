// chatterbox-bench t3-batch -m MODEL.gguf [--mtl] [--threads N] [--steps S] [--prompt P] [--text L]
//                           [--batch 1,2,4,8] [--rounds R] [--seed N]
//
// The batched T3 Turbo decode (models/t3_batch.h), or with --mtl the Multilingual one
// (models/t3_mtl_batch.h: each request a CFG pair of rows, EOS ignored; --prompt at most the
// model's cond_prompt_len, default 150 there): for each batch size N, N rows of the same
// voice (1 + P random prompt tokens, default 375; L random text tokens, default 30) and
// different seeds join, then up to S steps (default 100) advance them together. Prefills are
// not timed. Rounds alternate the order of the batch sizes (R rounds, default 3: forward,
// backward, ...) so that machine load drifts hit every size alike. Prints one line per size:
//   t3_tok_s_total  speech tokens per second summed over the rows (median over the rounds)
//   t3_tok_s_row    the same per row
//   speedup         t3_tok_s_total / the N = 1 median (when 1 is among the sizes)
//   runs            every round's t3_tok_s_total
//   speedups        every round's t3_tok_s_total / the same round's N = 1 run (measured
//                   seconds apart: the one-row decode is bound by memory bandwidth, which on a
//                   shared host moves within minutes, while N rows are bound more by compute)
//   stream_gbps     stream reads of a --sample-mb MiB huge-page buffer (default 256) before
//                   every timed run (bench/stream_read.h StreamSampler): mean, lowest, highest
//   run_stream_gbps the sample taken just before each of this size's runs
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "models/t3_batch.h"
#include "models/t3_mtl.h"
#include "models/t3_mtl_batch.h"
#include "models/t3_turbo.h"
#include "stream_read.h"

namespace cbx::bench {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run_t3_batch(int argc, char** argv) {
  std::string model, sizes = "1,2,4,8";
  int threads = 2, steps = 100, prompt = -1, text = 30, rounds = 3, sample_mb = 256;
  uint64_t seed = 1;
  bool mtl = false;
  const char* const usage =
      "usage: chatterbox-bench t3-batch -m MODEL.gguf [--batch 1,2,4,8] [--rounds R (3)] [--steps S (100)]\n"
      "                                 [--prompt P (the voice's)] [--text N (30)] [--threads T (2)] [--seed S] "
      "[--mtl]\n"
      "                                 [--sample-mb MB (256)]\n"
      "  tokens/s summed over N requests decoding as rows of one batch, and the ratio to one row\n"
      "  (--mtl: Multilingual CFG pairs)  (see bench/bench_t3_batch.cpp)\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench t3-batch: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--threads")
      threads = int(int_arg("bench t3-batch: " + a, next(), 1, 1024));
    else if (a == "--steps")
      steps = int(int_arg("bench t3-batch: " + a, next(), 1, 100000));
    else if (a == "--prompt")
      prompt = int(int_arg("bench t3-batch: " + a, next(), 0, 100000));
    else if (a == "--text")
      text = int(int_arg("bench t3-batch: " + a, next(), 0, 100000));
    else if (a == "--batch")
      sizes = next();
    else if (a == "--rounds")
      rounds = int(int_arg("bench t3-batch: " + a, next(), 1, 1000));
    else if (a == "--seed")
      seed = u64_arg("bench t3-batch: " + a, next());
    else if (a == "--mtl")
      mtl = true;
    else if (a == "--sample-mb")
      sample_mb = int(int_arg("bench t3-batch: " + a, next(), 1, 65536));
    else if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else
      fail("bench t3-batch: unknown option '%s' (see bench/bench_t3_batch.cpp)", a.c_str());
  }
  CBX_CHECK(!model.empty(), "bench t3-batch: -m MODEL.gguf is required\n%s", usage);
  std::vector<int> ns;
  std::stringstream ss(sizes);
  for (std::string t; std::getline(ss, t, ',');)
    ns.push_back(int(int_arg("bench t3-batch: --batch", t.c_str(), 1, 64)));
  int max_n = 0;
  for (int n : ns) max_n = std::max(max_n, n);
  if (prompt < 0) prompt = mtl ? 150 : 375;
  CBX_CHECK(!ns.empty(), "bench t3-batch: --batch lists no batch size");

  auto f = GgufFile::open(model);
  ThreadPool pool(threads);
  // One of the two: a Turbo T3 and its batch, or a Multilingual one and its batch.
  std::unique_ptr<T3Turbo> t3;
  std::unique_ptr<T3Batch> batch;
  ModelConfig mc;
  std::unique_ptr<T3Mtl> t3m;
  std::unique_ptr<T3MtlBatch> mbatch;
  if (mtl) {
    mc = read_config(*f);
    T3MtlLoadParams lp;
    lp.max_new_tokens = steps + 1;  // the prefill's token, then one a step
    lp.max_text_tokens = std::max(text, 1);
    t3m = std::make_unique<T3Mtl>(*f, mc, pool, lp);
    mbatch = std::make_unique<T3MtlBatch>(*t3m, pool, max_n);
  } else {
    T3TurboOptions o;
    o.max_text = std::max(text, 1);
    o.max_prompt = std::max(prompt, 1);
    o.max_new = steps;
    t3 = std::make_unique<T3Turbo>(*f, pool, o);
    batch = std::make_unique<T3Batch>(*t3, pool, max_n);
  }
  const T3Config& c = mtl ? mc.t3 : t3->config().t3;

  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> text_ids(static_cast<size_t>(text)), prompt_ids(static_cast<size_t>(prompt));
  for (int32_t& v : text_ids) v = int32_t(rng() % uint32_t(c.text_vocab));
  for (int32_t& v : prompt_ids) v = int32_t(rng() % uint32_t(c.start_speech_token));
  std::vector<float> spk(size_t(c.speaker_embed_size));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : spk) v = nd(rng);

  StreamSampler streams(pool, size_t(sample_mb));
  std::vector<std::vector<double>> runs(ns.size()), gbps(ns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < ns.size(); ++k) {
      const size_t which = r % 2 ? ns.size() - 1 - k : k;
      const int n = ns[which];
      for (int b = 0; b < n; ++b) {
        if (mtl) {
          T3MtlCond cond;
          cond.speaker_emb = spk;
          cond.cond_prompt_tokens = prompt_ids;
          T3MtlSampling sm = t3m->default_sampling();
          sm.seed = seed + uint64_t(r * 64 + b);
          mbatch->start(cond, text_ids, sm, steps + 1, /*ignore_eos=*/true);
          continue;
        }
        SamplerParams sp = t3->default_sampler();
        sp.seed = seed + uint64_t(r * 64 + b);
        batch->start(text_ids.data(), text, spk.data(), int64_t(spk.size()), prompt_ids.data(), prompt, sp, steps);
      }
      streams.sample();  // outside the timed steps
      int64_t tokens = 0;
      const double t0 = now_s();
      for (int s = 0; s < steps; ++s) {
        const int adv = mtl ? mbatch->step() : batch->step();
        if (adv == 0) break;
        tokens += adv;
      }
      const double dt = now_s() - t0;
      for (int b = 0; b < max_n; ++b) {
        if (mtl && mbatch->active(b)) mbatch->release(b);
        if (!mtl && batch->active(b)) batch->release(b);
      }
      runs[which].push_back(double(tokens) / dt);
      gbps[which].push_back(streams.last_gbps());
    }
  double base = 0;
  int one = -1;  // index of N = 1 in ns
  for (size_t k = 0; k < ns.size(); ++k)
    if (ns[k] == 1) base = median(runs[k]), one = int(k);
  auto join = [](const std::vector<double>& v, int prec) {
    std::string all;
    char buf[32];
    for (double x : v) {
      std::snprintf(buf, sizeof buf, "%.*f", prec, x);
      if (!all.empty()) all += ',';
      all += buf;
    }
    return all;
  };
  for (size_t k = 0; k < ns.size(); ++k) {
    const double m = median(runs[k]);
    std::vector<double> per_round;
    if (one >= 0)
      for (size_t r = 0; r < runs[k].size(); ++r) per_round.push_back(runs[k][r] / runs[size_t(one)][r]);
    std::printf(
        "bench t3-batch%s model=%s threads=%d prompt=%d text=%d steps=%d batch=%d t3_tok_s_total=%.2f "
        "t3_tok_s_row=%.2f speedup=%.2f runs=%s speedups=%s stream_gbps=%.1f stream_lo_gbps=%.1f "
        "stream_hi_gbps=%.1f run_stream_gbps=%s\n",
        mtl ? " mtl" : "", model.c_str(), threads, prompt, text, steps, ns[k], m, m / ns[k], base > 0 ? m / base : 0.0,
        join(runs[k], 1).c_str(), one >= 0 ? join(per_round, 2).c_str() : "-", streams.mean_gbps(), streams.min_gbps(),
        streams.max_gbps(), join(gbps[k], 1).c_str());
  }
  return 0;
}

RegisterBench reg("t3-batch",
                  "batched T3 decode (Turbo; --mtl: Multilingual CFG pairs): tokens/s summed over N requests",
                  run_t3_batch);

}  // namespace
}  // namespace cbx::bench
