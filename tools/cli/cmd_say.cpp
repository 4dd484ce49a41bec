// chatterbox say: text -> speech with a Turbo / Nano or Multilingual GGUF (dispatches on the variant).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "audio/audio_file.h"
#include "command.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/gguf.h"
#include "models/model_config.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/prefix_cache.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace {

const char* kUsage =
    "usage: chatterbox say -m MODEL.gguf [--lang L] [TEXT] -o OUT.wav [options]   (-- TEXT for text starting with '-')\n"
    "  Synthesises TEXT (UTF-8) with a Turbo, Nano or Multilingual model and its built-in voice, 24 kHz mono.\n"
    "  Without TEXT the text is read from --file F, or else from stdin.\n"
    "  -m, --model F           GGUF from `chatterbox convert` (turbo, nano or mtl variant)\n"
    "  --lang L                language code (Multilingual: required, see `chatterbox languages -m F`;\n"
    "                          Turbo/Nano speak English only: en)\n"
    "  -o, --output F          16-bit PCM WAV; '-' writes raw 16-bit little-endian PCM to stdout,\n"
    "                          chunk by chunk as each text chunk finishes\n"
    "  --file F                read the text from F\n"
    "  --voice F               speak with a cloned voice: NAME.voice (`chatterbox voice create`) or a\n"
    "                          reference recording (built on the fly; same audio as its .voice)\n"
    "  --seed N                sampler / CFM noise / vocoder seed (default 0); same seed, same audio\n"
    "  --temperature T         (default: the model's, 0.8)\n"
    "  --top-k K               Turbo only (default 1000; 0 disables)\n"
    "  --top-p P               (default: Turbo 0.95, Multilingual 1.0)\n"
    "  --repetition-penalty R  (default 1.2)\n"
    "  --min-p P               Multilingual only (default 0.05)\n"
    "  --cfg-weight W          Multilingual only: T3 classifier-free guidance (default 0.5)\n"
    "  --exaggeration X        Multilingual only: emotion exaggeration (default 0.5)\n"
    "  --threads N             (default: all hardware threads)\n"
    "  --kv-type f16|f32       T3 KV cache type (default f16)\n"
    "  --no-repack             keep Q4_0 / Q8_0 weights in the GGUF layout only: no decode copies\n"
    "                          (Q8_0 Turbo: ~330 MB less memory), a slower T3 decode, the same audio\n"
    "  --prompt-cache F        Turbo only: keep the voice's T3 prefix (keys/values of the speaker and\n"
    "                          prompt tokens, ~37 MB for the built-in voice) in F; later runs with the\n"
    "                          same model, voice and CPU kernels load it instead of computing it\n"
    "                          (~1 s on 2 cores). F is rewritten when it holds another voice or model.\n"
    "  --max-tokens N          speech tokens per generation (default: the model's, 1000 ~ 40 s)\n"
    "  --chunk-tokens N        text tokens per chunk of long text (default: Turbo 80, Multilingual 150)\n"
    "  -v, --verbose           per-stage timings on stderr\n"
    "Long text is split at sentence boundaries (then clauses, then words) into chunks that fit one\n"
    "generation; each chunk is synthesised and the audio joined. A chunk that reaches the speech-token\n"
    "limit without ending is reported on stderr.\n"
    "Note: upstream Chatterbox watermarks its output with Perth; that watermark is NOT ported, so this\n"
    "audio carries no watermark.\n";

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

// --voice: a .voice file (`saved`, read and checked before the model loads) or reference audio
// (built with the pipeline's networks), set on the pipeline (Turbo or Multilingual).
template <typename Pipeline>
void use_voice(Pipeline& pipe, const std::string& path, const cbx::Voice* saved, bool verbose) {
  if (path.empty()) return;
  const double t0 = now_ms();
  std::vector<std::string> warnings;
  cbx::Voice v = saved ? *saved
                       : cbx::load_or_build_voice(path, pipe.gguf(), pipe.config(), pipe.pool(), {}, nullptr, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "say: warning: %s\n", w.c_str());
  pipe.set_voice(v, path);
  if (verbose)
    std::fprintf(stderr, "say: voice %s (%s, from %s) ready in %.0f ms\n", path.c_str(), cbx::variant_name(v.variant),
                 v.source.c_str(), now_ms() - t0);
}

int run(int argc, char** argv) {
  std::string model, out, text, file, voice_path, prompt_cache;
  bool have_text = false, verbose = false;
  cbx::TurboLoadParams lp;
  cbx::TurboSynthParams sp;
  cbx::MtlSynthParams mp;  // Multilingual-only fields (the shared ones are copied from sp)
  bool have_lang = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      CBX_CHECK(i + 1 < argc, "say: %s needs a value", a.c_str());
      return argv[++i];
    };
    auto num = [&](const std::string& v) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      CBX_CHECK(end && *end == '\0' && !v.empty() && std::isfinite(d), "say: %s: '%s' is not a number", a.c_str(),
                v.c_str());
      return d;
    };
    if (a == "--" && i + 1 < argc) {  // the rest is text (for text starting with '-')
      CBX_CHECK(!have_text && i + 2 == argc, "say: give one text argument after --");
      text = argv[++i];
      have_text = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") model = next();
    else if (a == "-o" || a == "--output") out = next();
    else if (a == "--file") file = next();
    else if (a == "--voice") voice_path = next();
    else if (a == "--prompt-cache") prompt_cache = next();
    else if (a == "--seed") sp.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--temperature") sp.temperature = float(num(next()));
    else if (a == "--top-k") sp.top_k = int32_t(num(next()));
    else if (a == "--top-p") sp.top_p = num(next());
    else if (a == "--repetition-penalty") sp.repetition_penalty = float(num(next()));
    else if (a == "--lang" || a == "--language") mp.language = next(), have_lang = true;
    else if (a == "--min-p") mp.min_p = float(num(next()));
    else if (a == "--cfg-weight") mp.cfg_weight = float(num(next()));
    else if (a == "--exaggeration") mp.exaggeration = float(num(next()));
    else if (a == "--threads") lp.n_threads = int(num(next()));
    else if (a == "--kv-type") {
      const std::string k = next();
      CBX_CHECK(k == "f16" || k == "f32", "say: --kv-type must be f16 or f32, got '%s'", k.c_str());
      lp.kv_type = k == "f16" ? cbx::DType::F16 : cbx::DType::F32;
    } else if (a == "--no-repack") lp.repack = false;
    else if (a == "--max-tokens") lp.max_new_tokens = int64_t(num(next()));
    else if (a == "--chunk-tokens") sp.max_chunk_tokens = int64_t(num(next()));
    else if (a == "-v" || a == "--verbose") verbose = true;
    else if (a.size() > 1 && a[0] == '-') cbx::fail("say: unknown option '%s'\n%s", a.c_str(), kUsage);
    else {
      CBX_CHECK(!have_text, "say: more than one text argument (quote the text)");
      text = a;
      have_text = true;
    }
  }
  CBX_CHECK(!model.empty(), "say: -m MODEL.gguf is required\n%s", kUsage);
  CBX_CHECK(!out.empty(), "say: -o OUT.wav (or -o - for raw PCM on stdout) is required");
  CBX_CHECK(lp.n_threads >= 0 && lp.max_new_tokens >= -1 && sp.max_chunk_tokens >= 0,
            "say: --threads, --max-tokens and --chunk-tokens must not be negative");
  CBX_CHECK(!(have_text && !file.empty()), "say: give the text as an argument or with --file, not both");

  // Outputs are checked and prepared before any work (reading stdin, loading the model,
  // synthesis): an output that is an input, or that cannot be written, fails now.
  const bool to_stdout = out == "-";
  const std::vector<cbx::OutputInput> inputs = {{"model", model}, {"voice", voice_path}, {"text file", file}};
  std::unique_ptr<cbx::OutputFile> out_file;
  if (!to_stdout) out_file = std::make_unique<cbx::OutputFile>(out, inputs);
  if (!prompt_cache.empty()) {
    try {
      CBX_CHECK(to_stdout || !(prompt_cache == out || cbx::same_file(prompt_cache, out_file->target())),
                "it is the audio output '%s'", out.c_str());
      cbx::check_prefix_cache_path(prompt_cache);
      cbx::OutputFile probe(prompt_cache, inputs, "prompt cache");  // writable? (discarded)
    } catch (const cbx::Error& e) {
      std::fprintf(stderr, "say: warning: --prompt-cache %s: %s; continuing without a prompt cache\n",
                   prompt_cache.c_str(), e.what());
      prompt_cache.clear();
    }
  }
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    CBX_CHECK(in, "say: cannot open '%s'", file.c_str());
    text = read_all(in);
  } else if (!have_text) {
    CBX_CHECK(!isatty(0), "say: no text (give it as an argument, with --file, or on stdin)");
    text = read_all(std::cin);
  }

  const cbx::ModelConfig cfg = cbx::read_config(*cbx::GgufFile::open(model));
  std::unique_ptr<cbx::Voice> saved_voice;  // a .voice fails fast, before the (long) model load
  if (!voice_path.empty() && cbx::is_gguf_file(voice_path)) {
    saved_voice = std::make_unique<cbx::Voice>(cbx::load_voice(voice_path));
    cbx::check_voice(*saved_voice, cfg, voice_path);
  }
  const bool mtl = cfg.variant == cbx::Variant::Mtl;
  if (mtl) {
    mp.language = cbx::check_mtl_language(cfg.languages, mp.language);  // before the (long) load
    if (sp.top_k >= 0) std::fprintf(stderr, "say: warning: --top-k is ignored by Multilingual models (no top-k)\n");
    CBX_CHECK(prompt_cache.empty(), "say: --prompt-cache is for Turbo models (%s is Multilingual: its T3 prefix "
              "depends on the text and language)", model.c_str());
  } else {
    CBX_CHECK(!have_lang || mp.language == "en",
              "say: %s is a %s model: it speaks English only (--lang en); '%s' needs a Multilingual model",
              model.c_str(), cbx::variant_name(cfg.variant), mp.language.c_str());
    for (const auto& [flag, v] : {std::pair{"--min-p", mp.min_p}, {"--cfg-weight", mp.cfg_weight},
                                  {"--exaggeration", mp.exaggeration}})
      if (v >= 0) std::fprintf(stderr, "say: warning: %s is ignored by Turbo models (as upstream)\n", flag);
  }

  cbx::SynthAudioFn on_audio;
  if (to_stdout)
    on_audio = [&](const float* s, int64_t n, int64_t, int64_t) {
      std::vector<uint8_t> b = cbx::encode_pcm16(s, size_t(n));
      CBX_CHECK(std::fwrite(b.data(), 1, b.size(), stdout) == b.size() && std::fflush(stdout) == 0,
                "say: writing PCM to stdout failed");
      return true;
    };
  cbx::SynthTimings tm;
  std::vector<float> audio;
  int sr = 0;
  int64_t max_new = 0;
  auto loaded = [&](int n_threads, double load_ms) {
    if (verbose)
      std::fprintf(stderr, "say: loaded %s (%s%s%s, %d threads) in %.0f ms; watermark: none (Perth not ported)\n",
                   model.c_str(), cbx::variant_name(cfg.variant), mtl ? ", language " : "",
                   mtl ? mp.language.c_str() : "", n_threads, load_ms);
  };
  const double t0 = now_ms();
  if (mtl) {
    cbx::MtlLoadParams ml;
    ml.n_threads = lp.n_threads;
    ml.kv_type = lp.kv_type;
    ml.repack = lp.repack;
    ml.max_new_tokens = lp.max_new_tokens;
    cbx::MtlPipeline pipe(model, ml);
    loaded(pipe.n_threads(), now_ms() - t0);
    use_voice(pipe, voice_path, saved_voice.get(), verbose);
    sr = pipe.sample_rate(), max_new = pipe.max_new_tokens();
    mp.seed = sp.seed;
    mp.temperature = sp.temperature;
    mp.top_p = float(sp.top_p);
    mp.repetition_penalty = sp.repetition_penalty;
    mp.max_chunk_tokens = sp.max_chunk_tokens;
    audio = pipe.synthesize(text, mp, &tm, on_audio);
  } else {
    cbx::TurboPipeline pipe(model, lp);
    loaded(pipe.n_threads(), now_ms() - t0);
    use_voice(pipe, voice_path, saved_voice.get(), verbose);
    sr = pipe.sample_rate(), max_new = pipe.max_new_tokens() + 1;
    bool cached = false;
    if (!prompt_cache.empty()) {
      const double tc = now_ms();
      std::string why;
      try {
        cached = pipe.load_prefix_cache(prompt_cache, &why);
      } catch (const cbx::Error& e) {  // not a cache (never overwritten), unreadable: speak anyway
        std::fprintf(stderr, "say: warning: %s; continuing without a prompt cache\n", e.what());
        prompt_cache.clear();
        why = "not used";
      }
      if (verbose)
        std::fprintf(stderr, "say: prompt cache %s: %s (%.0f ms)\n", prompt_cache.c_str(),
                     cached ? "voice prefix loaded" : ("not used, " + why + "; it will be written").c_str(),
                     now_ms() - tc);
    }
    audio = pipe.synthesize(text, sp, &tm, on_audio);
    // The audio first: a prompt cache that cannot be written costs a warning, never the WAV.
    if (out_file) {
      out_file->write(cbx::encode_wav_pcm16(audio.data(), audio.size(), sr));
      out_file->commit();
    }
    if (!prompt_cache.empty() && !cached) {
      const double tc = now_ms();
      try {
        pipe.save_prefix_cache(prompt_cache);
        if (verbose)
          std::fprintf(stderr, "say: prompt cache %s written (%.0f ms)\n", prompt_cache.c_str(), now_ms() - tc);
      } catch (const cbx::Error& e) {
        std::fprintf(stderr, "say: warning: the prompt cache was not written: %s\n", e.what());
      }
    }
  }
  if (out_file && !out_file->committed()) {
    out_file->write(cbx::encode_wav_pcm16(audio.data(), audio.size(), sr));
    out_file->commit();
  }

  if (tm.chunks_at_limit > 0)
    std::fprintf(stderr,
                 "say: warning: %lld of %lld text chunks reached the %lld speech-token limit without ending; "
                 "their speech may be cut (use a smaller --chunk-tokens)\n",
                 (long long)tm.chunks_at_limit, (long long)tm.n_chunks, (long long)max_new);
  if (verbose) {
    const double tok_s = tm.t3_decode_ms > 0 ? 1000.0 * double(tm.n_decode_steps) / tm.t3_decode_ms : 0.0;
    std::fprintf(stderr,
                 "say: chunks=%lld text_tokens=%lld speech_tokens=%lld samples=%lld audio_s=%.2f\n"
                 "say: text_ms=%.1f t3_prefill_ms=%.1f t3_decode_ms=%.1f t3_tok_s=%.1f flow_ms=%.1f cfm_ms=%.1f "
                 "hift_ms=%.1f total_ms=%.1f rtf=%.3f\n",
                 (long long)tm.n_chunks, (long long)tm.n_text_tokens, (long long)tm.n_speech_tokens,
                 (long long)tm.n_samples, tm.audio_s(), tm.text_ms, tm.t3_prefill_ms, tm.t3_decode_ms, tok_s,
                 tm.flow_ms, tm.cfm_ms, tm.hift_ms, tm.total_ms, tm.rtf());
  }
  return 0;
}

cbx::cli::RegisterCommand reg("say", "text -> speech WAV with a Turbo or Multilingual GGUF (no watermark)", run);

}  // namespace
