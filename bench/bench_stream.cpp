// chatterbox-bench turbo --stream -m MODEL.gguf [--tokens N] [--threads T] [--seed S] [--reps R]
//                       [--first N] [--chunk N] [--context N] [--prompt N]
// chatterbox-bench mtl --stream -m MODEL.gguf [--lang L] (the same options)
//
// Streaming against non-streamed synthesis in the same run (docs/streaming.md), under the
// variant's bench conditions: the built-in voice (Turbo: its T3 prefix warmed; Multilingual
// keeps no prefix, its prefill runs the whole conditioning with CFG), generation forced to N
// speech tokens (EOS ignored; default 200), the same seed (so the same tokens) for both.
// Multilingual folds ids >= 6561 to id mod 6561 as `bench mtl` does, so S3Gen gets N tokens,
// and both its requests end with the tail trim. Each of R repetitions (default 3) times one
// non-streamed request (prefill, decode, S3Gen, HiFT) and one streamed request (S3Gen runs
// between decode steps on the schedule). One line:
//   ttfa_ms        call -> first streamed audio, median (ttfa_all: every repetition)
//   ttfa_prefill_ms / ttfa_decode_ms / ttfa_flow_ms / ttfa_cfm_ms / ttfa_hift_ms
//                  where the first audio's time went (median repetition)
//   rtf, rtf_nonstream  wall time / audio seconds, medians; rtf_ratio = rtf / rtf_nonstream
//   runs, cfm_frames, cfm_frames_nonstream  S3Gen runs and CFM frames of a streamed request
//   dist_join / dist_else  log-mel relative L2 of the streamed audio against the non-streamed
//                  (same tokens and noise) within 2 frames of a join / elsewhere
//   dist_all_*     the same with the whole context kept (--context 0 --prompt 0)
//   dist_alt_*     the same for the alternative schedule first 20, chunk 75
#include "bench_stream.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_e2e.h"
#include "core/error.h"
#include "models/sampler.h"
#include "models/t3_mtl.h"
#include "models/t3_turbo.h"
#include "ops/elementwise.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/stream_synth.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace cbx::bench {
namespace {

struct Decoded {
  std::vector<int32_t> history;
  double prefill_ms = 0;
};

// What the shared bench needs of a pipeline.
struct StreamTarget {
  const char* name;  // "turbo-stream"
  int n_threads = 0, sample_rate = 0;
  S3GenStream* stream = nullptr;
  const Voice* voice = nullptr;
  int64_t token_mel_ratio = 2;
  // Prefill + forced decode with the seed; each token goes to run (when given) as it comes.
  std::function<Decoded(StreamRun* run)> decode;
  std::function<std::vector<int32_t>(const Decoded&)> speech;               // the tokens S3Gen takes
  std::function<void()> reseed;                                             // the S3Gen generators
  std::function<std::vector<float>(const std::vector<int32_t>&)> to_audio;  // non-streamed S3Gen + HiFT
  std::function<int64_t(const std::vector<int32_t>&)> keep_samples;         // finish's cap (-1: none)
  std::function<std::vector<float>(const std::vector<int32_t>&, const StreamSchedule&, const StreamSink&)>
      stream_audio;  // the tokens streamed one at a time (pipeline's tokens_to_audio_stream)
};

// Prefill + tokens - 1 decode steps ignoring EOS (as the turbo bench); after each token, when
// stream is given, the token goes to it (S3Gen runs when due).
Decoded decode_turbo(TurboPipeline& pipe, const std::vector<int32_t>& text_ids, uint64_t seed, int tokens,
                     StreamRun* stream) {
  T3Turbo& t3 = pipe.t3();
  const T3Config& c = t3.config().t3;
  const std::vector<float>& spk = pipe.speaker_emb();
  const std::vector<int32_t>& prompt = pipe.cond_prompt_tokens();
  SamplerParams sp = t3.default_sampler();
  sp.seed = seed;
  TurboSampler sampler(c.speech_vocab, sp);
  Decoded d;
  const double t0 = now_ms();
  Tensor embeds = t3.build_prompt(text_ids.data(), int64_t(text_ids.size()), spk.data(), int64_t(spk.size()),
                                  prompt.data(), int64_t(prompt.size()));
  const Tensor& lg0 = t3.prefill(embeds, spk.data(), int64_t(spk.size()), prompt.data(), int64_t(prompt.size()));
  const int32_t bos = c.start_speech_token;
  int32_t tok = sampler.sample(lg0.ptr<float>(), &bos, 1);
  CBX_CHECK(tok >= 0, "bench turbo --stream: prefill logits all -inf");
  d.prefill_ms = now_ms() - t0;
  d.history.push_back(tok);
  auto feed = [&](int32_t t) {
    if (stream) stream->on_token(t, t >= 0 && t < c.start_speech_token);
  };
  feed(tok);
  std::vector<float> row(size_t(c.n_embd));
  Tensor row_t = make_tensor(DType::F32, {1, c.n_embd}, row.data(), row.size() * 4);
  int32_t id = 0;
  Tensor id_t = make_tensor(DType::I32, {1}, &id, 4);
  for (int s = 0; s + 1 < tokens; ++s) {
    id = tok;
    get_rows(t3.weights().speech_emb, id_t, row_t);
    const Tensor& lg = t3.backbone().forward(row_t);
    tok = sampler.sample(lg.ptr<float>(), d.history.data(), int64_t(d.history.size()));
    CBX_CHECK(tok >= 0, "bench turbo --stream: step %d logits all -inf", s);
    d.history.push_back(tok);
    feed(tok);
  }
  return d;
}

std::vector<int64_t> joins_of(const std::vector<int64_t>& pieces) {
  std::vector<int64_t> j;
  int64_t at = 0;
  for (size_t i = 0; i + 1 < pieces.size(); ++i) j.push_back(at += pieces[i]);
  return j;
}

// Streamed against non-streamed on target t (the header comment), one line.
// The given schedule fields over the variant's defaults.
StreamBenchArgs with_variant_defaults(const StreamBenchArgs& sa, Variant v) {
  StreamBenchArgs r = sa;
  r.sched = default_stream_schedule(v);
  if (sa.given & 1) r.sched.first_tokens = sa.sched.first_tokens;
  if (sa.given & 2) r.sched.chunk_tokens = sa.sched.chunk_tokens;
  if (sa.given & 4) r.sched.context_tokens = sa.sched.context_tokens;
  if (sa.given & 8) r.sched.prompt_tokens = sa.sched.prompt_tokens;
  return r;
}

int run_stream_bench(const StreamTarget& t, const E2eArgs& args, const StreamBenchArgs& sa) {
  std::vector<double> ttfa, rtf_s, rtf_ns, b_prefill, b_decode, b_flow, b_cfm, b_hift;
  std::vector<float> ref, got;
  std::vector<int32_t> speech;
  std::vector<int64_t> pieces;
  int64_t runs = 0, cfm_frames = 0;
  double audio_s = 0;
  for (int rep = 0; rep < sa.reps; ++rep) {
    // Non-streamed.
    double t0 = now_ms();
    Decoded d = t.decode(nullptr);
    speech = t.speech(d);
    t.reseed();
    ref = t.to_audio(speech);
    audio_s = double(ref.size()) / t.sample_rate;
    rtf_ns.push_back((now_ms() - t0) / 1e3 / audio_s);

    // Streamed.
    SynthTimings tm;
    double first = -1, first_flow = 0, first_cfm = 0, first_hift = 0;
    got.clear();
    pieces.clear();
    const SynthAudioFn on_audio = [&](const float*, int64_t n, int64_t, int64_t) {
      if (first < 0) {
        first = now_ms() - t0;
        first_flow = tm.flow_ms;
        first_cfm = tm.cfm_ms;
        first_hift = tm.hift_ms;
      }
      pieces.push_back(n);
      return true;
    };
    t0 = now_ms();
    t.reseed();
    {
      StreamRun run(t.stream, *t.voice, sa.sched, &tm, got, on_audio, 0, 1);
      Decoded ds = t.decode(&run);
      CBX_CHECK(ds.history == d.history, "bench %s: the two requests sampled different tokens", t.name);
      run.finish(speech, t.keep_samples(speech));
      rtf_s.push_back((now_ms() - t0) / 1e3 / audio_s);
      CBX_CHECK(got.size() == ref.size(), "bench %s: %zu streamed samples, %zu non-streamed", t.name, got.size(),
                ref.size());
      ttfa.push_back(first);
      b_prefill.push_back(ds.prefill_ms);
      b_decode.push_back(first - ds.prefill_ms - first_flow - first_cfm - first_hift);
      b_flow.push_back(first_flow);
      b_cfm.push_back(first_cfm);
      b_hift.push_back(first_hift);
    }
    runs = t.stream->runs();
    cfm_frames = t.stream->cfm_frames();
  }
  const int64_t cfm_ns = t.token_mel_ratio * int64_t(t.voice->prompt_token.size() + speech.size());

  const StreamDistance dd = stream_logmel_distance(ref.data(), got.data(), int64_t(ref.size()), joins_of(pieces));
  auto distance_for = [&](const StreamSchedule& s) {
    std::vector<int64_t> p;
    t.reseed();
    std::vector<float> a = t.stream_audio(speech, s, [&](const float*, int64_t n) { p.push_back(n); });
    return stream_logmel_distance(ref.data(), a.data(), int64_t(ref.size()), joins_of(p));
  };
  StreamSchedule all = sa.sched;
  all.context_tokens = 0;
  all.prompt_tokens = 0;
  const StreamDistance da = distance_for(all);
  StreamSchedule alt = sa.sched;
  alt.first_tokens = 20;
  alt.chunk_tokens = 75;
  const StreamDistance dl = distance_for(alt);

  std::string all_ttfa;
  for (double v : ttfa) {
    if (!all_ttfa.empty()) all_ttfa += ',';
    all_ttfa += std::to_string(int64_t(v + 0.5));
  }
  const size_t mid = size_t(std::distance(ttfa.begin(), std::find(ttfa.begin(), ttfa.end(), median(ttfa))));
  const size_t m = mid < ttfa.size() ? mid : 0;  // the median repetition's breakdown (odd reps)
  std::printf(
      "bench %s model=%s threads=%d reps=%d first=%lld chunk=%lld context=%lld prompt=%lld "
      "tokens=%d audio_s=%.2f ttfa_ms=%.0f ttfa_all=%s ttfa_prefill_ms=%.0f ttfa_decode_ms=%.0f "
      "ttfa_flow_ms=%.0f ttfa_cfm_ms=%.0f ttfa_hift_ms=%.0f rtf=%.3f rtf_nonstream=%.3f rtf_ratio=%.3f "
      "runs=%lld pieces=%zu cfm_frames=%lld cfm_frames_nonstream=%lld dist_join=%.4f dist_else=%.4f "
      "dist_all_join=%.4f dist_all_else=%.4f dist_alt_join=%.4f dist_alt_else=%.4f\n",
      t.name, args.model.c_str(), t.n_threads, sa.reps, (long long)sa.sched.first_tokens,
      (long long)sa.sched.chunk_tokens, (long long)sa.sched.context_tokens, (long long)sa.sched.prompt_tokens,
      args.tokens, audio_s, median(ttfa), all_ttfa.c_str(), b_prefill[m], b_decode[m], b_flow[m], b_cfm[m], b_hift[m],
      median(rtf_s), median(rtf_ns), median(rtf_s) / median(rtf_ns), (long long)runs, pieces.size(),
      (long long)cfm_frames, (long long)cfm_ns, dd.near_joins, dd.elsewhere, da.near_joins, da.elsewhere, dl.near_joins,
      dl.elsewhere);
  return 0;
}

}  // namespace

bool parse_stream_arg(const std::string& a, const std::function<const char*()>& next, StreamBenchArgs& sa) {
  auto num = [&]() { return int_arg(a, next(), 0, 1000000); };
  if (a == "--stream")
    sa.on = true;
  else if (a == "--reps")
    sa.reps = int(int_arg(a, next(), 1, 100));
  else if (a == "--first")
    sa.sched.first_tokens = num(), sa.given |= 1;
  else if (a == "--chunk")
    sa.sched.chunk_tokens = num(), sa.given |= 2;
  else if (a == "--context")
    sa.sched.context_tokens = num(), sa.given |= 4;
  else if (a == "--prompt")
    sa.sched.prompt_tokens = num(), sa.given |= 8;
  else
    return false;
  return true;
}

int run_turbo_stream(const E2eArgs& args, const StreamBenchArgs& sa) {
  TurboLoadParams lp;
  lp.n_threads = args.threads;
  lp.kv_type = args.kv == "f16" ? DType::F16 : DType::F32;
  lp.max_new_tokens = args.tokens - 1;
  TurboPipeline pipe(args.model, lp);
  const std::vector<int32_t> text_ids = pipe.tokenize(pipe.split_text(kE2eText, 1000).at(0));
  pipe.prepare_voice();
  StreamTarget t;
  t.name = "turbo-stream";
  t.n_threads = pipe.n_threads();
  t.sample_rate = pipe.sample_rate();
  t.stream = &pipe.s3gen_stream();
  t.voice = &pipe.voice();
  t.token_mel_ratio = pipe.config().flow.token_mel_ratio;
  t.decode = [&](StreamRun* run) { return decode_turbo(pipe, text_ids, args.seed, args.tokens, run); };
  t.speech = [&](const Decoded& d) { return pipe.t3().postprocess(d.history); };
  t.reseed = [&]() { pipe.reseed_s3gen(args.seed); };
  t.to_audio = [&](const std::vector<int32_t>& s) { return pipe.tokens_to_audio(s); };
  t.keep_samples = [](const std::vector<int32_t>&) { return int64_t(-1); };
  t.stream_audio = [&](const std::vector<int32_t>& s, const StreamSchedule& sc, const StreamSink& sink) {
    return pipe.tokens_to_audio_stream(s, sc, nullptr, sink);
  };
  return run_stream_bench(t, args, with_variant_defaults(sa, Variant::Turbo));
}

int run_mtl_stream(const E2eArgs& args, const StreamBenchArgs& sa, const std::string& lang) {
  CBX_CHECK(args.tokens >= 2, "bench mtl --stream: --tokens %d must be >= 2", args.tokens);
  MtlLoadParams lp;
  lp.n_threads = args.threads;
  lp.kv_type = args.kv == "f16" ? DType::F16 : DType::F32;
  lp.max_new_tokens = args.tokens;
  MtlPipeline pipe(args.model, lp);
  const ModelConfig& c = pipe.config();
  const std::vector<int32_t> text_ids = pipe.tokenize(pipe.split_text(kE2eText, lang, 1000).at(0), lang);
  const Voice& v = pipe.voice();
  T3MtlCond cond;
  cond.speaker_emb = v.speaker_emb;
  cond.cond_prompt_tokens = v.cond_prompt_tokens;
  cond.exaggeration = c.pipeline.exaggeration;
  T3MtlSampling s = pipe.t3().default_sampling();
  s.seed = args.seed;
  StreamTarget t;
  t.name = "mtl-stream";
  t.n_threads = pipe.n_threads();
  t.sample_rate = pipe.sample_rate();
  t.stream = &pipe.s3gen_stream();
  t.voice = &v;
  t.token_mel_ratio = c.flow.token_mel_ratio;
  // history: the folded tokens (all of them speech), in the order T3 sampled them.
  t.decode = [&](StreamRun* run) {
    Decoded d;
    T3MtlStats st;
    (void)pipe.t3().generate(cond, text_ids, s, &st, nullptr, args.tokens, [&](int32_t tok) {
      if (tok >= c.flow.vocab) tok %= c.flow.vocab;
      d.history.push_back(tok);
      if (run) run->on_token(tok, true);
    });
    d.prefill_ms = st.prefill_ms;
    return d;
  };
  t.speech = [](const Decoded& d) { return d.history; };
  t.reseed = [&]() { pipe.reseed_s3gen(args.seed); };
  t.to_audio = [&](const std::vector<int32_t>& sp) { return pipe.tokens_to_audio(sp); };
  t.keep_samples = [&](const std::vector<int32_t>& sp) { return pipe.tail_keep_samples(int64_t(sp.size())); };
  t.stream_audio = [&](const std::vector<int32_t>& sp, const StreamSchedule& sc, const StreamSink& sink) {
    return pipe.tokens_to_audio_stream(sp, sc, nullptr, sink);
  };
  return run_stream_bench(t, args, with_variant_defaults(sa, Variant::Mtl));
}

}  // namespace cbx::bench
