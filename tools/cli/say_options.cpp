#include "say_options.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "pipeline/pipeline_common.h"

namespace cbx::cli {

const char* const kSayUsage =
    "usage: chatterbox say -m MODEL.gguf [--lang L] [TEXT] -o OUT [options]   (-- TEXT for text starting with '-')\n"
    "  Synthesises TEXT (UTF-8) with a Turbo, Nano or Multilingual model, 24 kHz mono.\n"
    "  Without TEXT the text is read from -f FILE, or else from stdin (-f - too).\n"
    "\n"
    "input and output:\n"
    "  -m, --model F            GGUF from `chatterbox convert` (turbo, nano or mtl variant)\n"
    "  -o, --output F           the audio file; its extension picks the format: .wav (16-bit PCM),\n"
    "                           .flac, .ogg (Vorbis), .opus (Ogg Opus), .mp3; '-' streams raw 16-bit\n"
    "                           little-endian PCM to stdout, each text chunk as soon as it is done\n"
    "                           (e.g. `... -o - | aplay -r 24000 -f S16_LE -c 1`)\n"
    "  --format F               wav|flac|ogg|opus|mp3|pcm: the format whatever the extension (it\n"
    "                           must agree with a known one); with -o -: `--format wav` streams a\n"
    "                           WAV (unknown-length header, e.g. `| ffplay -`), other formats too\n"
    "  --float                  32-bit float WAV instead of 16-bit\n"
    "  -f, --file F             read the text from F ('-': stdin)\n"
    "  --lines                  speak each line of stdin (or -f) as soon as it is complete: with -o -\n"
    "                           a line's audio is out before the next line is read; with a file, the\n"
    "                           lines are joined into it at the end of input\n"
    "  --stream                 audio while T3 is still decoding (docs/streaming.md): the first piece\n"
    "                           after 25 speech tokens, then every 60; -o - writes each piece as it\n"
    "                           comes; -v prints the time to first audio. Same length, slightly other audio\n"
    "  --batch F                one text per line of F, or JSON lines {\"text\", \"voice\", \"lang\",\n"
    "                           \"seed\", \"out\"}; -o DIR: one file per line (DIR/0001.wav ... or \"out\",\n"
    "                           relative to DIR); the model is loaded once\n"
    "  --voice V                a cloned voice: NAME.voice (`chatterbox voice create`), a reference\n"
    "                           recording (built on the fly; same audio as its .voice), or NAME with\n"
    "                           --voices DIR (DIR/NAME.voice)\n"
    "  --voices DIR             where --voice NAME (and batch \"voice\") names are looked up\n"
    "  --prompt-cache F         Turbo only: keep the voice's T3 prefix (~37 MB for the built-in voice)\n"
    "                           in F; later runs with the same model, voice and CPU kernels load it\n"
    "                           instead of computing it (~1 s on 2 cores). F is rewritten when it\n"
    "                           holds another voice or model; a file that is not a cache is left alone\n"
    "\n"
    "sampling (omit a flag for the model's default; out-of-range values are errors):\n"
    "  --lang L                 language code (Multilingual: required, see `chatterbox languages -m F`;\n"
    "                           Turbo/Nano speak English only: en); any case\n"
    "  --seed N                 sampler / CFM noise / vocoder seed, 0 .. 2^64-1 (default 0)\n"
    "  --temperature T          (0, 10] (default: the model's, 0.8)\n"
    "  --top-k K                Turbo only: 0 .. 100000, 0 disables (default 1000)\n"
    "  --top-p P                (0, 1] (default: Turbo 0.95, Multilingual 1.0)\n"
    "  --repetition-penalty R   (0, 10] (default 1.2)\n"
    "  --min-p P                Multilingual only: [0, 1] (default 0.05)\n"
    "  --cfg-weight W           Multilingual only: T3 classifier-free guidance [0, 100] (default 0.5)\n"
    "  --exaggeration X         Multilingual only: emotion exaggeration [0, 100] (default 0.5)\n"
    "  --max-tokens N           speech tokens per generation, >= 1 (default: the model's, 1000 ~ 40 s)\n"
    "  --chunk-tokens N         text tokens per chunk of long text, >= 1 (default: Turbo 80, MTL 150)\n"
    "\n"
    "sound:\n"
    "  --speed S                0.5 .. 2.0: faster or slower speech, pitch kept (Rubber Band)\n"
    "  --pause-ms N             silence between text chunks and --lines lines, 0 .. 10000 (default 200;\n"
    "                           added to the silence the model leaves at a chunk's end)\n"
    "  --volume V               gain: a factor (0.5) or decibels (-6dB), -60 .. +40 dB\n"
    "  --normalize              scale the whole file to a peak of -1 dBFS (files only)\n"
    "  --normalize-peak DB      the same to DB dBFS, -60 .. 0\n"
    "\n"
    "machine and messages:\n"
    "  -t, --threads N          1 .. 1024 (default: the CPUs this process may use: affinity and\n"
    "                           cgroup quota; more than that warns: much slower)\n"
    "  --kv-type f16|f32        T3 KV cache type (default f16)\n"
    "  --no-repack              keep Q4_0 / Q8_0 weights in the GGUF layout only: no decode copies\n"
    "                           (Q8_0 Turbo: ~330 MB less memory), a slower T3 decode, the same audio\n"
    "  --gemm-precision P       auto, f32 or bf16: precision of the matrix products (default auto: bf16\n"
    "                           for quantized or f16 GGUFs, exact f32 for f32 ones; bf16 is faster with\n"
    "                           AMX or on AMD Zen 4+, elsewhere it runs the f32 products)\n"
    "  --cfm-precision P        auto, f32, bf16 or int8: the S3Gen CFM estimator's linears (default auto:\n"
    "                           int8 for quantized or f16 GGUFs with AVX-512 VNNI, else as --gemm-precision)\n"
    "  -v, --verbose            load and per-stage timings on stderr\n"
    "  -q, --quiet              no progress line and no summary (errors and warnings still)\n"
    "  --progress               the progress line even when stderr is not a terminal\n"
    "Long text is split at sentence boundaries (then clauses, then words) into chunks that fit one\n"
    "generation; each chunk is synthesised and the audio joined. A chunk that reaches the speech-token\n"
    "limit without ending is reported on stderr. Outputs are checked before any work: an output that\n"
    "is an input (model, voice, text) is refused; a device node (-o /dev/null) is written, never\n"
    "replaced; a file is written whole or not at all (a temporary file renamed over it).\n"
    "Note: upstream Chatterbox watermarks its output with Perth; that watermark is NOT ported, so this\n"
    "audio carries no watermark.\n";

namespace {

// --volume: "0.5" (a factor) or "-6dB" / "+3 dB" (decibels) -> dB.
double parse_volume(const std::string& v) {
  std::string s = v;
  bool db = false;
  if (s.size() > 2) {
    std::string tail = s.substr(s.size() - 2);
    for (char& c : tail) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (tail == "db") {
      db = true;
      s.resize(s.size() - 2);
      while (!s.empty() && s.back() == ' ') s.pop_back();
    }
  }
  const double x = parse_number("--volume", s);
  if (db) {
    if (!(x >= -60 && x <= 40)) throw InvalidArgumentError("volume (--volume) must be in [-60, 40] dB, got " + v);
    return x;
  }
  if (!(x > 0)) throw InvalidArgumentError("volume (--volume) must be a factor > 0 or decibels (-6dB), got " + v);
  const double d = 20.0 * std::log10(x);
  if (!(d >= -60 && d <= 40))
    throw InvalidArgumentError("volume (--volume) must be in [-60, 40] dB (factor 0.001 .. 100), got " + v);
  return d;
}

double ranged(const char* flag, const std::string& text, double lo, double hi) {
  const double x = parse_number(flag, text);
  if (!(x >= lo && x <= hi)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s must be in [%g, %g], got %s", flag, lo, hi, text.c_str());
    throw InvalidArgumentError(buf);
  }
  return x;
}

std::vector<std::string> voice_names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".voice") == 0) names.push_back(n.substr(0, n.size() - 6));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string resolve_voice(const std::string& voice, const std::string& voices_dir) {
  struct stat st;
  if (voice.empty() || voices_dir.empty() || ::stat(voice.c_str(), &st) == 0) return voice;
  const bool plain_name = voice.find('/') == std::string::npos && voice != "." && voice != "..";
  const std::string name =
      voice.size() > 6 && voice.compare(voice.size() - 6, 6, ".voice") == 0 ? voice.substr(0, voice.size() - 6) : voice;
  const std::string path = voices_dir + "/" + name + ".voice";
  if (plain_name && ::stat(path.c_str(), &st) == 0) return path;
  std::string list;
  for (const std::string& n : voice_names(voices_dir)) list += (list.empty() ? "" : ", ") + n;
  fail("voice '%s' is neither a file nor a voice in %s (%s)", voice.c_str(), voices_dir.c_str(),
       list.empty() ? "it holds no .voice files" : ("voices: " + list).c_str());
}

std::optional<SayOptions> parse_say_options(int argc, char** argv) {
  SayOptions o;
  o.post.pause_ms = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      CBX_CHECK(i + 1 < argc, "%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--" && i + 1 < argc) {  // the rest is text (for text starting with '-')
      CBX_CHECK(!o.have_text && i + 2 == argc, "give one text argument after --");
      o.text = argv[++i];
      o.have_text = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kSayUsage, stdout);
      return std::nullopt;
    } else if (a == "-m" || a == "--model")
      o.model = next();
    else if (a == "-o" || a == "--output")
      o.out = next();
    else if (a == "-f" || a == "--file")
      o.file = next();
    else if (a == "--format")
      o.format = next();
    else if (a == "--float")
      o.float_wav = true;
    else if (a == "--lines")
      o.lines = true;
    else if (a == "--stream")
      o.stream = true;
    else if (a == "--batch")
      o.batch = next();
    else if (a == "--voice")
      o.voice = next();
    else if (a == "--voices")
      o.voices_dir = next();
    else if (a == "--prompt-cache")
      o.prompt_cache = next();
    else if (a == "--seed")
      o.synth.seed = parse_u64(a, next());
    else if (a == "--temperature")
      o.synth.temperature = parse_number(a, next());
    else if (a == "--top-k")
      o.synth.top_k = parse_int(a, next());
    else if (a == "--top-p")
      o.synth.top_p = parse_number(a, next());
    else if (a == "--repetition-penalty")
      o.synth.repetition_penalty = parse_number(a, next());
    else if (a == "--lang" || a == "--language")
      o.synth.language = next();
    else if (a == "--min-p")
      o.synth.min_p = parse_number(a, next());
    else if (a == "--cfg-weight")
      o.synth.cfg_weight = parse_number(a, next());
    else if (a == "--exaggeration")
      o.synth.exaggeration = parse_number(a, next());
    else if (a == "--max-tokens")
      o.load.max_new_tokens = parse_int(a, next());
    else if (a == "--chunk-tokens")
      o.synth.max_chunk_tokens = parse_int(a, next());
    else if (a == "-t" || a == "--threads")
      o.load.n_threads = parse_int("--threads", next());
    else if (a == "--kv-type")
      o.load.kv_type = parse_kv_type(a, next());
    else if (a == "--no-repack")
      o.load.repack = false;
    else if (a == "--gemm-precision")
      o.load.gemm_precision = parse_gemm_precision_flag(a, next());
    else if (a == "--cfm-precision")
      o.load.cfm_precision = parse_cfm_precision_flag(a, next());
    else if (a == "--speed")
      o.post.speed = ranged("--speed", next(), 0.5, 2.0);
    else if (a == "--pause-ms")
      o.post.pause_ms = ranged("--pause-ms", next(), 0, 10000);
    else if (a == "--volume")
      o.post.gain_db = parse_volume(next());
    else if (a == "--normalize")
      o.post.normalize_dbfs = o.post.normalize_dbfs.value_or(-1.0);
    else if (a == "--normalize-peak")
      o.post.normalize_dbfs = ranged("--normalize-peak", next(), -60, 0);
    else if (a == "-v" || a == "--verbose")
      o.verbose = true;
    else if (a == "-q" || a == "--quiet")
      o.quiet = true;
    else if (a == "--progress")
      o.progress = true;
    else if (a.size() > 1 && a[0] == '-')
      fail("unknown option '%s' (see chatterbox say --help)", a.c_str());
    else {
      CBX_CHECK(!o.have_text, "more than one text argument (quote the text)");
      o.text = a;
      o.have_text = true;
    }
  }
  CBX_CHECK(!o.model.empty(), "-m MODEL.gguf is required (see chatterbox say --help)");
  CBX_CHECK(!o.out.empty(), "-o OUT is required (a file, or - for audio on stdout)");
  validate(o.synth);  // the ranges, as the C API checks them
  validate(o.load);
  const int sources = int(o.have_text) + int(!o.file.empty()) + int(!o.batch.empty());
  CBX_CHECK(sources <= 1, "give the text one way: as an argument, with -f, or with --batch");
  CBX_CHECK(o.batch.empty() || !o.lines, "--lines and --batch do not go together");
  CBX_CHECK(!(o.quiet && o.progress), "-q and --progress contradict each other");
  return o;
}

}  // namespace cbx::cli
