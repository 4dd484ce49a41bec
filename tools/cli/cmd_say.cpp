// chatterbox say: text -> speech with a Turbo / Nano or Multilingual GGUF (dispatches on the variant).
// Order of work: flags checked, model header read, outputs prepared (refused when they are
// inputs, created when new), then the text read, the model loaded and the speech made.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/output_file.h"
#include "models/model_config.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/prefix_cache.h"
#include "say_batch.h"
#include "say_engine.h"
#include "say_options.h"
#include "say_output.h"
#include "say_progress.h"

namespace {

using cbx::cli::SayOptions;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_text(const SayOptions& o) {
  if (o.have_text) return o.text;
  if (!o.file.empty() && o.file != "-") {
    std::ifstream in(o.file, std::ios::binary);
    CBX_CHECK(in, "cannot open the text file '%s'", o.file.c_str());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  CBX_CHECK(o.file == "-" || !isatty(0), "no text (give it as an argument, with -f FILE, or on stdin)");
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

// --prompt-cache: usable at all? Problems are warnings (the cache is an optimisation): the
// path is cleared and the speech made without it.
void check_prompt_cache(SayOptions& o, const std::vector<cbx::OutputInput>& inputs, const cbx::cli::AudioOutput* out) {
  if (o.prompt_cache.empty()) return;
  try {
    CBX_CHECK(!out || !(o.prompt_cache == o.out || cbx::same_file(o.prompt_cache, out->target())),
              "it is the audio output '%s'", o.out.c_str());
    cbx::check_prefix_cache_path(o.prompt_cache);
    cbx::OutputFile probe(o.prompt_cache, inputs, "prompt cache");  // writable? (discarded)
  } catch (const cbx::Error& e) {
    cbx::cli::warn("say", "--prompt-cache %s: %s; continuing without a prompt cache", o.prompt_cache.c_str(), e.what());
    o.prompt_cache.clear();
  }
}

int run(int argc, char** argv) {
  std::optional<SayOptions> parsed = cbx::cli::parse_say_options(argc, argv);
  if (!parsed) return 0;  // --help
  SayOptions& o = *parsed;
  const double t_start = now_ms();
  if (o.load.n_threads)
    if (auto w = cbx::thread_count_warning(*o.load.n_threads)) cbx::cli::warn("say", "%s", w->c_str());
  o.voice = cbx::cli::resolve_voice(o.voice, o.voices_dir);

  // The model's header (cheap): variant, languages; checks that need it come before the load.
  const cbx::ModelConfig cfg = cbx::read_config(*cbx::GgufFile::open(o.model));
  const bool mtl = cfg.variant == cbx::Variant::Mtl;
  const std::string language = o.batch.empty() || o.synth.language
                                   ? cbx::resolve_language(cfg.variant, cfg.languages, o.synth.language)
                                   : std::string();
  for (const std::string& flag : cbx::ignored_options(cfg.variant, o.synth))
    cbx::cli::warn("say", "%s is ignored by %s models (as upstream)", flag.c_str(), mtl ? "Multilingual" : "Turbo");
  CBX_CHECK(!mtl || o.prompt_cache.empty(),
            "--prompt-cache is for Turbo models (%s is Multilingual: its T3 prefix depends on the text and language)",
            o.model.c_str());
  if (!o.voice.empty()) cbx::cli::check_voice_early(o.voice, cfg);

  const std::vector<cbx::OutputInput> inputs = {
      {"model", o.model}, {"voice", o.voice}, {"text file", o.file}, {"batch file", o.batch}};
  cbx::cli::SayProgress progress(o.quiet, o.progress);
  if (!o.batch.empty()) {
    check_prompt_cache(o, inputs, nullptr);
    return cbx::cli::run_batch(o, cfg, language, inputs, progress);
  }

  if (o.out != "-") cbx::check_output_not_input(o.out, inputs);  // first: the gravest mistake
  const cbx::AudioFormat format = cbx::cli::choose_format(o.out, o.format, o.float_wav);
  cbx::cli::AudioOutput out(o.out, format, cfg.pipeline.sample_rate, o.post, inputs);
  check_prompt_cache(o, inputs, &out);

  std::string text;
  if (!o.lines) {
    text = read_text(o);
    cbx::check_synth_text(text);  // empty / invalid UTF-8: before the (long) model load
  }
  const double t0 = now_ms();
  cbx::cli::SayEngine engine(o.model, o.load, progress.loading(o.model));
  const double load_ms = now_ms() - t0;
  if (o.verbose)
    std::fprintf(stderr, "say: loaded %s (%s%s%s, %d threads) in %.0f ms; watermark: none (Perth not ported)\n",
                 o.model.c_str(), cbx::variant_name(cfg.variant), mtl ? ", language " : "", language.c_str(),
                 engine.n_threads(), load_ms);
  std::vector<std::string> warnings;
  const double tv = now_ms();
  engine.use_voice(o.voice, &warnings);
  for (const std::string& w : warnings) cbx::cli::warn("say", "%s", w.c_str());
  if (o.verbose && !o.voice.empty())
    std::fprintf(stderr, "say: voice %s ready in %.0f ms\n", o.voice.c_str(), now_ms() - tv);
  bool cached = false;
  if (!o.prompt_cache.empty()) {
    const double tc = now_ms();
    std::string why;
    try {
      cached = engine.load_prefix_cache(o.prompt_cache, &why);
    } catch (const cbx::Error& e) {  // not a cache (never overwritten), unreadable: speak anyway
      cbx::cli::warn("say", "%s; continuing without a prompt cache", e.what());
      o.prompt_cache.clear();
      why = "not used";
    }
    if (o.verbose)
      std::fprintf(stderr, "say: prompt cache %s: %s (%.0f ms)\n", o.prompt_cache.c_str(),
                   cached ? "voice prefix loaded" : ("not used, " + why + "; it will be written").c_str(),
                   now_ms() - tc);
  }

  cbx::SynthTimings total;
  double first_audio_ms = -1;  // time to first audio of the first synthesize call
  auto speak = [&](const std::string& t) {
    const double t_call = now_ms();
    const cbx::SynthTimings tm = engine.synthesize(
        t, o.synth, language,
        [&, last_chunk = int64_t(-1)](const float* s, int64_t n, int64_t chunk, int64_t) mutable {
          if (first_audio_ms < 0) first_audio_ms = now_ms() - t_call;
          out.add(s, size_t(n), chunk != last_chunk);  // streamed pieces of a chunk: no pause between
          last_chunk = chunk;
          progress.audio(out.seconds());
          return true;
        },
        [&](int64_t chunk, int64_t n_chunks, int64_t tokens) { progress.tokens(chunk, n_chunks, tokens); }, o.stream);
    cbx::cli::add_timings(total, tm);
  };
  if (o.lines) {
    // Line by line: each complete line is spoken (and, on stdout, written) before the next is read.
    std::FILE* in = stdin;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(nullptr, &std::fclose);
    if (!o.file.empty() && o.file != "-") {
      file.reset(std::fopen(o.file.c_str(), "rb"));
      CBX_CHECK(file, "cannot open the text file '%s'", o.file.c_str());
      in = file.get();
    }
    char* line = nullptr;
    size_t cap = 0;
    struct FreeLine {
      char*& p;
      ~FreeLine() { std::free(p); }
    } free_line{line};
    int64_t n_lines = 0;
    for (ssize_t len; (len = ::getline(&line, &cap, in)) >= 0;) {
      std::string l(line, size_t(len));
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      if (l.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;  // blank: nothing to say
      speak(l);
      ++n_lines;
    }
    CBX_CHECK(n_lines > 0, "no text: the input held no non-blank line");
  } else {
    speak(text);
  }
  out.finish();
  progress.clear();
  if (!o.prompt_cache.empty() && !cached) {  // after the audio: a failure here costs a warning only
    const double tc = now_ms();
    try {
      engine.save_prefix_cache(o.prompt_cache);
      if (o.verbose)
        std::fprintf(stderr, "say: prompt cache %s written (%.0f ms)\n", o.prompt_cache.c_str(), now_ms() - tc);
    } catch (const cbx::Error& e) {
      cbx::cli::warn("say", "the prompt cache was not written: %s", e.what());
    }
  }
  if (total.chunks_at_limit > 0)
    cbx::cli::warn("say",
                   "%lld of %lld text chunks reached the %lld speech-token limit without ending; their speech may be "
                   "cut (use a smaller --chunk-tokens)",
                   (long long)total.chunks_at_limit, (long long)total.n_chunks, (long long)engine.max_new_tokens());
  if (o.verbose) {
    cbx::cli::print_timings(total);
    std::fprintf(stderr, "say: ttfa_ms=%.1f (call to first audio%s)\n", first_audio_ms,
                 o.stream ? ", streamed" : ": a whole text chunk");
  }
  if (!o.quiet) cbx::cli::print_summary(out.seconds(), (now_ms() - t_start) / 1000.0, o.out);
  return 0;
}

cbx::cli::RegisterCommand reg("say", "text -> speech (wav/flac/ogg/opus/mp3) with a Turbo or Multilingual GGUF", run);

}  // namespace
