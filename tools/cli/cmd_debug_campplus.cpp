// chatterbox debug campplus: runs CAMPPlus (Kaldi fbank + mean normalisation + network) on a
// 16 kHz wave .npy, or the network alone on an fbank .npy, and writes S3Gen's x-vector as
// .npy, for parity tests against the PyTorch reference and timing. Registered as
// `debug-campplus`; `chatterbox debug campplus ...` forwards to it.
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
#include "models/campplus.h"
#include "models/model_config.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug campplus -m MODEL.gguf (--wav WAV.npy | --fbank FB.npy) -o EMB.npy [options]\n"
    "  --wav F         float32 .npy [n] (or [1, n]): mono 16 kHz wave (ref_wav_16)\n"
    "  --fbank F       float32 .npy [T, 80] (or [1, T, 80]): mean-normalised Kaldi fbank; runs\n"
    "                  the network alone\n"
    "  -o, --out F     float32 [192]: the x-vector\n"
    "  --out-fbank F   float32 [T, 80]: the mean-normalised fbank the network saw (--wav only)\n"
    "  --dump-dir DIR  write the named intermediates as DIR/NAME.npy (fbank, head, tdnn,\n"
    "                  block1..3, transit1..3, stats)\n"
    "  --repeat N      run N times (timing; the last run's output is written)\n"
    "  --timing        print the wall time of each run (the last one also per phase: the ms up\n"
    "                  to each named intermediate since the previous one), and the medians of\n"
    "                  wall and process CPU time\n"
    "  -t, --threads N (default 2)\n";

int run(int argc, char** argv) {
  std::string model, wav_path, fb_path, out_path, out_fbank, dump_dir;
  int threads = 2, repeat = 1;
  bool timing = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug campplus", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--wav")
      wav_path = next();
    else if (a == "--fbank")
      fb_path = next();
    else if (a == "-o" || a == "--out")
      out_path = next();
    else if (a == "--out-fbank")
      out_fbank = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "--timing")
      timing = true;
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug campplus: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && wav_path.empty() != fb_path.empty(),
            "debug campplus: -m and exactly one of --wav / --fbank are required\n%s", kUsage);
  CBX_CHECK(threads > 0 && repeat > 0, "debug campplus: bad --threads or --repeat");
  CBX_CHECK(out_fbank.empty() || !wav_path.empty(), "debug campplus: --out-fbank needs --wav");

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  cbx::NpyArray in = cbx::cli::load_f32_npy("debug campplus", wav_path.empty() ? fb_path : wav_path);
  int64_t n = 0, T = 0;
  if (!wav_path.empty()) {
    n = cbx::cli::squeeze_to("debug campplus", in, 1, wav_path)[0];
  } else {
    std::vector<int64_t> s = cbx::cli::squeeze_to("debug campplus", in, 2, fb_path);
    CBX_CHECK(s[1] == cfg.campplus.feat_dim, "debug campplus: '%s' has shape %s, want [T, %d]", fb_path.c_str(),
              in.shape_str().c_str(), cfg.campplus.feat_dim);
    T = s[0];
    n = 400 + (T - 1) * 160;  // samples whose fbank has T frames: sizes the reservation
  }

  cbx::ThreadPool pool(threads);
  cbx::CampPlus cam(*f, cfg, n, pool.size());
  std::vector<float> emb;
  std::vector<double> ms, cpu;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cbx::cli::process_cpu_ms();
    std::string phases;
    auto last = t0;
    if ((!dump_dir.empty() || !out_fbank.empty() || timing) && r + 1 == repeat)
      cam.set_capture([&](const char* name, const cbx::Tensor& t) {
        auto now = std::chrono::steady_clock::now();
        char buf[64];
        std::snprintf(buf, sizeof buf, " %s %.1f", name, std::chrono::duration<double, std::milli>(now - last).count());
        phases += buf;
        if (!dump_dir.empty()) cbx::cli::save_tensor_npy(dump_dir + "/" + name + ".npy", t);
        if (!out_fbank.empty() && std::strcmp(name, "fbank") == 0) cbx::cli::save_tensor_npy(out_fbank, t);
        last = std::chrono::steady_clock::now();  // excludes the dump itself
      });
    emb = wav_path.empty() ? cam.embed_fbank(pool, in.as<float>(), T) : cam.embed(pool, in.as<float>(), n);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cbx::cli::process_cpu_ms() - c0);
    if (timing)
      std::fprintf(stderr, "run %d: %.1f ms%s%s\n", r, ms.back(),
                   phases.empty() ? "" : "; up to each:", phases.c_str());
  }
  if (timing) {
    std::sort(ms.begin(), ms.end());
    std::sort(cpu.begin(), cpu.end());
    std::fprintf(stderr,
                 "campplus: %lld fbank frames, %d threads: median %.1f ms (CPU %.1f ms) of %d runs, arena %.1f MB\n",
                 (long long)(wav_path.empty() ? T : cam.num_frames(n)), threads, ms[ms.size() / 2], cpu[cpu.size() / 2],
                 repeat, double(cam.arena_bytes()) / 1e6);
  }
  if (!out_path.empty()) cbx::npy_save_f32(out_path, {int64_t(emb.size())}, emb.data());
  return 0;
}

cbx::cli::RegisterCommand reg("debug-campplus", "run CAMPPlus on a 16 kHz wave or fbank .npy (parity / timing)", run);

}  // namespace
