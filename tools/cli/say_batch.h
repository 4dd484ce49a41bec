// `chatterbox say --batch FILE -o DIR`: many texts, one model load, one file per text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "models/model_config.h"
#include "say_options.h"
#include "say_progress.h"

namespace cbx::cli {

// One line of a batch file: plain text, or a JSON object {"text", "voice", "lang", "seed", "out"}.
struct BatchItem {
  int64_t line = 0;  // 1-based line in the file
  std::string text, voice, out;
  std::optional<std::string> lang;
  std::optional<uint64_t> seed;
};

// Parses the batch file (blank lines skipped). Throws naming the line and what is wrong (bad
// JSON, a missing or non-string "text", an unknown key, a seed that is not a non-negative integer).
std::vector<BatchItem> read_batch(const std::string& path);

// Every item checked (text, language, voice, output) before the model loads; then each spoken
// and written. An item that fails at synthesis is reported and the rest go on. Returns the exit
// status: 0 when every item was written, 1 otherwise.
int run_batch(const SayOptions& o, const ModelConfig& cfg, const std::string& language,
              const std::vector<OutputInput>& inputs, SayProgress& progress);

}  // namespace cbx::cli
