// `chatterbox say`'s messages: a progress line on stderr (a terminal, or --progress), warnings
// with one prefix, the one-line summary and the -v timings.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "command.h"  // warn()
#include "pipeline/load_progress.h"
#include "pipeline/pipeline_common.h"

namespace cbx::cli {

// One line, rewritten in place ("\r"): the chunk being spoken, its speech tokens, the audio
// seconds done and the speed against real time. On as progress_wanted (command.h: a terminal,
// or CBX_PROGRESS=1) or with --progress, off with -q; at most ~10 updates a second.
class SayProgress {
 public:
  SayProgress(bool quiet, bool force);
  void status(const std::string& what);  // e.g. "loading MODEL"
  // For SayEngine's load: shows "loading MODEL NN%" as the load's stages finish (never cancels).
  LoadProgressFn loading(const std::string& model);
  void tokens(int64_t chunk, int64_t n_chunks, int64_t chunk_tokens);
  void audio(double seconds);
  void item(int64_t i, int64_t n);  // --batch: item i of n (1-based)
  void clear();                     // ends the line (before other output)
  bool on() const { return on_; }

 private:
  void draw(bool force);
  bool on_ = false, shown_ = false;
  std::chrono::steady_clock::time_point t0_, last_;
  int64_t chunk_ = 0, n_chunks_ = 0, tokens_ = 0, item_ = 0, n_items_ = 0;
  double audio_s_ = 0;
  std::string status_;
};

void add_timings(SynthTimings& total, const SynthTimings& t);
void print_timings(const SynthTimings& t);  // -v
// "say: 8.12 s of audio in 2.31 s (RTF 0.284, 3.5x real time) -> out.wav"
void print_summary(double audio_s, double wall_s, const std::string& out);

}  // namespace cbx::cli
