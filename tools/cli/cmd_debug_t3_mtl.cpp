// chatterbox debug t3-mtl (also reached as `chatterbox debug t3` on an mtl model): runs the
// Multilingual T3 on given ids and writes the conditioning tokens, the raw cond/uncond logits,
// the CFG-combined and processed logits of every sampled step and the tokens as .npy, for
// parity tests against tests/t3_mtl_reference.py. Prints timing figures.
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
#include "models/model_config.h"
#include "models/t3_mtl.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug t3 -m MTL_MODEL.gguf --text-ids IN.npy [options]\n"
    "  --text-ids F        int32/int64 .npy [Lt] or [1, Lt]: MTL tokenizer ids (no SOT/EOT)\n"
    "  --speaker-emb F     float32 .npy [S] or [1, S] (default: the GGUF's voice.speaker_emb)\n"
    "  --prompt-tokens F   int .npy [P] or [1, P] (default: voice.cond_prompt_tokens; 'none' = no "
    "prompt)\n"
    "  --exaggeration X    emotion_adv (default: the GGUF's pipeline.exaggeration)\n"
    "  --steps N           most tokens to sample (default 50); stops at EOS unless --force\n"
    "  --force             ignore EOS: sample exactly --steps tokens (benchmark)\n"
    "  --out-cond F        float32 [n_cond, d]: the conditioning tokens\n"
    "  --out-logits F      float32 [n, B, speech_vocab]: raw logits (row 0 cond, row 1 uncond when "
    "B = 2)\n"
    "  --out-guided F      float32 [n, speech_vocab]: cond + w (cond - uncond)\n"
    "  --out-processed F   float32 [n, speech_vocab]: after repetition, temperature, min-p, top-p\n"
    "  --out-tokens F      int32 [n]: the sampled tokens (EOS kept, as upstream)\n"
    "  --greedy            full processor chain, then argmax\n"
    "  --seed N            sampler seed (default 0)\n"
    "  --cfg-weight W --temperature T --min-p M --top-p P --rep-penalty R   (default: the GGUF's)\n"
    "  --kv-type f16|f32   KV cache type (default f16)\n"
    "  -t, --threads N     (default 2)\n";

std::vector<int32_t> load_ids(const std::string& path) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::I32 || a.dtype == cbx::DType::I64, "debug t3-mtl: '%s' must hold int32/int64 ids",
            path.c_str());
  CBX_CHECK(a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1),
            "debug t3-mtl: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  std::vector<int32_t> out(size_t(a.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v = a.dtype == cbx::DType::I32 ? a.as<int32_t>()[i] : a.as<int64_t>()[i];
    CBX_CHECK(v >= 0 && v <= INT32_MAX, "debug t3-mtl: '%s' id %lld at %zu is out of range", path.c_str(), (long long)v,
              i);
    out[i] = int32_t(v);
  }
  return out;
}

int run(int argc, char** argv) {
  std::string model, text_path, spk_path, prompt_path, out_cond, out_logits, out_guided, out_processed, out_tokens;
  int64_t steps = 50;
  int threads = 2;
  bool greedy = false, force = false;
  uint64_t seed = 0;
  std::string kv = "f16";
  double cfg_w = -1e30, temperature = -1, min_p = -1, top_p = -1, rep = -1, exaggeration = -1e30;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug t3-mtl", argc, argv, i); };
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
    else if (a == "--exaggeration")
      exaggeration = cbx::parse_number("--exaggeration", next());
    else if (a == "--steps")
      steps = cbx::cli::int_flag("--steps", next(), 0, 1073741824);
    else if (a == "--force")
      force = true;
    else if (a == "--out-cond")
      out_cond = next();
    else if (a == "--out-logits")
      out_logits = next();
    else if (a == "--out-guided")
      out_guided = next();
    else if (a == "--out-processed")
      out_processed = next();
    else if (a == "--out-tokens")
      out_tokens = next();
    else if (a == "--greedy")
      greedy = true;
    else if (a == "--seed")
      seed = cbx::parse_u64("--seed", next());
    else if (a == "--cfg-weight")
      cfg_w = cbx::parse_number("--cfg-weight", next());
    else if (a == "--temperature")
      temperature = cbx::parse_number("--temperature", next());
    else if (a == "--min-p")
      min_p = cbx::parse_number("--min-p", next());
    else if (a == "--top-p")
      top_p = cbx::parse_number("--top-p", next());
    else if (a == "--rep-penalty")
      rep = cbx::parse_number("--rep-penalty", next());
    else if (a == "--kv-type")
      kv = next();
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else
      cbx::fail("debug t3-mtl: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !text_path.empty(), "debug t3-mtl: -m and --text-ids are required\n%s", kUsage);
  CBX_CHECK(steps >= 1 && threads > 0, "debug t3-mtl: --steps must be >= 1 and --threads > 0");

  auto f = cbx::GgufFile::open(model);
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  CBX_CHECK(cfg.variant == cbx::Variant::Mtl, "debug t3-mtl: '%s' is a %s model, not mtl", model.c_str(),
            cbx::variant_name(cfg.variant));
  cbx::T3MtlCond cond;
  cond.exaggeration = exaggeration > -1e29 ? float(exaggeration) : cfg.pipeline.exaggeration;
  std::vector<int32_t> text = load_ids(text_path);
  if (!spk_path.empty()) {
    cbx::NpyArray a = cbx::npy_load(spk_path);
    CBX_CHECK(a.dtype == cbx::DType::F32, "debug t3-mtl: '%s' must be float32", spk_path.c_str());
    cond.speaker_emb = a.to_f32();
  } else {
    cbx::Tensor t = f->tensor("voice.speaker_emb");
    CBX_CHECK(t.dtype == cbx::DType::F32, "debug t3-mtl: voice.speaker_emb must be f32");
    cond.speaker_emb.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  if (prompt_path == "none") {
  } else if (!prompt_path.empty()) {
    cond.cond_prompt_tokens = load_ids(prompt_path);
  } else {
    cbx::Tensor t = f->tensor("voice.cond_prompt_tokens");
    CBX_CHECK(t.dtype == cbx::DType::I32, "debug t3-mtl: voice.cond_prompt_tokens must be i32");
    cond.cond_prompt_tokens.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }

  cbx::ThreadPool pool(threads);
  cbx::T3MtlLoadParams lp;
  lp.kv_type = cbx::dtype_from_name(kv.c_str());
  lp.max_new_tokens = steps;
  lp.max_text_tokens = std::max<int64_t>(1, int64_t(text.size()));
  cbx::T3Mtl t3(*f, cfg, pool, lp);
  cbx::T3MtlSampling s = t3.default_sampling();
  if (cfg_w > -1e29) s.cfg_weight = float(cfg_w);
  if (temperature >= 0) s.temperature = float(temperature);
  if (min_p >= 0) s.min_p = float(min_p);
  if (top_p >= 0) s.top_p = float(top_p);
  if (rep >= 0) s.repetition_penalty = float(rep);
  s.greedy = greedy;
  s.seed = seed;

  const int64_t d = cfg.t3.n_embd, V = cfg.t3.speech_vocab;
  if (!out_cond.empty()) {
    std::vector<float> c = t3.cond_embeddings(cond);
    cbx::npy_save_f32(out_cond, {int64_t(c.size()) / d, d}, c.data());
  }
  std::vector<float> logits, guided, processed;
  int64_t n_rows = 1, n_pos = 0;
  t3.set_step_callback([&](const cbx::T3MtlStep& st) {
    n_rows = st.uncond ? 2 : 1;
    if (!out_logits.empty()) {
      logits.insert(logits.end(), st.cond, st.cond + V);
      if (st.uncond) logits.insert(logits.end(), st.uncond, st.uncond + V);
    }
    if (!out_guided.empty()) guided.insert(guided.end(), st.guided, st.guided + V);
    if (!out_processed.empty()) processed.insert(processed.end(), st.processed, st.processed + V);
    ++n_pos;
  });
  cbx::T3MtlStats stats;
  std::vector<int32_t> tokens = t3.generate(cond, text, s, &stats, nullptr, force ? steps : -1);
  if (!out_logits.empty()) cbx::npy_save_f32(out_logits, {n_pos, n_rows, V}, logits.data());
  if (!out_guided.empty()) cbx::npy_save_f32(out_guided, {n_pos, V}, guided.data());
  if (!out_processed.empty()) cbx::npy_save_f32(out_processed, {n_pos, V}, processed.data());
  if (!out_tokens.empty()) cbx::npy_save(out_tokens, cbx::DType::I32, {int64_t(tokens.size())}, tokens.data());
  const double tok_s = stats.n_decode > 0 ? 1000.0 * double(stats.n_decode) / stats.decode_ms : 0.0;
  const double ms_step = stats.n_decode > 0 ? stats.decode_ms / double(stats.n_decode) : 0.0;
  const double gbs = ms_step > 0 ? (stats.weight_bytes_per_step + stats.kv_bytes_per_step) / (ms_step * 1e6) : 0.0;
  std::printf(
      "prompt_len=%lld rows=%lld tokens=%zu hit_limit=%d prefill_ms=%.1f decode_steps=%lld "
      "tok_s=%.2f "
      "ms_per_step=%.2f weight_mb_per_step=%.1f kv_mb_per_step=%.1f read_gb_s=%.2f\n",
      (long long)stats.prompt_len, (long long)stats.n_rows, tokens.size(), int(stats.hit_limit), stats.prefill_ms,
      (long long)stats.n_decode, tok_s, ms_step, stats.weight_bytes_per_step / 1e6, stats.kv_bytes_per_step / 1e6, gbs);
  return 0;
}

cbx::cli::RegisterCommand reg("debug-t3-mtl", "run T3 Multilingual on ids, write cond/logits/tokens .npy (parity)",
                              run);

}  // namespace
