#include "say_batch.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipeline/pipeline_common.h"
#include "say_engine.h"
#include "say_output.h"

namespace cbx::cli {

std::vector<BatchItem> read_batch(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CBX_CHECK(in, "cannot open the batch file '%s'", path.c_str());
  std::vector<BatchItem> items;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t\f\v");
    if (first == std::string::npos) continue;
    BatchItem it;
    it.line = n;
    if (line[first] != '{') {
      it.text = line;
      items.push_back(std::move(it));
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("%s:%lld: not valid JSON: %s", path.c_str(), (long long)n, e.what());
    }
    CBX_CHECK(j.is_object(), "%s:%lld: a JSON line must be an object", path.c_str(), (long long)n);
    for (auto kv = j.begin(); kv != j.end(); ++kv) {
      const std::string& k = kv.key();
      const nlohmann::json& v = kv.value();
      if (k == "seed") {
        CBX_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                  "%s:%lld: \"seed\" "
                  "must be an integer in [0, 2^64-1]",
                  path.c_str(), (long long)n);
        it.seed = v.get<uint64_t>();
        continue;
      }
      CBX_CHECK(k == "text" || k == "voice" || k == "lang" || k == "out",
                "%s:%lld: unknown key \"%s\" (text, voice, lang, seed, out)", path.c_str(), (long long)n, k.c_str());
      CBX_CHECK(v.is_string(), "%s:%lld: \"%s\" must be a string", path.c_str(), (long long)n, k.c_str());
      const std::string s = v.get<std::string>();
      if (k == "text")
        it.text = s;
      else if (k == "voice")
        it.voice = s;
      else if (k == "lang")
        it.lang = s;
      else
        it.out = s;
    }
    CBX_CHECK(j.contains("text"), "%s:%lld: no \"text\"", path.c_str(), (long long)n);
    items.push_back(std::move(it));
  }
  CBX_CHECK(!items.empty(), "the batch file '%s' holds no text", path.c_str());
  return items;
}

namespace {

struct Planned {
  BatchItem item;
  std::string voice, language, out;
  AudioFormat format;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int run_batch(const SayOptions& o, const ModelConfig& cfg, const std::string& language,
              const std::vector<OutputInput>& inputs, SayProgress& progress) {
  const double t0 = now_s();
  CBX_CHECK(o.out != "-", "--batch writes one file per line: give -o DIR");
  struct stat st;
  if (::stat(o.out.c_str(), &st) == 0) {
    CBX_CHECK(S_ISDIR(st.st_mode), "--batch: -o '%s' is not a directory", o.out.c_str());
  } else {
    CBX_CHECK(::mkdir(o.out.c_str(), 0777) == 0, "--batch: cannot create the directory '%s'", o.out.c_str());
  }
  const std::vector<BatchItem> items = read_batch(o.batch);

  // Everything checked before the model loads.
  std::vector<Planned> plan;
  std::map<std::string, int64_t> outputs;  // output path -> line, for duplicates
  const std::string default_ext =
      audio_format_extension(o.format.empty() ? AudioFormat::Wav : audio_format_from_name(o.format));
  for (const BatchItem& it : items) {
    Planned p{it, o.voice, language, "", AudioFormat::Wav};
    const std::string where = o.batch + ":" + std::to_string(it.line);
    try {
      check_synth_text(it.text);
      if (it.lang || language.empty()) p.language = resolve_language(cfg.variant, cfg.languages, it.lang);
      if (!it.voice.empty()) {
        p.voice = resolve_voice(it.voice, o.voices_dir);
        check_voice_early(p.voice, cfg);
      }
      char name[32];
      std::snprintf(name, sizeof name, "%04lld", (long long)it.line);
      p.out = it.out.empty() ? o.out + "/" + name + default_ext : (it.out[0] == '/' ? it.out : o.out + "/" + it.out);
      p.format = choose_format(p.out, o.format, o.float_wav);
      auto [dup, fresh] = outputs.emplace(p.out, it.line);
      CBX_CHECK(fresh, "output '%s' is also line %lld's", p.out.c_str(), (long long)dup->second);
      std::vector<OutputInput> in = inputs;
      if (!p.voice.empty()) in.push_back({"voice", p.voice});
      OutputFile probe(p.out, in);  // refused when an input; created, then discarded: writable
    } catch (const Error& e) {
      fail("%s: %s", where.c_str(), e.what());
    }
    plan.push_back(std::move(p));
  }

  SayEngine engine(o.model, o.load, progress.loading(o.model));
  std::vector<std::string> warnings;
  engine.use_voice(o.voice, &warnings);
  bool cached = false;
  if (!o.prompt_cache.empty()) {
    std::string why;
    try {
      cached = engine.load_prefix_cache(o.prompt_cache, &why);
    } catch (const Error& e) {
      warn("say", "%s; continuing without a prompt cache", e.what());
    }
  }

  int64_t written = 0;
  double audio_s = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    progress.item(int64_t(i + 1), int64_t(plan.size()));
    try {
      warnings.clear();
      engine.use_voice(p.voice, &warnings);
      for (const std::string& w : warnings)
        warn("say", "%s:%lld: %s", o.batch.c_str(), (long long)p.item.line, w.c_str());
      std::vector<OutputInput> in = inputs;
      if (!p.voice.empty()) in.push_back({"voice", p.voice});
      AudioOutput out(p.out, p.format, cfg.pipeline.sample_rate, o.post, in);
      UserSynthOptions so = o.synth;
      if (p.item.seed) so.seed = p.item.seed;
      const SynthTimings tm = engine.synthesize(
          p.item.text, so, p.language,
          [&, last_chunk = int64_t(-1)](const float* s, int64_t n, int64_t chunk, int64_t) mutable {
            out.add(s, size_t(n), chunk != last_chunk);  // streamed pieces of a chunk: no pause between
            last_chunk = chunk;
            return true;
          },
          [&](int64_t c, int64_t nc, int64_t t) { progress.tokens(c, nc, t); }, o.stream);
      out.finish();
      audio_s += out.seconds();
      ++written;
      if (tm.chunks_at_limit > 0)
        warn("say", "%s:%lld: %lld of %lld text chunks reached the speech-token limit without ending", o.batch.c_str(),
             (long long)p.item.line, (long long)tm.chunks_at_limit, (long long)tm.n_chunks);
    } catch (const Error& e) {
      progress.clear();
      std::fprintf(stderr, "chatterbox say: error: %s:%lld: %s\n", o.batch.c_str(), (long long)p.item.line, e.what());
    }
  }
  progress.clear();
  if (!o.prompt_cache.empty() && !cached) {
    try {
      engine.use_voice(o.voice, &warnings);
      engine.save_prefix_cache(o.prompt_cache);
    } catch (const Error& e) {
      warn("say", "the prompt cache was not written: %s", e.what());
    }
  }
  if (!o.quiet) {
    const double wall = now_s() - t0;
    std::fprintf(stderr, "say: batch: %lld of %zu files written to %s; %.2f s of audio in %.2f s (RTF %.3f)\n",
                 (long long)written, plan.size(), o.out.c_str(), audio_s, wall, audio_s > 0 ? wall / audio_s : 0.0);
  }
  return written == int64_t(plan.size()) ? 0 : 1;
}

}  // namespace cbx::cli
