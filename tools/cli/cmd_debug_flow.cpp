// chatterbox debug flow: runs the S3Gen flow front + encoder (models/flow_encoder.h) on given
// speech tokens and writes mu / cond / spks (and optionally every named intermediate) as .npy,
// for parity tests against the PyTorch reference (tests/flow_reference.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "debug_npy.h"
#include "models/flow_encoder.h"
#include "models/model_config.h"
#include "ops/matmul.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug flow -m MODEL.gguf --tokens IN.npy [options]\n"
    "  --tokens F          int32/int64 .npy [N] or [1, N]: speech tokens (< flow vocab)\n"
    "  --prompt-tokens F   int .npy [Tp] or [1, Tp] (default: the GGUF's voice.prompt_token)\n"
    "  --prompt-feat F     float32 .npy [Tm, 80] or [1, Tm, 80] (default: voice.prompt_feat)\n"
    "  --embedding F       float32 .npy [192] or [1, 192] (default: voice.embedding)\n"
    "  --out-mu F          float32 [80, 2L]: encoder_proj output, channels first (L = Tp + N)\n"
    "  --out-cond F        float32 [80, 2L]: prompt_feat^T in the first Tm frames, zeros after\n"
    "  --out-spks F        float32 [80]: spk_embed_affine_layer(normalize(embedding))\n"
    "  --dump-dir DIR      write every named intermediate as DIR/NAME.npy\n"
    "  --repeat N          run the forward N times and print the best time (default 1)\n"
    "  --timings           print the time spent up to each named intermediate (last run)\n"
    "  --gemm-precision P  auto (default: bf16 for lossy weights, else f32), f32 or bf16\n"
    "  -t, --threads N     (default 2)\n";

std::vector<int32_t> load_ids(const std::string& path) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::I32 || a.dtype == cbx::DType::I64, "debug flow: '%s' must hold int32/int64 ids",
            path.c_str());
  CBX_CHECK(a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1),
            "debug flow: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  std::vector<int32_t> out(size_t(a.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v = a.dtype == cbx::DType::I32 ? a.as<int32_t>()[i] : a.as<int64_t>()[i];
    CBX_CHECK(v >= 0 && v <= INT32_MAX, "debug flow: '%s' id %lld at %zu is out of range", path.c_str(), (long long)v,
              i);
    out[i] = int32_t(v);
  }
  return out;
}

// float32 .npy whose shape, after dropping leading 1s, is [n] (cols = 0) or [rows, cols].
std::vector<float> load_f32(const std::string& path, int64_t cols, int64_t* rows) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::F32, "debug flow: '%s' must be float32", path.c_str());
  std::vector<int64_t> s = a.shape;
  while (s.size() > 1 && s[0] == 1) s.erase(s.begin());
  if (cols == 0)
    CBX_CHECK(s.size() == 1, "debug flow: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  else
    CBX_CHECK((s.size() == 2 && s[1] == cols) || (s.size() == 1 && s[0] == 0),
              "debug flow: '%s' must be [T, %lld] or [1, T, %lld], got %s", path.c_str(), (long long)cols,
              (long long)cols, a.shape_str().c_str());
  if (rows) *rows = s[0];
  return a.to_f32();
}

int run(int argc, char** argv) {
  std::string model, tok_path, ptok_path, feat_path, emb_path, out_mu, out_cond, out_spks, dump_dir;
  int threads = 2, repeat = 1;
  cbx::GemmPrecision gemm = cbx::GemmPrecision::Auto;
  bool timings = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug flow", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--tokens")
      tok_path = next();
    else if (a == "--prompt-tokens")
      ptok_path = next();
    else if (a == "--prompt-feat")
      feat_path = next();
    else if (a == "--embedding")
      emb_path = next();
    else if (a == "--out-mu")
      out_mu = next();
    else if (a == "--out-cond")
      out_cond = next();
    else if (a == "--out-spks")
      out_spks = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--repeat")
      repeat = int(cbx::cli::int_flag("--repeat", next(), 1, 1000000));
    else if (a == "--gemm-precision")
      gemm = cbx::parse_gemm_precision(next().c_str(), "debug flow --gemm-precision");
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else if (a == "--timings")
      timings = true;
    else
      cbx::fail("debug flow: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !tok_path.empty(), "debug flow: -m and --tokens are required\n%s", kUsage);
  CBX_CHECK(threads > 0 && repeat > 0, "debug flow: bad --threads or --repeat");

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  const cbx::FlowConfig& fc = cfg.flow;
  std::vector<int32_t> tokens = load_ids(tok_path);
  std::vector<int32_t> ptoks;
  if (!ptok_path.empty())
    ptoks = load_ids(ptok_path);
  else {
    cbx::Tensor t = f->tensor("voice.prompt_token");
    CBX_CHECK(t.dtype == cbx::DType::I32, "debug flow: voice.prompt_token must be i32");
    ptoks.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  std::vector<float> feat;
  int64_t n_frames = 0;
  if (!feat_path.empty())
    feat = load_f32(feat_path, fc.mel_dim, &n_frames);
  else {
    cbx::Tensor t = f->tensor("voice.prompt_feat");
    CBX_CHECK(t.dtype == cbx::DType::F32 && t.ndim == 2 && t.shape[1] == fc.mel_dim,
              "debug flow: voice.prompt_feat must be f32 [Tm, %d]", fc.mel_dim);
    feat.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
    n_frames = t.shape[0];
  }
  std::vector<float> emb;
  if (!emb_path.empty())
    emb = load_f32(emb_path, 0, nullptr);
  else {
    cbx::Tensor t = f->tensor("voice.embedding");
    CBX_CHECK(t.dtype == cbx::DType::F32, "debug flow: voice.embedding must be f32");
    emb.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  }

  cbx::FlowEncoderWeights w;
  cbx::bind_flow_encoder(*f, fc, w);
  cbx::ThreadPool pool(threads);
  cbx::FlowEncoderOptions o;
  o.gemm = gemm;
  o.max_tokens = std::max<int64_t>(1, int64_t(ptoks.size() + tokens.size()));
  cbx::FlowEncoder enc(fc, w, pool, o);

  double best_ms = 1e30;
  cbx::FlowEncoderOutput r;
  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<std::string, Clock::time_point>> marks;
  for (int it = 0; it < repeat; ++it) {
    if (it == 0 && !dump_dir.empty())
      enc.set_capture([&](const std::string& name, const cbx::Tensor& t) {
        cbx::cli::save_tensor_npy(dump_dir + "/" + name + ".npy", t);
      });
    else if (timings && it == repeat - 1) {
      marks.clear();
      marks.reserve(64);
      enc.set_capture([&](const std::string& name, const cbx::Tensor&) { marks.emplace_back(name, Clock::now()); });
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (timings && it == repeat - 1) marks.emplace_back("start", t0);
    r = enc.forward(ptoks.data(), int64_t(ptoks.size()), tokens.data(), int64_t(tokens.size()), feat.data(), n_frames,
                    emb.data(), int64_t(emb.size()));
    const auto t1 = std::chrono::steady_clock::now();
    enc.set_capture(nullptr);
    if (it > 0 || dump_dir.empty())
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  if (!out_mu.empty()) cbx::cli::save_tensor_npy(out_mu, r.mu);
  if (!out_cond.empty()) cbx::cli::save_tensor_npy(out_cond, r.cond);
  if (!out_spks.empty()) cbx::cli::save_tensor_npy(out_spks, r.spks);
  std::printf(
      "prompt_tokens=%zu tokens=%zu frames=%lld prompt_frames=%lld threads=%d arena_mb=%.1f "
      "high_water_mb=%.1f",
      ptoks.size(), tokens.size(), (long long)r.n_frames, (long long)r.n_prompt_frames, threads,
      double(enc.arena_bytes()) / 1e6, double(enc.arena_high_water()) / 1e6);
  if (best_ms < 1e30) std::printf(" best_ms=%.1f", best_ms);
  std::printf("\n");
  for (size_t i = 1; i < marks.size(); ++i)
    std::printf("  %-34s %8.2f ms\n", marks[i].first.c_str(),
                std::chrono::duration<double, std::milli>(marks[i].second - marks[i - 1].second).count());
  return 0;
}

cbx::cli::RegisterCommand reg("debug-flow", "run the S3Gen flow encoder on tokens, write mu/cond/spks .npy (parity)",
                              run);

}  // namespace
