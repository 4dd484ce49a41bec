// chatterbox debug t3: runs T3 Turbo on given ids and writes the raw logits of every sampled
// position and the tokens as .npy, for parity tests against the PyTorch reference.
// Also registers `debug`, which forwards `chatterbox debug NAME ...` to the command
// `debug-NAME` (so `debug t3` and `debug frontend` both work).
#include <algorithm>
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
#include "models/t3_turbo.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug t3 -m MODEL.gguf --text-ids IN.npy [options]\n"
    "  (Turbo/Nano; on a Multilingual model this runs `chatterbox debug t3-mtl`, see its --help)\n"
    "  --text-ids F        int32/int64 .npy [Lt] or [1, Lt]: GPT-2 BPE ids\n"
    "  --speaker-emb F     float32 .npy [S] or [1, S] (default: the GGUF's voice.speaker_emb)\n"
    "  --prompt-tokens F   int .npy [P] or [1, P] (default: voice.cond_prompt_tokens)\n"
    "  --steps N           decode steps after the prefill token (default 50)\n"
    "  --out-logits F      float32 [n, speech_vocab]: raw logits of every sampled position\n"
    "  --out-tokens F      int32 [n]: the sampled tokens (trailing EOS removed, as upstream)\n"
    "  --out-speech-tokens F  int32: post-processed tokens (< 6561, + 3 x 4299)\n"
    "  --out-processed F   float32 [n, speech_vocab]: the logits after sampler steps 1-4\n"
    "  --dump-dir DIR      write the prefill's named intermediates as DIR/NAME[.LAYER].npy\n"
    "  --greedy            full processor chain, then argmax\n"
    "  --seed N            sampler seed (default 0)\n"
    "  --temperature T --top-k K --top-p P --rep-penalty R   (default: the GGUF's sampler.*)\n"
    "  --kv-type f16|f32   KV cache type (default f16)\n"
    "  -t, --threads N     (default 2)\n";

std::vector<int32_t> load_ids(const std::string& path) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::I32 || a.dtype == cbx::DType::I64, "debug t3: '%s' must hold int32/int64 ids",
            path.c_str());
  CBX_CHECK(a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1),
            "debug t3: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  std::vector<int32_t> out(size_t(a.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v = a.dtype == cbx::DType::I32 ? a.as<int32_t>()[i] : a.as<int64_t>()[i];
    CBX_CHECK(v >= 0 && v <= INT32_MAX, "debug t3: '%s' id %lld at %zu is out of range", path.c_str(), (long long)v, i);
    out[i] = int32_t(v);
  }
  return out;
}

std::vector<float> load_vec(const std::string& path) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::F32, "debug t3: '%s' must be float32", path.c_str());
  CBX_CHECK(a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1),
            "debug t3: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  return a.to_f32();
}

// Copies a (possibly strided) f32 [rows, cols] tensor into a .npy file.
// True when the -m/--model argument names a Multilingual GGUF (handled by debug-t3-mtl).
bool is_mtl_model(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "-m") || !std::strcmp(argv[i], "--model")) {
      auto f = cbx::GgufFile::open(argv[i + 1]);
      const cbx::GgufValue* v = f->find("chatterbox.variant");
      return v && v->type == cbx::GgufType::STRING && v->as_string() == "mtl";
    }
  return false;
}

int run(int argc, char** argv) {
  if (is_mtl_model(argc, argv))
    for (const auto& c : cbx::cli::commands())
      if (!std::strcmp(c.name, "debug-t3-mtl")) return c.fn(argc, argv);
  std::string model, text_path, spk_path, prompt_path, out_logits, out_tokens, out_speech, out_processed, dump_dir;
  int64_t steps = 50;
  int threads = 2;
  bool greedy = false;
  uint64_t seed = 0;
  std::string kv = "f16";
  double temperature = -1, top_p = -1, rep = -1;
  int top_k = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug t3", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--text-ids")
      text_path = next();
    else if (a == "--speaker-emb")
      spk_path = next();
    else if (a == "--prompt-tokens")
      prompt_path = next();
    else if (a == "--steps")
      steps = cbx::cli::int_flag("--steps", next(), 0, 1073741824);
    else if (a == "--out-logits")
      out_logits = next();
    else if (a == "--out-tokens")
      out_tokens = next();
    else if (a == "--out-speech-tokens")
      out_speech = next();
    else if (a == "--out-processed")
      out_processed = next();
    else if (a == "--dump-dir")
      dump_dir = next();
    else if (a == "--greedy")
      greedy = true;
    else if (a == "--seed")
      seed = cbx::parse_u64("--seed", next());
    else if (a == "--temperature")
      temperature = cbx::parse_number("--temperature", next());
    else if (a == "--top-k")
      top_k = int(cbx::cli::int_flag("--top-k", next(), 0, 1073741824));
    else if (a == "--top-p")
      top_p = cbx::parse_number("--top-p", next());
    else if (a == "--rep-penalty")
      rep = cbx::parse_number("--rep-penalty", next());
    else if (a == "--kv-type")
      kv = next();
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug t3: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !text_path.empty(), "debug t3: -m and --text-ids are required\n%s", kUsage);
  CBX_CHECK(steps >= 0 && threads > 0, "debug t3: bad --steps or --threads");

  auto f = cbx::GgufFile::open(model);
  std::vector<int32_t> text = load_ids(text_path);
  std::vector<float> spk;
  if (!spk_path.empty())
    spk = load_vec(spk_path);
  else {
    cbx::Tensor t = f->tensor("voice.speaker_emb");
    CBX_CHECK(t.dtype == cbx::DType::F32, "debug t3: voice.speaker_emb must be f32");
    spk.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  std::vector<int32_t> prompt;
  if (!prompt_path.empty())
    prompt = load_ids(prompt_path);
  else {
    cbx::Tensor t = f->tensor("voice.cond_prompt_tokens");
    CBX_CHECK(t.dtype == cbx::DType::I32, "debug t3: voice.cond_prompt_tokens must be i32");
    prompt.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }

  cbx::ThreadPool pool(threads);
  cbx::T3TurboOptions o;
  o.max_text = std::max<int64_t>(1, int64_t(text.size()));
  o.max_prompt = std::max<int64_t>(1, int64_t(prompt.size()));
  o.max_new = steps;
  o.kv_type = cbx::dtype_from_name(kv.c_str());
  cbx::T3Turbo t3(*f, pool, o);
  cbx::SamplerParams sp = t3.default_sampler();
  if (temperature >= 0) sp.temperature = float(temperature);
  if (top_k >= 0) sp.top_k = top_k;
  if (top_p >= 0) sp.top_p = top_p;
  if (rep >= 0) sp.repetition_penalty = float(rep);
  sp.greedy = greedy;
  sp.seed = seed;

  if (!dump_dir.empty()) {
    t3.backbone().set_capture([&](const char* name, int layer, const cbx::Tensor& t) {
      std::string p = dump_dir + "/" + name;
      if (layer >= 0) p += '.' + std::to_string(layer);
      p += ".npy";
      cbx::cli::save_tensor_npy(p, t);
    });
  }
  const int64_t V = t3.config().t3.speech_vocab;
  std::vector<float> logits;
  logits.reserve(size_t((steps + 1) * V));
  int64_t n_pos = 0;
  std::vector<float> processed;
  if (!out_processed.empty()) processed.reserve(size_t((steps + 1) * V));
  auto on_step = [&](int64_t step, const float* lg, const float* pr, int32_t) {
    if (step == 0 && !dump_dir.empty()) t3.backbone().set_capture(nullptr);  // prefill only
    logits.insert(logits.end(), lg, lg + V);
    if (!out_processed.empty()) processed.insert(processed.end(), pr, pr + V);
    ++n_pos;
  };
  cbx::T3TurboResult r = t3.generate(text.data(), int64_t(text.size()), spk.data(), int64_t(spk.size()), prompt.data(),
                                     int64_t(prompt.size()), sp, steps, on_step);
  if (!out_logits.empty()) cbx::npy_save_f32(out_logits, {n_pos, V}, logits.data());
  if (!out_processed.empty()) cbx::npy_save_f32(out_processed, {n_pos, V}, processed.data());
  if (!out_tokens.empty()) cbx::npy_save(out_tokens, cbx::DType::I32, {int64_t(r.tokens.size())}, r.tokens.data());
  if (!out_speech.empty())
    cbx::npy_save(out_speech, cbx::DType::I32, {int64_t(r.speech_tokens.size())}, r.speech_tokens.data());
  const double tok_s = r.n_decode > 0 ? 1000.0 * double(r.n_decode) / r.decode_ms : 0.0;
  std::printf(
      "prompt_len=%lld tokens=%zu speech_tokens=%zu stopped_eos=%d stopped_all_inf=%d "
      "prefill_ms=%.1f decode_steps=%lld tok_s=%.2f\n",
      (long long)r.prompt_len, r.tokens.size(), r.speech_tokens.size(), int(r.stopped_eos), int(r.stopped_all_inf),
      r.prefill_ms, (long long)r.n_decode, tok_s);
  return 0;
}

// `chatterbox debug NAME ...` -> the command `debug-NAME`.
int run_debug(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("usage: chatterbox debug NAME [options]   (runs the command debug-NAME)\n  available:");
    for (const auto& c : cbx::cli::commands())
      if (!std::strncmp(c.name, "debug-", 6)) std::printf(" %s", c.name + 6);
    std::printf("\n");
    return argc < 2 ? 1 : 0;
  }
  const std::string want = std::string("debug-") + argv[1];
  for (const auto& c : cbx::cli::commands())
    if (want == c.name) return c.fn(argc - 1, argv + 1);
  cbx::fail("debug: no debug command '%s' (try 'chatterbox debug --help')", argv[1]);
}

cbx::cli::RegisterCommand reg("debug-t3", "run T3 Turbo on ids, write logits/tokens .npy (parity)", run);
cbx::cli::RegisterCommand reg_debug("debug", "debug NAME ...: runs debug-NAME (t3, frontend, ...)", run_debug, true);

}  // namespace
