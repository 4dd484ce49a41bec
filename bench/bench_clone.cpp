// chatterbox-bench clone -m MODEL.gguf --ref REF [--threads T] [--runs N] [--max-seconds S]
//
// Voice cloning: reference audio -> conditionals (VoiceBuilder::build, the path of `chatterbox voice
// create` and `say --voice REF`), repeated N times (default 3) after one warm-up; per-stage medians:
//   decode_ms        libsndfile decode + mono mix
//   resample_24k_ms  file rate -> 24 kHz (soxr HQ)
//   loudness_ms      BS.1770 loudness (+ -27 LUFS gain on Turbo), silence check
//   resample_16k_ms  whole reference 24 -> 16 kHz (soxr HQ, for the VE and the T3 prompt tokens)
//   resample_sinc_ms first 10 s 24 -> 16 kHz (torchaudio sinc, for CAMPPlus and the S3Gen tokens)
//   s3gen_mel_ms     prompt_feat front-end (24 kHz, 80 bins)
//   ve_ms            voice encoder, its 40-bin mel included
//   campplus_ms      CAMPPlus, its Kaldi fbank included
//   s3tok_t3_ms      S3 tokenizer on the T3 prompt (15 s Turbo / 6 s MTL), its log-mel included
//   s3tok_s3gen_ms   S3 tokenizer on the 10 s S3Gen reference, its log-mel included
//   clone_ms         the whole build (sum of the above plus copies)
// The front-ends inside the networks are then timed alone on the same signals (fe_ve_mel_ms,
// fe_fbank_ms, fe_s3tok_mel_t3_ms, fe_s3tok_mel_s3gen_ms) to show their share. load_ms (binding the
// networks, reserving scratch) is printed once; it is paid once per model, not per voice.
// Then each network alone on the same signals, wall and CPU/threads medians (cpu_* lines), to
// attribute the build's time on a shared machine.
// clone_cpu_ms = process CPU time of one build / threads (median). On a quiet machine it equals
// clone_ms; under heavy load on the shared VM it read ~40% below the quiet wall time (see
// docs/benchmarks.md), so treat it as a hint, not an estimate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "audio/audio_file.h"
#include "audio/mel.h"
#include "audio/resample.h"
#include "bench.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/campplus.h"
#include "models/model_config.h"
#include "models/s3_tokenizer.h"
#include "models/voice_encoder.h"
#include "pipeline/voice.h"

namespace cbx::bench {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

int run_clone(int argc, char** argv) {
  std::string model, ref;
  int threads = 2, runs = 3;
  VoiceBuildOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      CBX_CHECK(i + 1 < argc, "bench clone: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--ref")
      ref = next();
    else if (a == "--threads")
      threads = int(int_arg("bench clone: " + a, next(), 1, 256));
    else if (a == "--runs")
      runs = int(int_arg("bench clone: " + a, next(), 1, 100));
    else if (a == "--max-seconds")
      o.max_seconds = double_arg("bench clone: " + a, next(), 10, 600);
    else if (a == "--help" || a == "-h") {
      std::puts(
          "usage: chatterbox-bench clone -m MODEL.gguf --ref REF [--threads T] [--runs N] [--max-seconds S]"
          "  (see bench/bench_clone.cpp)");
      return 0;
    } else
      fail("bench clone: unknown option '%s' (see bench/bench_clone.cpp)", a.c_str());
  }
  CBX_CHECK(!model.empty() && !ref.empty(), "usage: chatterbox-bench clone -m MODEL.gguf --ref REF [--threads T]");

  double t0 = now_ms();
  std::unique_ptr<GgufFile> f = GgufFile::open(model);
  const ModelConfig c = read_config(*f);
  ThreadPool pool(threads);
  VoiceBuilder builder(*f, c, pool, o);
  const double load_ms = now_ms() - t0;

  std::vector<std::string> warnings;
  Voice v = builder.build(ref, nullptr, &warnings);  // warm-up (page-in of the weights)
  for (const std::string& w : warnings) std::fprintf(stderr, "bench clone: warning: %s\n", w.c_str());

  std::vector<VoiceBuildTimings> tms(static_cast<size_t>(runs));
  std::vector<double> cpu;
  for (int r = 0; r < runs; ++r) {
    const double c0 = cpu_ms();
    v = builder.build(ref, &tms[size_t(r)]);
    cpu.push_back((cpu_ms() - c0) / threads);
  }
  auto med = [&](double VoiceBuildTimings::*field) {
    std::vector<double> x;
    for (const VoiceBuildTimings& t : tms) x.push_back(t.*field);
    return median(x);
  };

  // The networks' front-ends alone, on signals of the same lengths as in the build.
  AudioData a = load_audio(ref, 24000, o.max_seconds);
  std::vector<float> ref16 = resample_soxr(a.samples.data(), a.samples.size(), 24000, 16000);
  const size_t n24 = std::min(a.samples.size(), size_t(c.pipeline.dec_cond_seconds * 24000));
  std::vector<float> s3_16 = SincResampler(24000, 16000).process(a.samples.data(), n24);
  const size_t n_t3 = std::min(ref16.size(), size_t(c.pipeline.enc_cond_seconds * 16000));
  VoiceEncoderMel ve_mel;
  KaldiFbank fbank;
  S3TokenizerMel s3mel;
  std::vector<double> fe_ve, fe_fb, fe_t3, fe_s3;
  for (int r = 0; r < runs; ++r) {
    t0 = now_ms();
    ve_mel.compute(ref16.data(), ref16.size());
    double t1 = now_ms();
    fbank.compute(s3_16.data(), s3_16.size());
    double t2 = now_ms();
    s3mel.compute(ref16.data(), n_t3);
    double t3 = now_ms();
    s3mel.compute(s3_16.data(), s3_16.size());
    double t4 = now_ms();
    fe_ve.push_back(t1 - t0), fe_fb.push_back(t2 - t1), fe_t3.push_back(t3 - t2), fe_s3.push_back(t4 - t3);
  }

  // Each network alone: wall and CPU/threads.
  VoiceEncoder ve(*f, c, int64_t(ref16.size()));
  CampPlus cp(*f, c, int64_t(s3_16.size()), pool.size());
  S3Tokenizer tok(*f, c, int64_t(std::max(n_t3, s3_16.size())), pool.size());
  std::vector<double> w_ve, w_cp, w_t3, w_s3, c_ve, c_cp, c_t3, c_s3;
  auto timed = [&](std::vector<double>& w, std::vector<double>& cc, auto&& fn) {
    const double w0 = now_ms(), c0 = cpu_ms();
    fn();
    w.push_back(now_ms() - w0);
    cc.push_back((cpu_ms() - c0) / threads);
  };
  for (int r = 0; r < runs; ++r) {
    timed(w_ve, c_ve, [&] { ve.embed(pool, ref16.data(), int64_t(ref16.size())); });
    timed(w_cp, c_cp, [&] { cp.embed(pool, s3_16.data(), int64_t(s3_16.size())); });
    timed(w_t3, c_t3, [&] { tok.tokenize(pool, ref16.data(), int64_t(n_t3), c.t3.cond_prompt_len); });
    timed(w_s3, c_s3, [&] { tok.tokenize(pool, s3_16.data(), int64_t(s3_16.size())); });
  }

  std::printf("bench clone: %s (%s), ref %s: %d Hz, %d ch, %.2f s used; %d threads, median of %d runs\n", model.c_str(),
              variant_name(c.variant), ref.c_str(), v.source_sample_rate, v.source_channels,
              double(v.ref_samples) / 24000.0, threads, runs);
  std::printf("load_ms=%.1f\n", load_ms);
  std::printf("decode_ms=%.2f resample_24k_ms=%.2f loudness_ms=%.2f resample_16k_ms=%.2f resample_sinc_ms=%.2f\n",
              med(&VoiceBuildTimings::decode_ms), med(&VoiceBuildTimings::resample_24k_ms),
              med(&VoiceBuildTimings::loudness_ms), med(&VoiceBuildTimings::resample_16k_ms),
              med(&VoiceBuildTimings::resample_sinc_ms));
  std::printf("s3gen_mel_ms=%.2f ve_ms=%.2f campplus_ms=%.2f s3tok_t3_ms=%.2f s3tok_s3gen_ms=%.2f\n",
              med(&VoiceBuildTimings::s3gen_mel_ms), med(&VoiceBuildTimings::ve_ms),
              med(&VoiceBuildTimings::campplus_ms), med(&VoiceBuildTimings::s3tok_t3_ms),
              med(&VoiceBuildTimings::s3tok_s3gen_ms));
  std::printf(
      "fe_ve_mel_ms=%.2f fe_fbank_ms=%.2f fe_s3tok_mel_t3_ms=%.2f fe_s3tok_mel_s3gen_ms=%.2f  (inside the above)\n",
      median(fe_ve), median(fe_fb), median(fe_t3), median(fe_s3));
  std::printf("alone: ve_ms=%.1f campplus_ms=%.1f s3tok_t3_ms=%.1f s3tok_s3gen_ms=%.1f\n", median(w_ve), median(w_cp),
              median(w_t3), median(w_s3));
  std::printf("alone: cpu_ve_ms=%.1f cpu_campplus_ms=%.1f cpu_s3tok_t3_ms=%.1f cpu_s3tok_s3gen_ms=%.1f\n", median(c_ve),
              median(c_cp), median(c_t3), median(c_s3));
  std::printf("tokens: t3_prompt=%zu s3gen_prompt=%zu prompt_frames=%lld\n", v.cond_prompt_tokens.size(),
              v.prompt_token.size(), (long long)v.n_prompt_frames());
  std::printf("clone_cpu_ms=%.1f\n", median(cpu));
  std::printf("clone_ms=%.1f\n", med(&VoiceBuildTimings::total_ms));
  return 0;
}

RegisterBench reg("clone", "voice cloning: reference audio -> conditionals, per-stage ms (clone_ms=)", run_clone);

}  // namespace
}  // namespace cbx::bench
