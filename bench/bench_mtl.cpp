// chatterbox-bench mtl -m MODEL.gguf [--tokens N] [--threads T] [--kv-type f16|f32] [--seed S] [--mb MB]
//                      [--sample-mb MB] [--sample-every N] [--lang L] [--cfg-weight W] [--ab R]
//                      [--cfm-precision auto|f32|bf16|int8]  (the CFM estimator's GEMMs: int8 linears)
// chatterbox-bench mtl --stream ...: streamed against non-streamed (bench/bench_stream.cpp)
//
// The whole Multilingual pipeline with generation forced to N speech tokens (EOS ignored;
// default 200, ~8 s of audio): T3 prefill (34 conditioning tokens + a fixed sentence, CFG batch
// of two rows) with the built-in voice, N - 1 decode steps, then the flow encoder + the 10-step
// CFG CFM (20 estimator passes as 10 batches of two) and HiFT, start trim/fade and tail trim.
// So that S3Gen always runs on N tokens, ids T3 may sample that S3Gen cannot take (>= 6561:
// SOS/EOS and the unused tail of T3's 8194-entry vocabulary) are folded to id mod 6561; the
// pipeline itself drops them (mtl_pipeline.h). One line:
//   t3_prefill_ms   cond encoder + prompt forward + first sample
//   t3_tok_s        decode steps per second (a two-row forward + CFG + sampling)
//   decode_bw_ratio (decode weight bytes + average KV bytes per step, as T3Mtl reports them)
//                   x t3_tok_s / stream_gbps
//   stream_gbps     mean of stream reads sampled between decode steps (before step 0, every
//                   --sample-every steps and after the last; the pipeline's threads, a
//                   --sample-mb MiB huge-page buffer; bench/stream_read.h StreamSampler), so
//                   the reference sees the bandwidth level the decode saw; their time and CPU
//                   are taken out of every figure. stream_lo/hi_gbps: lowest / highest sample
//   stream_after_gbps  a --mb MB huge-page read after the pipeline (the earlier reference);
//                   decode_bw_ratio_4k: against a 4 KB-page read then (stream_4k_gbps)
//   clock_ghz       the core clock at the stream samples (mean; bench/stream_read.h
//                   core_clock_ghz), clock_after_ghz once after the pipeline
//   fma_per_cycle   vector FMAs a cycle one core retired at the samples (core_fma_per_cycle;
//                   ~half when another thread shares the physical core), and once after
//   flow_ms, cfm_ms flow encoder; CFM (cfm_step_ms: mean per estimator batch of two)
//   s3gen_ms        flow_ms + cfm_ms
//   hift_ms         vocoder + trim/fade + tail trim
//   rtf             (prefill + decode + s3gen + hift) / audio seconds ((N - 1) x 40 ms)
//   cpu_s           process CPU time (all threads) from the prefill to the end of HiFT;
//   cpu_t3_s, cpu_s3gen_hift_s   the same split at the end of T3
//   cpu_per_wall    cpu_s / that wall time: ~threads on an idle machine, less when other
//                   processes take the cores (then rtf overstates the pipeline's own cost)
//   cpu_rtf         cpu_s / threads / audio seconds: rtf if the threads had the cores to
//                   themselves and never waited (an estimate for a loaded machine)
//   peak_rss_mb     VmHWM of this process, the stream samples' buffer excluded
//   packed_mb       the decode's q4p weight copies (part of peak_rss_mb)
// --ab R: before the pipeline, R alternating pairs of T3 generations (op-by-op decode, then the
// fused one-run decode; same tokens) and one more line: median decode tok/s and CPU ms per
// decode step of each, and their ratio (measured in the same run, so it holds up on a loaded
// machine better than two separate runs).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_e2e.h"
#include "bench_stream.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/cfm_solver.h"
#include "models/t3_mtl.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/voice.h"
#include "stream_read.h"

namespace cbx::bench {
namespace {

int run_mtl(int argc, char** argv) {
  E2eArgs args;
  args.tokens = 200;
  std::string lang = "en";
  float cfg_weight = -1;
  int ab_rounds = 0;
  GemmPrecision cfm_prec = GemmPrecision::Auto;
  const char* usage =
      "usage: chatterbox-bench mtl -m MODEL.gguf [--tokens N] [--threads T] [--kv-type f16|f32] [--seed S] "
      "[--mb MB] [--sample-mb MB] [--sample-every N] [--lang L] [--cfg-weight W] [--ab R] "
      "[--cfm-precision auto|f32|bf16|int8]  (see bench/bench_mtl.cpp)\n"
      "       chatterbox-bench mtl --stream -m MODEL.gguf [--tokens N (200)] [--lang L] [--reps R] [--first N] "
      "[--chunk N] [--context N] [--prompt N]  (see bench/bench_stream.cpp)";
  StreamBenchArgs sa;
  auto extra = [&](const std::string& a, const std::function<const char*()>& next) {
    if (a == "--lang")
      lang = next();
    else if (a == "--cfg-weight")
      cfg_weight = float(double_arg("bench mtl: " + a, next(), 0, 100));
    else if (a == "--ab")
      ab_rounds = int(int_arg("bench mtl: " + a, next(), 0, 50));
    else if (a == "--cfm-precision")
      cfm_prec = parse_gemm_precision(next(), "bench mtl: --cfm-precision");
    else
      return parse_stream_arg(a, next, sa);
    return true;
  };
  if (!parse_e2e_args(argc, argv, "mtl", usage, args, extra)) return 0;
  if (sa.on) {
    CBX_CHECK(ab_rounds == 0 && cfg_weight < 0, "bench mtl: --ab and --cfg-weight are not taken with --stream");
    check_stream_schedule(sa.sched);
    return run_mtl_stream(args, sa, lang);
  }

  MtlLoadParams lp;
  lp.cfm_precision = cfm_prec;
  lp.n_threads = args.threads;
  lp.kv_type = args.kv == "f16" ? DType::F16 : DType::F32;
  lp.max_new_tokens = args.tokens;
  const double t_load = now_ms();
  MtlPipeline pipe(args.model, lp);
  const double load_ms = now_ms() - t_load;
  const ModelConfig& c = pipe.config();

  const std::vector<std::string> chunks = pipe.split_text(kE2eText, lang, 1000);
  const std::vector<int32_t> text_ids = pipe.tokenize(chunks.at(0), lang);
  const Voice& v = pipe.voice();
  T3MtlCond cond;
  cond.speaker_emb = v.speaker_emb;
  cond.cond_prompt_tokens = v.cond_prompt_tokens;
  cond.exaggeration = c.pipeline.exaggeration;
  T3MtlSampling s = pipe.t3().default_sampling();
  s.seed = args.seed;
  if (cfg_weight >= 0) s.cfg_weight = cfg_weight;

  if (ab_rounds > 0) {
    // [0] op by op, [1] fused: decode tok/s and CPU ms per decode step.
    std::vector<double> tok[2], cpu[2];
    std::vector<int32_t> first[2];
    for (int r = 0; r < ab_rounds; ++r)
      for (int f = 0; f < 2; ++f) {
        pipe.t3().set_fused_decode(f == 1);
        T3MtlStats ab;
        // CPU from the first sample (right after the prefill) to the end of generate.
        double c0 = 0;
        pipe.t3().set_step_callback([&](const T3MtlStep& st) {
          if (st.step == 0) c0 = process_cpu_s();
        });
        std::vector<int32_t> g = pipe.t3().generate(cond, text_ids, s, &ab, nullptr, args.tokens);
        const double c1 = process_cpu_s() - c0;
        pipe.t3().set_step_callback(nullptr);
        if (r == 0) first[f] = g;
        tok[f].push_back(ab.n_decode > 0 ? double(ab.n_decode) / (ab.decode_ms / 1e3) : 0.0);
        cpu[f].push_back(ab.n_decode > 0 ? c1 * 1e3 / double(ab.n_decode) : 0.0);
      }
    pipe.t3().set_fused_decode(true);
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double t0 = median(tok[0]), t1 = median(tok[1]);
    std::printf(
        "bench mtl-ab rounds=%d tokens=%d same_tokens=%d opbyop_tok_s=%.2f fused_tok_s=%.2f speedup=%.3f "
        "opbyop_cpu_ms_step=%.2f fused_cpu_ms_step=%.2f\n",
        ab_rounds, args.tokens, int(first[0] == first[1]), t0, t1, t0 > 0 ? t1 / t0 : 0.0, median(cpu[0]),
        median(cpu[1]));
  }

  // Stream reads between decode steps (in the step callback, inside generate's decode clock:
  // their wall and CPU time are subtracted below).
  const double rss_before_mb = peak_rss_mb();
  StreamSampler streams(pipe.pool(), size_t(args.sample_mb));
  pipe.t3().set_step_callback([&](const T3MtlStep& step) {
    if (step.step % args.sample_every == 0) streams.sample();
  });
  const double cpu0 = process_cpu_s(), wall0 = now_ms();
  T3MtlStats st;
  std::vector<int32_t> gen = pipe.t3().generate(cond, text_ids, s, &st, nullptr, args.tokens);
  pipe.t3().set_step_callback(nullptr);
  streams.sample();
  st.decode_ms -= (streams.elapsed_s() - streams.last_s()) * 1e3;  // the final sample came after
  CBX_CHECK(int64_t(gen.size()) == args.tokens, "bench mtl: T3 returned %zu tokens, %d forced", gen.size(),
            args.tokens);
  const double cpu_t3 = process_cpu_s() - cpu0 - streams.cpu_s();
  const double tok_s = st.n_decode > 0 ? double(st.n_decode) / (st.decode_ms / 1e3) : 0.0;
  int64_t n_folded = 0;
  for (int32_t& t : gen)
    if (t >= c.flow.vocab) t %= c.flow.vocab, ++n_folded;

  SynthTimings tm;
  pipe.reseed_s3gen(args.seed);
  const std::vector<float> audio = pipe.tokens_to_audio(gen, &tm);
  const double audio_s = double(audio.size()) / pipe.sample_rate();
  const double cpu_s = process_cpu_s() - cpu0 - streams.cpu_s(),
               wall_s = (now_ms() - wall0) / 1e3 - streams.elapsed_s();
  const double cpu_rtf = cpu_s / pipe.n_threads() / audio_s;
  const std::vector<double>& steps = pipe.cfm_step_ms();
  double cfm_step_ms = 0;
  for (double x : steps) cfm_step_ms += x / double(steps.empty() ? 1 : steps.size());
  const double s3gen_ms = tm.flow_ms + tm.cfm_ms;
  const double rtf = (st.prefill_ms + st.decode_ms + s3gen_ms + tm.hift_ms) / 1e3 / audio_s;

  const double rss_mb = peak_rss_without(streams, rss_before_mb, peak_rss_mb());  // before the --mb buffers
  const double stream = streams.mean_gbps();
  const double clock_after = core_clock_ghz();
  const double fma_after = core_fma_per_cycle();
  const double stream_after = stream_read_gbps(pipe.pool(), size_t(args.mb), 5);
  const double stream_4k = stream_read_gbps(pipe.pool(), size_t(args.mb), 5, false);
  const double decode_gbps = (st.weight_bytes_per_step + st.kv_bytes_per_step) * tok_s / 1e9;
  std::printf(
      "bench mtl model=%s precision=%s threads=%d kv=%s lang=%s cfg_weight=%g rows=%lld load_ms=%.0f prompt_rows=%lld "
      "tokens=%d folded=%lld audio_s=%.2f t3_prefill_ms=%.1f t3_decode_ms=%.1f t3_tok_s=%.2f "
      "weight_mb_step=%.1f kv_mb_step=%.1f decode_gbps=%.2f stream_gbps=%.2f decode_bw_ratio=%.3f "
      "flow_ms=%.1f cfm_ms=%.1f cfm_step_ms=%.1f s3gen_ms=%.1f hift_ms=%.1f rtf=%.3f cpu_s=%.1f cpu_t3_s=%.1f "
      "cpu_s3gen_hift_s=%.1f cpu_per_wall=%.2f cpu_rtf=%.3f peak_rss_mb=%.0f packed_mb=%.0f "
      "stream_samples=%d stream_lo_gbps=%.2f stream_hi_gbps=%.2f stream_after_gbps=%.2f "
      "stream_4k_gbps=%.2f decode_bw_ratio_4k=%.3f clock_ghz=%.2f clock_after_ghz=%.2f "
      "fma_per_cycle=%.2f fma_after_per_cycle=%.2f\n",
      args.model.c_str(), gemm_precision_name(pipe.cfm_precision()), pipe.n_threads(), args.kv.c_str(), lang.c_str(),
      double(s.cfg_weight), (long long)st.n_rows, load_ms, (long long)st.prompt_len, args.tokens, (long long)n_folded,
      audio_s, st.prefill_ms, st.decode_ms, tok_s, st.weight_bytes_per_step / 1e6, st.kv_bytes_per_step / 1e6,
      decode_gbps, stream, decode_gbps / stream, tm.flow_ms, tm.cfm_ms, cfm_step_ms, s3gen_ms, tm.hift_ms, rtf, cpu_s,
      cpu_t3, cpu_s - cpu_t3, cpu_s / wall_s, cpu_rtf, rss_mb, double(pipe.t3().packed_weight_bytes()) / 1e6,
      streams.count(), streams.min_gbps(), streams.max_gbps(), stream_after, stream_4k, decode_gbps / stream_4k,
      streams.mean_clock_ghz(), clock_after, streams.mean_fma_per_cycle(), fma_after);
  return 0;
}

RegisterBench reg("mtl", "Multilingual end to end, N forced speech tokens: T3 (CFG), S3Gen, HiFT, rtf, peak RSS",
                  run_mtl);

}  // namespace
}  // namespace cbx::bench
