#include "pipeline/pipeline_common.h"

#include <chrono>
#include <utility>

#include "text/utf8.h"

namespace cbx {

namespace {

// Python str.isspace for the code points that matter here.
bool py_isspace(char32_t cp) {
  return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool has(const std::u32string& set, char32_t cp) { return set.find(cp) != std::u32string::npos; }

// The text as code points with their byte offsets (off[n] = size).
struct CodePoints {
  std::u32string cp;
  std::vector<size_t> off;
  explicit CodePoints(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      char32_t c = 0;
      size_t n = utf8_next(s, i, &c);
      if (n == 0) n = 1, c = 0xFFFD;  // callers pass checked text; never loop forever
      cp.push_back(c);
      off.push_back(i);
      i += n;
    }
    off.push_back(s.size());
  }
  size_t size() const { return cp.size(); }
};

struct Unit {
  std::string text;
  bool space_before = false;  // joined to the previous unit with " " (else with nothing)
};

// Units of level 0 (sentences) or 1 (clauses): cut after an ender (plus closers) followed by a
// space (the space is dropped), or after a wide ender wherever it stands.
std::vector<Unit> split_at_enders(const std::string& s, const std::u32string& enders, const std::u32string& wide,
                                  const ChunkRules& r) {
  const CodePoints c(s);
  std::vector<Unit> out;
  size_t start = 0;  // code-point index
  bool space_before = false;
  auto emit = [&](size_t end, size_t next, bool space) {
    if (end > start) out.push_back({s.substr(c.off[start], c.off[end] - c.off[start]), space_before});
    start = next;
    space_before = space;
  };
  for (size_t i = 0; i < c.size(); ++i) {
    if (c.cp[i] == ' ') {
      size_t j = i;
      while (j > start && has(r.closers, c.cp[j - 1])) --j;
      if (j > start && (has(enders, c.cp[j - 1]) || has(wide, c.cp[j - 1]))) emit(i, i + 1, true);
    } else if (has(wide, c.cp[i])) {
      size_t end = i + 1;
      while (end < c.size() && has(r.closers, c.cp[end])) ++end;
      if (end < c.size() && c.cp[end] != ' ') {
        emit(end, end, false);
        i = end - 1;
      }
    }
  }
  emit(c.size(), c.size(), false);
  return out;
}

std::vector<Unit> split_at_spaces(const std::string& s) {
  std::vector<Unit> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ' ') {
      if (i > start) out.push_back({s.substr(start, i - start), true});
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

double pipeline_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SynthLoop::SynthLoop(int sample_rate, const SynthAudioFn& on_audio, const SynthAbortFn& should_abort)
    : on_audio_(on_audio), should_abort_(should_abort), t_start_(pipeline_now_ms()) {
  tm_.sample_rate = sample_rate;
}

void SynthLoop::check_abort() const {
  if (abort_requested()) throw AbortedError("synthesis aborted by the caller");
}

std::vector<std::vector<int32_t>> SynthLoop::tokenize(
    const std::vector<std::string>& chunks, const std::function<std::vector<int32_t>(const std::string&)>& tokenize) {
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& c : chunks) {
    ids.push_back(tokenize(c));
    tm_.n_text_tokens += int64_t(ids.back().size());
  }
  tm_.n_chunks = int64_t(chunks.size());
  tm_.text_ms = pipeline_now_ms() - t_start_;
  return ids;
}

void SynthLoop::add_chunk(const std::vector<float>& wave, int64_t chunk) {
  audio_.insert(audio_.end(), wave.begin(), wave.end());
  if (on_audio_ && !on_audio_(wave.data(), int64_t(wave.size()), chunk, tm_.n_chunks))
    throw AbortedError("synthesis stopped by the audio callback");
}

std::vector<float> SynthLoop::finish(SynthTimings* timings) {
  tm_.n_samples = int64_t(audio_.size());
  tm_.total_ms = pipeline_now_ms() - t_start_;
  if (timings) *timings = tm_;
  return std::move(audio_);
}

void check_synth_text(const std::string& text) {
  try {
    utf8_check(text);
  } catch (const Error& e) {
    throw TextError(e.what());
  }
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(text, i, &cp);
    if (!py_isspace(cp)) return;
    i += n;
  }
  throw TextError("text: the text is empty (nothing to synthesise)");
}

std::vector<std::string> split_into_chunks(const std::string& norm, int64_t budget,
                                           const std::function<int64_t(const std::string&)>& count_tokens,
                                           const ChunkRules& r) {
  CBX_CHECK(budget > 0, "text: chunk size %lld must be positive", (long long)budget);
  auto fits = [&](const std::string& u) { return count_tokens(u) <= budget; };
  if (fits(norm)) return {norm};

  std::vector<std::string> chunks;
  // Code-point runs: the longest prefix that fits (binary search; one code point at least).
  auto split_runs = [&](const std::string& s) {
    const CodePoints c(s);
    auto sub = [&](size_t a, size_t b) { return s.substr(c.off[a], c.off[b] - c.off[a]); };
    size_t start = 0;
    while (start < c.size()) {
      size_t lo = start + 1, hi = c.size();
      if (fits(sub(start, hi))) {
        lo = hi;
      } else {
        while (hi - lo > 1) {
          const size_t mid = lo + (hi - lo) / 2;
          (fits(sub(start, mid)) ? lo : hi) = mid;
        }
      }
      chunks.push_back(sub(start, lo));
      start = lo;
    }
  };
  std::function<void(const std::string&, int)> split_level = [&](const std::string& s, int level) {
    if (level == 3) return split_runs(s);
    const std::vector<Unit> units = level == 0   ? split_at_enders(s, r.sentence_enders, r.wide_sentence_enders, r)
                                    : level == 1 ? split_at_enders(s, r.clause_enders, r.wide_clause_enders, r)
                                                 : split_at_spaces(s);
    std::string cur;
    for (const Unit& u : units) {
      if (!fits(u.text)) {
        if (!cur.empty()) chunks.push_back(std::move(cur)), cur.clear();
        split_level(u.text, level + 1);
      } else if (cur.empty()) {
        cur = u.text;
      } else {
        std::string joined = cur + (u.space_before ? " " : "") + u.text;
        if (fits(joined)) {
          cur = std::move(joined);
        } else {
          chunks.push_back(std::move(cur));
          cur = u.text;
        }
      }
    }
    if (!cur.empty()) chunks.push_back(std::move(cur));
  };
  split_level(norm, 0);

  for (std::string& ch : chunks) {
    const CodePoints c(ch);
    size_t j = c.size();
    while (j > 0 && has(r.closers, c.cp[j - 1])) --j;
    if (j == 0 || !has(r.chunk_enders, c.cp[j - 1])) ch += r.continuation;
  }
  return chunks;
}

}  // namespace cbx
