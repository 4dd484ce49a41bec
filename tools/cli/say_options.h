// `chatterbox say`'s command line: every flag parsed strictly and checked before any work
// (the sampling and load parameters by pipeline/synth_options.h, the same checks as the C API).
#pragma once
#include <optional>
#include <string>

#include "pipeline/synth_options.h"
#include "say_output.h"

namespace cbx::cli {

extern const char* const kSayUsage;

struct SayOptions {
  std::string model, out, text, file, voice, voices_dir, prompt_cache, format, batch;
  bool have_text = false, float_wav = false, lines = false, stream = false;
  bool verbose = false, quiet = false, progress = false;  // progress: force the progress line
  UserSynthOptions synth;
  UserLoadOptions load;
  AudioPost post;
};

// Throws cbx::Error (InvalidArgumentError for values) naming the flag. Returns nullopt for
// --help (the usage was printed).
std::optional<SayOptions> parse_say_options(int argc, char** argv);

// --voice NAME with --voices DIR: DIR/NAME.voice when NAME is not a file itself. Throws
// listing the voices in DIR when neither exists.
std::string resolve_voice(const std::string& voice, const std::string& voices_dir);

}  // namespace cbx::cli
