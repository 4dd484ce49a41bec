// chatterbox debug cfm: runs the S3Gen CFM solver (estimator + Euler steps) on mu / cond / spks
// .npy inputs and writes the mel as .npy, for parity tests against the PyTorch reference (noise
// injectable) and timing. Registered as `debug-cfm`; `chatterbox debug cfm ...` forwards to it.
#include <algorithm>
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
#include "core/thread_pool.h"
#include "debug_npy.h"
#include "models/cfm_estimator.h"
#include "models/cfm_solver.h"
#include "models/model_config.h"
#include "ops/matmul.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug cfm -m MODEL.gguf --mu MU.npy --cond COND.npy --spks SPKS.npy\n"
    "                            [--noise Z.npy] --out-mel MEL.npy [options]\n"
    "  --mu F             float32 [80, T] (or [1, 80, T]): encoder_proj output, prompt frames first\n"
    "  --cond F           float32 [80, T]: prompt mel in the first frames, zeros after\n"
    "  --spks F           float32 [80] (or [1, 80]): the projected speaker vector\n"
    "  --noise F          float32 [80, T]: z ~ N(0, 1) (default: the seeded generator)\n"
    "  --out-mel F        float32 [80, T - P]: the mel after the prompt frames are dropped\n"
    "  --prompt-frames P  frames dropped (default: up to the last non-zero frame of cond)\n"
    "  --valid-frames N   mask frames from N on (upstream's length mask; default: none masked)\n"
    "  --steps-out PFX    write x after step k (all T frames) as PFX.K.npy\n"
    "  --dump-dir DIR     write the estimator intermediates of the first call as DIR/NAME[.I].npy\n"
    "  --seed N           generator seed (default 0)\n"
    "  --repeat N         run N times (timing; the last run's output is written)\n"
    "  --timing           print per-step estimator times\n"
    "  --gemm-precision P auto (default: bf16 for lossy weights, else f32), f32, bf16 or int8 (int8 linears)\n"
    "  -t, --threads N    (default 2)\n";

cbx::NpyArray load_f32(const std::string& path) { return cbx::cli::load_f32_npy("debug cfm", path); }

std::vector<int64_t> squeeze_to(const cbx::NpyArray& a, size_t want, const std::string& path) {
  return cbx::cli::squeeze_to("debug cfm", a, want, path);
}

cbx::Tensor mel_tensor(cbx::NpyArray& a, const std::string& path, int64_t M) {
  std::vector<int64_t> s = squeeze_to(a, 2, path);
  CBX_CHECK(s[0] == M, "debug cfm: '%s' has shape %s, want [%lld, T]", path.c_str(), a.shape_str().c_str(),
            (long long)M);
  return cbx::make_tensor(cbx::DType::F32, {s[0], s[1]}, a.data.data(), a.data.size());
}

// CPU seconds of the whole process (all threads): on a shared machine the wall time of a run
// also counts other processes, this does not.
int run(int argc, char** argv) {
  std::string model, mu_path, cond_path, spks_path, noise_path, out_path, steps_out, dump_dir;
  int64_t prompt = -1, valid = -1;
  uint64_t seed = 0;
  int threads = 2, repeat = 1;
  cbx::GemmPrecision gemm = cbx::GemmPrecision::Auto;
  bool timing = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug cfm", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--mu")
      mu_path = next();
    else if (a == "--cond")
      cond_path = next();
    else if (a == "--spks")
      spks_path = next();
    else if (a == "--noise")
      noise_path = next();
    else if (a == "--out-mel")
      out_path = next();
    else if (a == "--prompt-frames")
      prompt = cbx::cli::int_flag("--prompt-frames", next(), 0, 1073741824);
    else if (a == "--valid-frames")
      valid = cbx::cli::int_flag("--valid-frames", next(), 0, 1073741824);
    else if (a == "--steps-out")
      steps_out = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--seed")
      seed = cbx::parse_u64("--seed", next());
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "--timing")
      timing = true;
    else if (a == "--gemm-precision")
      gemm = cbx::parse_gemm_precision(next().c_str(), "debug cfm --gemm-precision");
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug cfm: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !mu_path.empty() && !cond_path.empty() && !spks_path.empty(),
            "debug cfm: -m, --mu, --cond and --spks are required\n%s", kUsage);
  CBX_CHECK(threads > 0 && repeat > 0, "debug cfm: bad --threads or --repeat");

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  const int64_t M = cfg.cfm.out_channels;
  cbx::NpyArray mu_a = load_f32(mu_path), cond_a = load_f32(cond_path), spks_a = load_f32(spks_path), noise_a;
  cbx::Tensor mu = mel_tensor(mu_a, mu_path, M), cond = mel_tensor(cond_a, cond_path, M);
  const int64_t T = mu.shape[1];
  CBX_CHECK(cond.shape[1] == T, "debug cfm: cond %s and mu %s differ in length", cond_a.shape_str().c_str(),
            mu_a.shape_str().c_str());
  CBX_CHECK(spks_a.numel() == M, "debug cfm: '%s' has %lld values, want %lld", spks_path.c_str(),
            (long long)spks_a.numel(), (long long)M);
  cbx::Tensor spks = cbx::make_tensor(cbx::DType::F32, {M}, spks_a.data.data(), spks_a.data.size());
  cbx::Tensor noise;
  if (!noise_path.empty()) {
    noise_a = load_f32(noise_path);
    noise = mel_tensor(noise_a, noise_path, M);
    CBX_CHECK(noise.shape[1] == T, "debug cfm: noise %s and mu %s differ in length", noise_a.shape_str().c_str(),
              mu_a.shape_str().c_str());
  }
  if (prompt < 0) {  // upstream cond = zeros with the prompt mel in the first frames
    prompt = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t ch = 0; ch < M; ++ch)
        if (cond.ptr<float>()[ch * T + t] != 0.f) {
          prompt = t + 1;
          break;
        }
  }

  std::vector<float> mask_buf;
  cbx::Tensor mask;
  if (valid >= 0) {
    CBX_CHECK(valid >= 1 && valid <= T, "debug cfm: --valid-frames %lld must lie in [1, %lld]", (long long)valid,
              (long long)T);
    mask_buf.assign(size_t(T), 0.f);
    std::fill(mask_buf.begin(), mask_buf.begin() + valid, 1.f);
    mask = cbx::make_tensor(cbx::DType::F32, {T}, mask_buf.data(), mask_buf.size() * 4);
  }

  cbx::CfmEstimatorWeights w;
  cbx::bind_cfm_estimator(*f, cfg.cfm, w);
  cbx::ThreadPool pool(threads);
  cbx::CfmSolverOptions o;
  o.gemm = gemm;
  o.max_frames = T;
  o.seed = seed;
  cbx::CfmSolver solver(cfg.cfm, w, pool, o);

  const cbx::Tensor* mel = nullptr;
  for (int r = 0; r < repeat; ++r) {
    const bool last = r + 1 == repeat;
    if (last && !steps_out.empty())
      solver.set_step_capture([&](int k, const cbx::Tensor& x) {
        cbx::cli::save_tensor_npy(steps_out + "." + std::to_string(k) + ".npy", x);
      });
    bool dumped = false;
    if (last && !dump_dir.empty())
      solver.estimator().set_capture([&](const char* name, int index, const cbx::Tensor& t) {
        if (dumped) return;
        std::string path = dump_dir + "/" + name;
        if (index >= 0) path += '.' + std::to_string(index);
        cbx::cli::save_tensor_npy(path + ".npy", t);
        if (std::strcmp(name, "out") == 0) dumped = true;
      });
    const double cpu0 = cbx::cli::process_cpu_ms();
    mel = &solver.solve(mu, spks, cond, prompt, noise, mask);
    const double cpu_ms = cbx::cli::process_cpu_ms() - cpu0;
    if (timing) {
      double total = 0;
      std::string steps;
      for (double ms : solver.last_step_ms()) {
        total += ms;
        char b[32];
        std::snprintf(b, sizeof b, " %.1f", ms);
        steps += b;
      }
      std::fprintf(stderr, "run %d: %.1f ms wall (estimator calls:%s ms), %.1f ms CPU over all threads\n", r, total,
                   steps.c_str(), cpu_ms);
    }
  }
  if (!out_path.empty()) cbx::cli::save_tensor_npy(out_path, *mel);
  if (timing)
    std::fprintf(stderr, "cfm: %s, T %lld frames (%lld prompt), %d steps%s, %d threads, estimator arena %.1f MB\n",
                 cfg.cfm.meanflow ? "meanflow" : "euler", (long long)T, (long long)prompt, solver.n_steps(),
                 solver.uses_cfg() ? " x CFG pair" : "", threads, double(solver.estimator().arena_bytes()) / 1e6);
  return 0;
}

cbx::cli::RegisterCommand reg("debug-cfm", "run the S3Gen CFM solver on mu/cond/spks .npy (parity / timing)", run);

}  // namespace
