#include "say_progress.h"

#include <unistd.h>

namespace cbx::cli {

SayProgress::SayProgress(bool quiet, bool force)
    : on_(!quiet && (force || progress_wanted(false))), t0_(std::chrono::steady_clock::now()), last_(t0_) {}

void SayProgress::status(const std::string& what) {
  status_ = what;
  draw(true);
}

LoadProgressFn SayProgress::loading(const std::string& model) {
  status("loading " + model);
  return [this, model](float fraction) {
    char pct[16];
    std::snprintf(pct, sizeof pct, " %3.0f%%", double(fraction) * 100.0);
    status("loading " + model + pct);
    return true;
  };
}

void SayProgress::tokens(int64_t chunk, int64_t n_chunks, int64_t chunk_tokens) {
  status_.clear();
  chunk_ = chunk + 1, n_chunks_ = n_chunks, tokens_ = chunk_tokens;
  draw(false);
}

void SayProgress::audio(double seconds) {
  audio_s_ = seconds;
  draw(true);
}

void SayProgress::item(int64_t i, int64_t n) {
  item_ = i, n_items_ = n;
  draw(true);
}

void SayProgress::draw(bool force) {
  if (!on_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double wall = std::chrono::duration<double>(now - t0_).count();
  std::string line = "say:";
  char buf[160];
  if (n_items_ > 0) {
    std::snprintf(buf, sizeof buf, " item %lld/%lld", (long long)item_, (long long)n_items_);
    line += buf;
  }
  if (!status_.empty()) {
    line += " " + status_;
  } else if (n_chunks_ > 0) {
    std::snprintf(buf, sizeof buf, " chunk %lld/%lld, %lld speech tokens", (long long)chunk_, (long long)n_chunks_,
                  (long long)tokens_);
    line += buf;
  }
  if (audio_s_ > 0 && wall > 0) {
    std::snprintf(buf, sizeof buf, " | %.1f s of audio, %.2fx real time", audio_s_, audio_s_ / wall);
    line += buf;
  }
  std::fprintf(stderr, "\r%-78s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void SayProgress::clear() {
  if (!shown_) return;
  std::fputc('\n', stderr);
  shown_ = false;
}

void add_timings(SynthTimings& a, const SynthTimings& t) {
  a.text_ms += t.text_ms, a.t3_prefill_ms += t.t3_prefill_ms, a.t3_decode_ms += t.t3_decode_ms;
  a.flow_ms += t.flow_ms, a.cfm_ms += t.cfm_ms, a.hift_ms += t.hift_ms, a.total_ms += t.total_ms;
  a.n_chunks += t.n_chunks, a.n_text_tokens += t.n_text_tokens, a.n_speech_tokens += t.n_speech_tokens;
  a.n_decode_steps += t.n_decode_steps, a.chunks_at_limit += t.chunks_at_limit;
  a.chunks_prefix_reused += t.chunks_prefix_reused, a.n_samples += t.n_samples;
  a.sample_rate = t.sample_rate;
}

void print_timings(const SynthTimings& tm) {
  const double tok_s = tm.t3_decode_ms > 0 ? 1000.0 * double(tm.n_decode_steps) / tm.t3_decode_ms : 0.0;
  std::fprintf(stderr,
               "say: chunks=%lld text_tokens=%lld speech_tokens=%lld samples=%lld audio_s=%.2f\n"
               "say: text_ms=%.1f t3_prefill_ms=%.1f t3_decode_ms=%.1f t3_tok_s=%.1f flow_ms=%.1f cfm_ms=%.1f "
               "hift_ms=%.1f total_ms=%.1f rtf=%.3f\n",
               (long long)tm.n_chunks, (long long)tm.n_text_tokens, (long long)tm.n_speech_tokens,
               (long long)tm.n_samples, tm.audio_s(), tm.text_ms, tm.t3_prefill_ms, tm.t3_decode_ms, tok_s, tm.flow_ms,
               tm.cfm_ms, tm.hift_ms, tm.total_ms, tm.rtf());
}

void print_summary(double audio_s, double wall_s, const std::string& out) {
  const double rtf = audio_s > 0 ? wall_s / audio_s : 0.0;
  std::fprintf(stderr, "say: %.2f s of audio in %.2f s (RTF %.3f, %.1fx real time) -> %s\n", audio_s, wall_s, rtf,
               rtf > 0 ? 1.0 / rtf : 0.0, out == "-" ? "stdout" : out.c_str());
}

}  // namespace cbx::cli
