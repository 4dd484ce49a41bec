// chatterbox debug s3tok: runs the S3 tokenizer (models/s3_tokenizer.h) on a 16 kHz wave .npy
// and writes the 25 Hz speech tokens (and optionally the FSQ projection and every named
// intermediate) as .npy, for parity tests against tests/s3tok_reference.py and timing.
// Registered as `debug-s3tok`; `chatterbox debug s3tok ...` forwards to it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "debug_npy.h"
#include "models/model_config.h"
#include "models/s3_tokenizer.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug s3tok -m MODEL.gguf --wav IN.npy -o TOKENS.npy [options]\n"
    "  --wav F          float32 .npy [n] or [1, n]: mono wave at 16 kHz\n"
    "  -o, --out F      int32 [T]: speech tokens (T = ceil(ceil(frames / 2) / 2), frames = n / 160)\n"
    "  --max-tokens N   keep at most 4 N mel frames, i.e. at most N tokens (upstream max_len)\n"
    "  --out-proj F     float32 [T, 8]: project_down output, the FSQ input (before tanh)\n"
    "  --out-encoder F  float32 [T, n_state]: the encoder output (after the last block)\n"
    "  --dump-dir DIR   write every named intermediate of the first run as DIR/NAME.npy\n"
    "  --repeat N       run N times and print each run's time, the median and the best\n"
    "  --timings        print the time spent up to each named intermediate (last run)\n"
    "  --gemm P         GEMM precision: f32 (default), bf16, auto (bf16 for f16/q weights, else f32)\n"
    "  -t, --threads N  (default 2)\n";

int run(int argc, char** argv) {
  std::string model, wav_path, out, out_proj, out_enc, dump_dir;
  int threads = 2, repeat = 1;
  long long max_tokens = -1;
  bool timings = false;
  std::string gemm = "f32";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug s3tok", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--wav")
      wav_path = next();
    else if (a == "-o" || a == "--out")
      out = next();
    else if (a == "--max-tokens")
      max_tokens = cbx::cli::int_flag("--max-tokens", next(), 0, 1073741824);
    else if (a == "--out-proj")
      out_proj = next();
    else if (a == "--out-encoder")
      out_enc = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else if (a == "--timings")
      timings = true;
    else if (a == "--gemm")
      gemm = next();
    else
      cbx::fail("debug s3tok: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !wav_path.empty(), "debug s3tok: -m and --wav are required\n%s", kUsage);
  CBX_CHECK(threads > 0 && repeat > 0, "debug s3tok: bad --threads or --repeat");

  cbx::NpyArray a = cbx::cli::load_f32_npy("debug s3tok", wav_path);
  const std::vector<int64_t> s = cbx::cli::squeeze_to("debug s3tok", a, 1, wav_path);
  const int64_t n = s[0];
  const float* wav = a.as<float>();

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  cbx::ThreadPool pool(threads);
  cbx::S3Tokenizer tok(*f, cfg, std::max<int64_t>(n, 201), pool.size());
  tok.set_gemm_precision(cbx::parse_gemm_precision(gemm.c_str(), "debug s3tok --gemm"));
  const std::string enc_name =
      cfg.s3tok.n_layer > 0 ? "s3tok.block" + std::to_string(cfg.s3tok.n_layer - 1) + ".out" : "s3tok.conv2";

  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<std::string, Clock::time_point>> marks;
  std::vector<int32_t> tokens;
  std::vector<double> ms;
  double cpu_ms = 0;
  for (int it = 0; it < repeat; ++it) {
    const bool dump = it == 0 && !dump_dir.empty(), last = it == repeat - 1;
    const bool proj = last && (!out_proj.empty() || !out_enc.empty()), timed = last && timings && !dump;
    marks.clear();
    if (dump || proj || timed)
      tok.set_capture([&](const std::string& name, const cbx::Tensor& t) {
        if (timed) marks.emplace_back(name, Clock::now());
        if (dump) cbx::cli::save_tensor_npy(dump_dir + "/" + name + ".npy", t);
        if (proj && !out_proj.empty() && name == "s3tok.project_down") cbx::cli::save_tensor_npy(out_proj, t);
        if (proj && !out_enc.empty() && name == enc_name) cbx::cli::save_tensor_npy(out_enc, t);
      });
    const double c0 = cbx::cli::process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    if (timed) marks.emplace_back("start", t0);
    tokens = tok.tokenize(pool, wav, n, max_tokens);
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = cbx::cli::process_cpu_ms();
    tok.set_capture(nullptr);
    if (!dump) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      cpu_ms += c1 - c0;
    }
  }
  if (!out.empty()) cbx::npy_save(out, cbx::DType::I32, {int64_t(tokens.size())}, tokens.data());
  std::printf("samples=%lld seconds=%.2f tokens=%zu threads=%d gemm=%s", (long long)n, double(n) / 16000.0,
              tokens.size(), threads, cbx::gemm_precision_name(tok.gemm_precision()));
  if (!ms.empty()) {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    std::printf(" runs=%zu median_ms=%.1f best_ms=%.1f cpu_ms_per_run=%.1f", ms.size(), sorted[sorted.size() / 2],
                sorted[0], cpu_ms / double(ms.size()));
  }
  std::printf("\n");
  for (size_t i = 1; i < marks.size(); ++i)
    std::printf("  %-22s %8.2f ms\n", marks[i].first.c_str(),
                std::chrono::duration<double, std::milli>(marks[i].second - marks[i - 1].second).count());
  return 0;
}

cbx::cli::RegisterCommand reg("debug-s3tok", "run the S3 tokenizer on a 16 kHz wave .npy, write tokens .npy (parity)",
                              run);

}  // namespace
