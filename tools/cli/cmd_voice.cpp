// chatterbox voice create REF -m MODEL.gguf -o NAME.voice: reference audio -> saved conditionals.
// chatterbox voice info NAME.voice [-m MODEL.gguf]: what a .voice holds (and whether it fits a model).
// chatterbox voice list DIR: the .voice files in DIR, one a line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/npy.h"
#include "core/output_file.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "pipeline/synth_options.h"
#include "pipeline/voice.h"

namespace {

const char* kUsage =
    "usage: chatterbox voice create REF -m MODEL.gguf -o NAME.voice [options]\n"
    "       chatterbox voice info NAME.voice|MODEL.gguf [-m MODEL.gguf]\n"
    "       chatterbox voice list DIR\n"
    "  create: builds the conditionals (speaker embeddings, prompt tokens, prompt mel) from the reference\n"
    "  recording REF (WAV/FLAC/OGG/MP3..., any rate, mono or stereo) exactly as upstream\n"
    "  prepare_conditionals does for the model's variant, and saves them as a small GGUF. `say --voice\n"
    "  NAME.voice` then gives the same audio as `say --voice REF`. Turbo needs more than 5 s of reference.\n"
    "  -m, --model F          GGUF from `chatterbox convert` (its voice encoder, CAMPPlus, S3 tokenizer)\n"
    "  -o, --output F         the .voice file to write\n"
    "  -t, --threads N        1 .. 1024 (default: the CPUs this process may use: affinity, cgroup quota)\n"
    "  --exaggeration X       emotion_adv stored in the voice, 0 .. 100 (default: the model's, Turbo 0 /\n"
    "                         MTL 0.5)\n"
    "  --no-norm-loudness     Turbo: skip the -27 LUFS loudness normalisation (upstream norm_loudness=False)\n"
    "  --max-seconds S        decode at most S s of the reference (10 .. 600, default 30)\n"
    "  -v, --verbose          per-stage timings\n"
    "  -q, --quiet            no progress line (shown on stderr when it is a terminal; CBX_PROGRESS=1\n"
    "                         forces it on) and no summary line\n"
    "  --dump-dir D           also write the intermediate signals (ref24, ref16, t3_16, s3gen_24, s3gen_16)\n"
    "                         and the voice tensors as .npy files into D (parity tests)\n"
    "  info: prints the voice's variant, source, sizes and loudness (of a model GGUF: its built-in\n"
    "  voice); with -m also checks that the model can use it (exit 1 if not).\n"
    "  list: one line per .voice file in DIR: name, variant, reference seconds, prompt tokens, size\n"
    "  and source recording; files that cannot be read are listed with the reason.\n";

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void print_voice(const cbx::Voice& v) {
  std::printf("variant:            %s\n", cbx::variant_name(v.variant));
  std::printf("source:             %s\n", v.source.c_str());
  std::printf("built with model:   %s\n", v.model.empty() ? "-" : v.model.c_str());
  if (v.source_sample_rate > 0) {
    std::printf("source audio:       %d Hz, %d channel(s), %lld samples (%.2f s decoded)\n", v.source_sample_rate,
                v.source_channels, (long long)v.source_samples, double(v.source_samples) / v.source_sample_rate);
    std::printf("reference used:     %.2f s at 24 kHz; T3 prompt from %.2f s at 16 kHz; S3Gen from %.2f s\n",
                double(v.ref_samples) / 24000.0, double(v.t3_samples) / 16000.0, double(v.s3gen_samples) / 24000.0);
  }
  if (std::isfinite(v.loudness_lufs))
    std::printf("loudness:           %.2f LUFS, gain %.4f (%+.2f dB)\n", double(v.loudness_lufs),
                double(v.loudness_gain), 20.0 * std::log10(double(v.loudness_gain)));
  std::printf("emotion_adv:        %g\n", double(v.emotion_adv));
  std::printf("speaker_emb:        [%zu]\n", v.speaker_emb.size());
  std::printf("cond_prompt_tokens: [%zu] (%.2f s of speech tokens)\n", v.cond_prompt_tokens.size(),
              double(v.cond_prompt_tokens.size()) / 25.0);
  std::printf("prompt_token:       [%zu]\n", v.prompt_token.size());
  std::printf("prompt_feat:        [%lld, %d]\n", (long long)v.n_prompt_frames(), v.mel_dim);
  std::printf("embedding:          [%zu]\n", v.embedding.size());
}

int voice_create(int argc, char** argv) {
  std::string ref, model, out, dump;
  int64_t threads = cbx::available_cpus();
  bool verbose = false, quiet = false;
  cbx::VoiceBuildOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      CBX_CHECK(i + 1 < argc, "voice create: %s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "-o" || a == "--output")
      out = next();
    else if (a == "-t" || a == "--threads") {
      threads = cbx::parse_int(a, next());
      cbx::check_param(cbx::param::kThreads, double(threads));
    } else if (a == "--exaggeration") {
      const double x = cbx::parse_number(a, next());
      cbx::check_param(cbx::param::kExaggeration, x);
      o.exaggeration = float(x);
    } else if (a == "--no-norm-loudness")
      o.norm_loudness = false;
    else if (a == "--max-seconds") {
      o.max_seconds = cbx::parse_number(a, next());
      cbx::check_param(cbx::param::kVoiceMaxSeconds, o.max_seconds);
    } else if (a == "-v" || a == "--verbose")
      verbose = true;
    else if (a == "-q" || a == "--quiet")
      quiet = true;
    else if (a == "--dump-dir")
      dump = next();
    else if (a.size() > 1 && a[0] == '-')
      cbx::fail("voice create: unknown option '%s'\n%s", a.c_str(), kUsage);
    else {
      CBX_CHECK(ref.empty(), "voice create: more than one reference file ('%s', '%s')", ref.c_str(), a.c_str());
      ref = a;
    }
  }
  CBX_CHECK(!ref.empty(), "voice create: no reference audio file\n%s", kUsage);
  CBX_CHECK(!model.empty(), "voice create: -m MODEL.gguf is required");
  CBX_CHECK(!out.empty(), "voice create: -o NAME.voice is required");
  if (const auto w = cbx::thread_count_warning(threads)) cbx::cli::warn("voice create", "%s", w->c_str());
  CBX_CHECK(!cbx::is_gguf_file(ref), "voice create: '%s' is a GGUF file, not reference audio", ref.c_str());

  // Before the work: the output must not be the model or the reference, and must be writable.
  cbx::OutputFile out_file(out, {{"model", model}, {"reference audio", ref}});
  cbx::cli::ProgressLine line("voice create", cbx::cli::progress_wanted(quiet));
  line.update("loading " + model);
  const double t0 = now_ms();
  std::unique_ptr<cbx::GgufFile> f = cbx::GgufFile::open(model);
  const cbx::ModelConfig c = cbx::read_config(*f);
  cbx::ThreadPool pool(static_cast<int>(threads));
  cbx::VoiceBuilder builder(*f, c, pool, o);
  const double load_ms = now_ms() - t0;
  if (line.on())
    builder.set_progress([&](const cbx::ProgressEvent& e) { line.update(e.stage, e.done, e.total, e.item); });
  if (!dump.empty())
    builder.set_capture([&](const std::string& name, const float* x, int64_t n) {
      cbx::npy_save(dump + "/" + name + ".npy", cbx::DType::F32, {n}, x);
    });
  cbx::VoiceBuildTimings tm;
  std::vector<std::string> warnings;
  cbx::Voice v = builder.build(ref, &tm, &warnings);
  line.finish();
  if (!dump.empty()) {
    auto f32 = [&](const char* name, const std::vector<float>& x, std::vector<int64_t> shape) {
      cbx::npy_save(dump + "/" + name + ".npy", cbx::DType::F32, shape, x.data());
    };
    auto i32 = [&](const char* name, const std::vector<int32_t>& x) {
      cbx::npy_save(dump + "/" + name + ".npy", cbx::DType::I32, {int64_t(x.size())}, x.data());
    };
    f32("speaker_emb", v.speaker_emb, {int64_t(v.speaker_emb.size())});
    i32("cond_prompt_tokens", v.cond_prompt_tokens);
    i32("prompt_token", v.prompt_token);
    f32("prompt_feat", v.prompt_feat, {v.n_prompt_frames(), int64_t(v.mel_dim)});
    f32("embedding", v.embedding, {int64_t(v.embedding.size())});
  }
  for (const std::string& w : warnings) cbx::cli::warn("voice create", "%s", w.c_str());
  cbx::save_voice(v, out_file);
  if (!quiet)
    std::fprintf(stderr, "voice create: %s -> %s (%s voice, %.2f s reference, %zu + %zu prompt tokens)\n", ref.c_str(),
                 out.c_str(), cbx::variant_name(v.variant), double(v.ref_samples) / 24000.0,
                 v.cond_prompt_tokens.size(), v.prompt_token.size());
  if (verbose)
    std::fprintf(stderr,
                 "voice create: load_ms=%.1f decode_ms=%.1f resample_24k_ms=%.1f loudness_ms=%.1f "
                 "resample_16k_ms=%.1f resample_sinc_ms=%.1f s3gen_mel_ms=%.1f ve_ms=%.1f campplus_ms=%.1f "
                 "s3tok_t3_ms=%.1f s3tok_s3gen_ms=%.1f clone_ms=%.1f\n",
                 load_ms, tm.decode_ms, tm.resample_24k_ms, tm.loudness_ms, tm.resample_16k_ms, tm.resample_sinc_ms,
                 tm.s3gen_mel_ms, tm.ve_ms, tm.campplus_ms, tm.s3tok_t3_ms, tm.s3tok_s3gen_ms, tm.total_ms);
  return 0;
}

int voice_info(int argc, char** argv) {
  std::string path, model;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      CBX_CHECK(i + 1 < argc, "voice info: %s needs a value", a.c_str());
      model = argv[++i];
    } else if (a.size() > 1 && a[0] == '-') {
      cbx::fail("voice info: unknown option '%s'", a.c_str());
    } else {
      CBX_CHECK(path.empty(), "voice info: more than one file");
      path = a;
    }
  }
  CBX_CHECK(!path.empty(), "voice info: no .voice file\n%s", kUsage);
  cbx::Voice v;
  {
    // A model GGUF: its built-in voice.
    std::unique_ptr<cbx::GgufFile> f = cbx::GgufFile::open(path);
    const cbx::GgufValue* arch = f->find("general.architecture");
    if (arch && arch->type == cbx::GgufType::STRING && arch->as_string() == "chatterbox")
      v = cbx::builtin_voice(*f, cbx::read_config(*f));
    else
      v = cbx::voice_from_gguf(*f);
  }
  print_voice(v);
  if (!model.empty()) {
    std::unique_ptr<cbx::GgufFile> f = cbx::GgufFile::open(model);
    cbx::check_voice(v, cbx::read_config(*f), path);
    std::printf("model %s: compatible\n", model.c_str());
  }
  return 0;
}

// One line per *.voice file of a directory, sorted by name, under a header. A file that cannot be
// read is listed with the reason; the exit status is 0 all the same (the listing worked).
int voice_list(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string dir;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      cbx::fail("voice list: unknown option '%s'", a.c_str());
    } else {
      CBX_CHECK(dir.empty(), "voice list: give one directory ('%s', '%s')", dir.c_str(), a.c_str());
      dir = a;
    }
  }
  CBX_CHECK(!dir.empty(), "voice list: no directory\n%s", kUsage);
  std::error_code ec;
  CBX_CHECK(fs::is_directory(dir, ec), "voice list: '%s' is not a directory%s%s", dir.c_str(), ec ? ": " : "",
            ec ? ec.message().c_str() : "");
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".voice") files.push_back(it->path());
  CBX_CHECK(!ec, "voice list: cannot read '%s': %s", dir.c_str(), ec.message().c_str());
  if (files.empty()) {
    std::printf("no .voice files in %s\n", dir.c_str());
    return 0;
  }
  std::sort(files.begin(), files.end());
  size_t width = 4;
  for (const fs::path& p : files) width = std::max(width, p.stem().string().size());
  std::printf("%-*s  %-7s  %8s  %13s  %9s  %s\n", int(width), "NAME", "VARIANT", "REF (s)", "PROMPT TOKENS", "SIZE",
              "SOURCE");
  for (const fs::path& p : files) {
    const std::string name = p.stem().string();
    try {
      const cbx::Voice v = cbx::load_voice(p.string());
      cbx::validate_voice(v, p.string());
      const uintmax_t bytes = fs::file_size(p, ec);
      char size[32] = "?";
      if (!ec) std::snprintf(size, sizeof size, "%.1f kB", double(bytes) / 1e3);
      const std::string tokens =
          std::to_string(v.cond_prompt_tokens.size()) + " + " + std::to_string(v.prompt_token.size());
      std::printf("%-*s  %-7s  %8.2f  %13s  %9s  %s\n", int(width), name.c_str(), cbx::variant_name(v.variant),
                  double(v.ref_samples) / 24000.0, tokens.c_str(), size, v.source.c_str());
    } catch (const std::exception& e) {
      std::printf("%-*s  unreadable: %s\n", int(width), name.c_str(), e.what());
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  const std::string sub = argc > 1 ? argv[1] : "";
  if (sub == "create") return voice_create(argc, argv);
  if (sub == "info") return voice_info(argc, argv);
  if (sub == "list") return voice_list(argc, argv);
  if (sub == "-h" || sub == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  CBX_CHECK(!sub.empty(), "voice: give a subcommand, create, info or list\n%s", kUsage);
  cbx::fail("voice: unknown subcommand '%s' (create, info or list)\n%s", sub.c_str(), kUsage);
}

cbx::cli::RegisterCommand reg("voice", "reference audio -> .voice conditionals (voice create / info / list)", run,
                              true);

}  // namespace
