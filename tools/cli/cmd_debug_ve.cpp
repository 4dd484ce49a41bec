// chatterbox debug ve: runs the voice encoder on a 16 kHz wave .npy and writes T3's speaker
// embedding as .npy (with the trimmed range, mel and partial embeddings on request), for
// parity tests against the PyTorch reference and timing. Registered as `debug-ve`;
// `chatterbox debug ve ...` forwards to it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/npy.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "debug_npy.h"
#include "models/model_config.h"
#include "models/voice_encoder.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug ve -m MODEL.gguf --wav WAV.npy -o EMB.npy [options]\n"
    "  --wav F         float32 .npy [n] (or [1, n]): mono 16 kHz wave (the caller's cut)\n"
    "  -o, --out F     float32 [256]: the speaker embedding (embeds_from_wavs, mean, L2 norm)\n"
    "  --dump-dir DIR  write DIR/trim.npy [2], DIR/mel.npy [T, 40], DIR/partials.npy [P, 256]\n"
    "  --repeat N      run N times (timing; the last run's output is written)\n"
    "  --timing        print the wall time of each run, and the medians of wall and process CPU time\n"
    "  -t, --threads N (default 2)\n";

int run(int argc, char** argv) {
  std::string model, wav_path, out_path, dump_dir;
  int threads = 2, repeat = 1;
  bool timing = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug ve", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--wav")
      wav_path = next();
    else if (a == "-o" || a == "--out")
      out_path = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "--timing")
      timing = true;
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug ve: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !wav_path.empty(), "debug ve: -m and --wav are required\n%s", kUsage);
  CBX_CHECK(threads > 0 && repeat > 0, "debug ve: bad --threads or --repeat");

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  cbx::NpyArray wav = cbx::cli::load_f32_npy("debug ve", wav_path);
  const int64_t n = cbx::cli::squeeze_to("debug ve", wav, 1, wav_path)[0];

  cbx::ThreadPool pool(threads);
  cbx::VoiceEncoder ve(*f, cfg, n);
  std::vector<float> emb;
  std::vector<double> ms, cpu;
  for (int r = 0; r < repeat; ++r) {
    if (!dump_dir.empty() && r + 1 == repeat)
      ve.set_capture([&](const char* name, const cbx::Tensor& t) {
        std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
        cbx::npy_save_f32(dump_dir + "/" + name + ".npy", shape, t.ptr<float>());
      });
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cbx::cli::process_cpu_ms();
    emb = ve.embed(pool, wav.as<float>(), n);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cbx::cli::process_cpu_ms() - c0);
    if (timing) std::fprintf(stderr, "run %d: %.1f ms\n", r, ms.back());
  }
  if (timing) {
    std::sort(ms.begin(), ms.end());
    std::sort(cpu.begin(), cpu.end());
    std::fprintf(stderr,
                 "ve: %lld samples (%.2f s), <= %lld partials, %d threads: median %.1f ms (CPU %.1f ms) of %d runs, "
                 "arena %.1f MB\n",
                 (long long)n, double(n) / cfg.ve.sample_rate, (long long)ve.num_partials(n), threads,
                 ms[ms.size() / 2], cpu[cpu.size() / 2], repeat, double(ve.arena_bytes()) / 1e6);
  }
  if (!out_path.empty()) cbx::npy_save_f32(out_path, {int64_t(emb.size())}, emb.data());
  return 0;
}

cbx::cli::RegisterCommand reg("debug-ve", "run the voice encoder on a 16 kHz wave .npy (parity / timing)", run);

}  // namespace
