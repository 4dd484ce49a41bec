// chatterbox debug hift: runs the HiFT vocoder on a mel .npy and writes the waveform as .npy,
// for parity tests against the PyTorch reference (random draws injectable) and timing.
// Registered as `debug-hift`; `chatterbox debug hift ...` forwards to it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "debug_npy.h"
#include "models/hift_vocoder.h"
#include "models/model_config.h"
#include "ops/matmul.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug hift -m MODEL.gguf --mel MEL.npy --out WAVE.npy [options]\n"
    "  --mel F         float32 .npy [80, T] or [1, 80, T] (natural-log mel)\n"
    "  --out F         float32 [480 T]: the waveform (clamped to +-0.99)\n"
    "  --phases F      float32 [9]: SineGen phases U(-pi, pi) (element 0 ignored, as upstream)\n"
    "  --noise F       float32 [9, 480 T] (or [1, 9, 480 T]): SineGen N(0, 1) noise\n"
    "                  (both or neither; without them the seeded generator draws them)\n"
    "  --seed N        generator seed (default 0)\n"
    "  --trim-fade     apply the S3Gen start trim/fade (pipeline.trim_fade_samples = 480 zeros,\n"
    "                  then as many faded in)\n"
    "  --dump-dir DIR  write the named intermediates as DIR/NAME[.STAGE].npy\n"
    "  --repeat N      run N times (timing; the last run's output is written)\n"
    "  --timing        print per-phase times of the last run\n"
    "  --gemm-precision P auto (default: bf16 for lossy weights, else f32), f32 or bf16\n"
    "  -t, --threads N (default 2)\n";

cbx::NpyArray load_f32(const std::string& path) { return cbx::cli::load_f32_npy("debug hift", path); }

std::vector<int64_t> squeeze_to(const cbx::NpyArray& a, size_t want, const std::string& path) {
  return cbx::cli::squeeze_to("debug hift", a, want, path);
}

int run(int argc, char** argv) {
  std::string model, mel_path, out_path, ph_path, noise_path, dump_dir;
  uint64_t seed = 0;
  int threads = 2, repeat = 1;
  cbx::GemmPrecision gemm = cbx::GemmPrecision::Auto;
  bool trim = false, timing = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug hift", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--mel")
      mel_path = next();
    else if (a == "--out")
      out_path = next();
    else if (a == "--phases")
      ph_path = next();
    else if (a == "--noise")
      noise_path = next();
    else if (a == "--seed")
      seed = cbx::parse_u64("--seed", next());
    else if (a == "--trim-fade")
      trim = true;
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "--timing")
      timing = true;
    else if (a == "--gemm-precision")
      gemm = cbx::parse_gemm_precision(next().c_str(), "debug hift --gemm-precision");
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug hift: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !mel_path.empty(), "debug hift: -m and --mel are required\n%s", kUsage);
  CBX_CHECK(ph_path.empty() == noise_path.empty(), "debug hift: give both --phases and --noise, or neither");
  CBX_CHECK(threads > 0 && repeat > 0, "debug hift: bad --threads or --repeat");

  auto f = cbx::GgufFile::open(model);
  cbx::NpyArray mel_a = load_f32(mel_path);
  std::vector<int64_t> ms = squeeze_to(mel_a, 2, mel_path);
  const int64_t T = ms[1];
  cbx::Tensor mel = cbx::make_tensor(cbx::DType::F32, {ms[0], ms[1]}, mel_a.data.data(), mel_a.data.size());

  cbx::ThreadPool pool(threads);
  cbx::HiftOptions o;
  o.gemm = gemm;
  o.max_frames = T;
  o.seed = seed;
  cbx::HiftVocoder voc(*f, pool, o);
  const int64_t N = voc.samples_per_frame() * T, H1 = voc.n_harmonic_channels();

  cbx::NpyArray ph_a, noise_a;
  cbx::HiftDraws draws;
  if (!ph_path.empty()) {
    ph_a = load_f32(ph_path);
    CBX_CHECK(ph_a.numel() == H1, "debug hift: '%s' has %lld values, want %lld phases", ph_path.c_str(),
              (long long)ph_a.numel(), (long long)H1);
    noise_a = load_f32(noise_path);
    std::vector<int64_t> ns = squeeze_to(noise_a, 2, noise_path);
    CBX_CHECK(ns[0] == H1 && ns[1] == N, "debug hift: '%s' has shape %s, want [%lld, %lld]", noise_path.c_str(),
              noise_a.shape_str().c_str(), (long long)H1, (long long)N);
    draws.phases = ph_a.as<float>();
    draws.noise = noise_a.as<float>();
  }

  const cbx::Tensor* result = nullptr;
  for (int r = 0; r < repeat; ++r) {
    if (!dump_dir.empty() && r + 1 == repeat)
      voc.set_capture([&](const char* name, int stage, const cbx::Tensor& t) {
        std::string path = dump_dir;
        path += '/';
        path += name;
        if (stage >= 0) {
          path += '.';
          path += std::to_string(stage);
        }
        path += ".npy";
        cbx::cli::save_tensor_npy(path, t);
      });
    result = &voc.forward(mel, draws.phases ? &draws : nullptr);
    if (timing) std::fprintf(stderr, "run %d: %.1f ms\n", r, voc.last_timing().total);
  }
  const cbx::Tensor& wave = *result;
  std::vector<float> out(wave.ptr<float>(), wave.ptr<float>() + wave.numel());
  if (trim) cbx::hift_trim_fade(out.data(), int64_t(out.size()), cbx::read_config(*f).pipeline.trim_fade_samples);
  if (!out_path.empty()) cbx::npy_save_f32(out_path, {int64_t(out.size())}, out.data());

  if (timing) {
    const auto& tm = voc.last_timing();
    std::fprintf(stderr, "hift: T %lld frames -> %lld samples, %d threads, arena %.1f MB\n", (long long)T, (long long)N,
                 threads, double(voc.arena_bytes()) / 1e6);
    std::fprintf(stderr, "  f0 %.1f  source %.1f  stft %.1f  conv_pre %.1f ms\n", tm.f0, tm.source, tm.stft,
                 tm.conv_pre);
    for (size_t i = 0; i < tm.ups.size(); ++i)
      std::fprintf(stderr, "  stage %zu: ups %.1f  source branch %.1f  resblocks %.1f ms\n", i, tm.ups[i],
                   tm.source_branch[i], tm.resblocks[i]);
    std::fprintf(stderr, "  conv_post + istft %.1f ms\n  total %.1f ms (%.3f x real time)\n", tm.istft, tm.total,
                 tm.total / 1000.0 / (double(N) / voc.config().sample_rate));
  }
  return 0;
}

cbx::cli::RegisterCommand reg("debug-hift", "run the HiFT vocoder on a mel .npy (parity / timing)", run);

}  // namespace
