// chatterbox-bench turbo -m MODEL.gguf [--tokens N] [--threads T] [--kv-type f16|f32] [--seed S] [--mb MB]
//                        [--sample-mb MB] [--sample-every N] [--cfm-precision auto|f32|bf16|int8]
//
// The whole Turbo pipeline with generation forced to N speech tokens (EOS ignored; default 250,
// ~10 s of audio): T3 prefill on a fixed sentence with the built-in voice, N - 1 decode steps,
// then the flow encoder + mean-flow CFM and HiFT on the post-processed tokens. One line:
//   t3_prefix_ms    the voice prefix (speaker row + 375 prompt tokens) run once before the
//                   timed request and kept (T3Turbo::warm_prefix), as a server does for its voice
//   t3_prefill_ms   the request's prompt forward (text + BOS after the cached prefix) + first sample
//   t3_tok_s        decode steps per second (forward + sampling)
//   decode_bw_ratio (decode weights + average KV bytes per step) x t3_tok_s / stream_gbps
//   stream_gbps     mean of stream reads sampled between the decode steps (before step 0, every
//                   --sample-every steps and after the last; the pipeline's own threads, a
//                   --sample-mb MiB huge-page buffer; bench/stream_read.h StreamSampler), so
//                   the reference sees the bandwidth level the decode saw; their time is not
//                   in any timing. stream_lo_gbps / stream_hi_gbps: the lowest and highest sample
//   stream_after_gbps the reference earlier figures used: a --mb MB huge-page read after the
//                   pipeline (a different moment: on a host whose bandwidth switches levels
//                   it can differ from stream_gbps by 2x)
//   decode_bw_ratio_4k decode_gbps / stream_4k_gbps, a 4 KB-page read after the pipeline (a
//                   malloc'd buffer under THP madvise), the reference of the first figures
//   s3gen_ms        flow encoder + CFM (2 estimator calls)
//   hift_ms         vocoder + trim/fade
//   rtf             (prefill + decode + s3gen + hift) / audio seconds
//   rtf_cold        the same with t3_prefix_ms added (a request with a voice not seen before)
//   peak_rss_mb     VmHWM of this process, the stream samples' buffer excluded
//   clock_ghz       the core clock at the stream samples (mean; bench/stream_read.h
//                   core_clock_ghz), clock_after_ghz once after the pipeline: a shared host
//                   lends its vCPUs at varying clocks, and the compute stages follow them
//   fma_per_cycle   vector FMAs a cycle one core retired at the stream samples (mean;
//                   core_fma_per_cycle), fma_after_per_cycle once after the pipeline: a
//                   vCPU whose physical core another thread shares keeps its clock but
//                   gets ~half the throughput, and the compute stages take longer
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_e2e.h"
#include "bench_stream.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/sampler.h"
#include "models/t3_turbo.h"
#include "ops/elementwise.h"
#include "pipeline/turbo_pipeline.h"
#include "stream_read.h"

namespace cbx::bench {
namespace {

int run_turbo(int argc, char** argv) {
  E2eArgs args;
  args.tokens = 250;
  StreamBenchArgs sa;
  bool tokens_given = false;
  GemmPrecision cfm_prec = GemmPrecision::Auto;
  auto extra = [&](const std::string& a, const std::function<const char*()>& next) {
    if (a == "--cfm-precision") {
      cfm_prec = parse_gemm_precision(next(), "bench turbo: --cfm-precision");
      return true;
    }
    return parse_stream_arg(a, next, sa);
  };
  for (int i = 1; i < argc; ++i) tokens_given = tokens_given || std::string(argv[i]) == "--tokens";
  if (!parse_e2e_args(argc, argv, "turbo",
                      "usage: chatterbox-bench turbo -m MODEL.gguf [--tokens N] [--threads T] [--kv-type f16|f32] "
                      "[--seed S] [--mb MB] [--sample-mb MB] [--sample-every N] [--cfm-precision auto|f32|bf16|int8]  "
                      "(see bench/bench_turbo.cpp)\n"
                      "       chatterbox-bench turbo --stream -m MODEL.gguf [--tokens N (200)] [--reps R] [--first N] "
                      "[--chunk N] [--context N] [--prompt N]  (see bench/bench_stream.cpp)",
                      args, extra))
    return 0;
  if (sa.on) {
    if (!tokens_given) args.tokens = 200;
    check_stream_schedule(sa.sched);
    return run_turbo_stream(args, sa);
  }
  const std::string& model = args.model;
  const std::string& kv = args.kv;
  const int threads = args.threads, tokens = args.tokens, mb = args.mb;
  const uint64_t seed = args.seed;

  CBX_CHECK(tokens >= 2, "bench turbo: --tokens %d must be >= 2 (the prefill token and one decoded)", tokens);
  TurboLoadParams lp;
  lp.cfm_precision = cfm_prec;
  lp.n_threads = threads;
  lp.kv_type = kv == "f16" ? DType::F16 : DType::F32;
  lp.max_new_tokens = tokens - 1;
  const double t_load = now_ms();
  TurboPipeline pipe(model, lp);
  const double load_ms = now_ms() - t_load;
  T3Turbo& t3 = pipe.t3();
  const T3Config& c = t3.config().t3;

  std::vector<std::string> chunks = pipe.split_text(kE2eText, 1000);
  std::vector<int32_t> text_ids = pipe.tokenize(chunks.at(0));
  const std::vector<float>& spk = pipe.speaker_emb();
  const std::vector<int32_t>& prompt = pipe.cond_prompt_tokens();

  SamplerParams sp = t3.default_sampler();
  sp.seed = seed;
  TurboSampler sampler(c.speech_vocab, sp);
  T3Gpt2& gpt = t3.backbone();
  std::vector<int32_t> history;
  history.reserve(size_t(tokens));

  // The voice prefix (speaker row + prompt tokens) once, as a server does for its voice at
  // start-up; the timed prefill then runs the text + BOS rows (T3Turbo::prefill).
  const double prefix_ms = t3.warm_prefix(spk.data(), int64_t(spk.size()), prompt.data(), int64_t(prompt.size()));

  // The stream reference's buffer, made before the timed work (its pages stay resident).
  const double rss_before_mb = peak_rss_mb();
  StreamSampler streams(pipe.pool(), size_t(args.sample_mb));

  // Prefill + the first token, then decode steps that ignore EOS (as T3Turbo::generate otherwise).
  double t0 = now_ms();
  Tensor embeds = t3.build_prompt(text_ids.data(), int64_t(text_ids.size()), spk.data(), int64_t(spk.size()),
                                  prompt.data(), int64_t(prompt.size()));
  const int64_t n_prompt_rows = embeds.shape[0];
  bool reused = false;
  const Tensor& lg0 =
      t3.prefill(embeds, spk.data(), int64_t(spk.size()), prompt.data(), int64_t(prompt.size()), &reused);
  CBX_CHECK(reused, "bench turbo: the warmed voice prefix was not reused");
  const int32_t bos = c.start_speech_token;
  int32_t tok = sampler.sample(lg0.ptr<float>(), &bos, 1);
  CBX_CHECK(tok >= 0, "bench turbo: prefill logits all -inf");
  const double prefill_ms = now_ms() - t0;
  history.push_back(tok);

  std::vector<float> row(size_t(c.n_embd));
  Tensor row_t = make_tensor(DType::F32, {1, c.n_embd}, row.data(), row.size() * 4);
  int32_t id = 0;
  Tensor id_t = make_tensor(DType::I32, {1}, &id, 4);
  const int steps = tokens - 1;
  double decode_ms = 0;
  for (int s = 0; s < steps; ++s) {
    if (s % args.sample_every == 0) streams.sample();  // outside the decode's clock
    t0 = now_ms();
    id = tok;
    get_rows(t3.weights().speech_emb, id_t, row_t);
    const Tensor& lg = gpt.forward(row_t);
    tok = sampler.sample(lg.ptr<float>(), history.data(), int64_t(history.size()));
    decode_ms += now_ms() - t0;
    CBX_CHECK(tok >= 0, "bench turbo: step %d logits all -inf", s);
    history.push_back(tok);
  }
  streams.sample();
  const double tok_s = steps > 0 ? steps / (decode_ms / 1e3) : 0.0;

  std::vector<int32_t> speech = t3.postprocess(history);
  TurboTimings tm;
  pipe.reseed_s3gen(seed);
  std::vector<float> audio = pipe.tokens_to_audio(speech, &tm);
  const double s3gen_ms = tm.flow_ms + tm.cfm_ms;
  const double audio_s = double(audio.size()) / pipe.sample_rate();
  const double rtf = (prefill_ms + decode_ms + s3gen_ms + tm.hift_ms) / 1e3 / audio_s;
  const double rtf_cold = rtf + prefix_ms / 1e3 / audio_s;

  // Peak RSS without the samples' buffer; the after-pipeline reads' buffers come after it.
  const double rss_mb = peak_rss_without(streams, rss_before_mb, peak_rss_mb());
  const double stream = streams.mean_gbps();
  const double clock_after = core_clock_ghz();
  const double fma_after = core_fma_per_cycle();
  const double stream_after = stream_read_gbps(pipe.pool(), size_t(mb), 5);
  const double stream_4k = stream_read_gbps(pipe.pool(), size_t(mb), 5, false);
  const double wbytes = double(t3_gpt2_decode_weight_bytes(c, t3.weights()));
  const double es = lp.kv_type == DType::F16 ? 2.0 : 4.0;
  const double avg_keys = double(n_prompt_rows) + 1.0 + std::max(0, steps - 1) / 2.0;
  const double kvbytes = 2.0 * c.n_layer * double(c.n_head) * c.head_dim * es * avg_keys;
  const double decode_gbps = (wbytes + kvbytes) * tok_s / 1e9;
  std::printf(
      "bench turbo model=%s precision=%s threads=%d kv=%s load_ms=%.0f prompt_rows=%lld tokens=%d s3gen_tokens=%zu "
      "audio_s=%.2f t3_prefill_ms=%.1f t3_tok_s=%.2f decode_gbps=%.2f stream_gbps=%.2f "
      "decode_bw_ratio=%.3f flow_ms=%.1f cfm_ms=%.1f s3gen_ms=%.1f hift_ms=%.1f rtf=%.3f peak_rss_mb=%.0f "
      "stream_samples=%d stream_lo_gbps=%.2f stream_hi_gbps=%.2f stream_after_gbps=%.2f stream_4k_gbps=%.2f "
      "decode_bw_ratio_4k=%.3f t3_prefix_ms=%.1f rtf_cold=%.3f clock_ghz=%.2f clock_after_ghz=%.2f "
      "fma_per_cycle=%.2f fma_after_per_cycle=%.2f\n",
      model.c_str(), gemm_precision_name(pipe.cfm_precision()), pipe.n_threads(), kv.c_str(), load_ms,
      (long long)n_prompt_rows, tokens, speech.size(), audio_s, prefill_ms, tok_s, decode_gbps, stream,
      decode_gbps / stream, tm.flow_ms, tm.cfm_ms, s3gen_ms, tm.hift_ms, rtf, rss_mb, streams.count(),
      streams.min_gbps(), streams.max_gbps(), stream_after, stream_4k, decode_gbps / stream_4k, prefix_ms, rtf_cold,
      streams.mean_clock_ghz(), clock_after, streams.mean_fma_per_cycle(), fma_after);
  return 0;
}

RegisterBench reg("turbo", "Turbo end to end, N forced speech tokens: T3, S3Gen, HiFT, rtf, peak RSS", run_turbo);

}  // namespace
}  // namespace cbx::bench
