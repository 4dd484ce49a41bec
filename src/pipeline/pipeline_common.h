// What the synthesis pipelines (Turbo, Multilingual) share: the error kinds the C API maps to
// status codes, per-call timings, the callback types, the text checks, the long-text chunker and
// the frame of their synthesize loops (SynthLoop).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace cbx {

// Error kinds the C API maps to status codes; all are cbx::Error.
struct TextError : Error {  // empty text, invalid UTF-8
  using Error::Error;
};
struct InvalidArgumentError : Error {  // a parameter out of range, an unknown language
  using Error::Error;
};
struct UnsupportedModelError : Error {  // a valid model this pipeline cannot run
  using Error::Error;
};
struct AbortedError : Error {  // the abort callback asked to stop
  using Error::Error;
};

// Wall times of one synthesize call, summed over chunks (ms).
struct SynthTimings {
  double text_ms = 0, t3_prefill_ms = 0, t3_decode_ms = 0, flow_ms = 0, cfm_ms = 0, hift_ms = 0, total_ms = 0;
  int64_t n_chunks = 0, n_text_tokens = 0, n_speech_tokens = 0, n_decode_steps = 0;
  int64_t chunks_at_limit = 0;       // chunks whose generation hit max_new_tokens without EOS
  int64_t chunks_prefix_reused = 0;  // Turbo chunks whose T3 voice prefix came from the cache
  int64_t n_samples = 0;
  int sample_rate = 24000;
  double audio_s() const { return double(n_samples) / double(sample_rate); }
  double rtf() const { return n_samples ? total_ms / 1000.0 / audio_s() : 0.0; }
};

// Audio of one finished text chunk (valid during the call). Return false to stop.
using SynthAudioFn = std::function<bool(const float* samples, int64_t n, int64_t chunk_index, int64_t n_chunks)>;
// Polled before the prefill and between decode steps and stages; return true to abort.
using SynthAbortFn = std::function<bool()>;
// Progress: called after each speech token of text chunk `chunk` (of n_chunks) with the tokens
// that chunk has so far (a front end's progress line; the server's metrics).
using SynthProgressFn = std::function<void(int64_t chunk, int64_t n_chunks, int64_t chunk_tokens)>;

double pipeline_now_ms();  // steady clock

// Throws TextError for invalid UTF-8 or text that is empty or only whitespace (Python
// str.isspace; upstream punc_norm would turn "" into a stock sentence).
void check_synth_text(const std::string& text);

// Where long normalised text may be cut. A sentence or clause ender (optionally followed by
// closers) ends a unit when a space follows it; the "wide" enders (CJK full-width punctuation,
// written without spaces) end one wherever they stand.
struct ChunkRules {
  std::u32string sentence_enders = U".!?";
  std::u32string clause_enders = U",;:";
  std::u32string closers = U"\"')]";
  std::u32string wide_sentence_enders;  // e.g. U"。！？"
  std::u32string wide_clause_enders;    // e.g. U"，、；："
  // A chunk that ends (before closers) in none of these was cut inside a sentence and gets
  // `continuation` appended (continuation prosody instead of the "." punc_norm would add).
  std::u32string chunk_enders = U".!?-,";
  std::string continuation = ",";
};

// Splits normalised text into chunks of at most `budget` tokens as counted by count_tokens,
// at the highest level that fits: whole sentences are packed greedily; a longer sentence is
// cut into clauses (packed among themselves), a longer clause between words (spaces), a
// longer word into code-point runs (the longest prefix that fits; one code point at least,
// so nothing is ever dropped). Units are rejoined as the text had them (one space, or
// nothing after a wide ender). Text that fits is returned whole and unchanged.
std::vector<std::string> split_into_chunks(const std::string& norm, int64_t budget,
                                           const std::function<int64_t(const std::string&)>& count_tokens,
                                           const ChunkRules& rules);

// The sampler seed of text chunk k of a call with `seed` (synthesize and pipeline/batch_synth.h).
inline uint64_t chunk_seed(uint64_t seed, int64_t k) { return seed + uint64_t(k) * 0x9E3779B97F4A7C15ull; }

// The frame of one synthesize call, the same for every variant: the timings (text front end,
// totals), the abort polling, the output's concatenation and its on_audio calls. The model's own
// work (T3, S3Gen, streaming) happens between begin_text / text_done and finish.
class SynthLoop {
 public:
  SynthLoop(int sample_rate, const SynthAudioFn& on_audio, const SynthAbortFn& should_abort);

  bool abort_requested() const { return should_abort_ && should_abort_(); }
  // Throws AbortedError when should_abort says so.
  void check_abort() const;
  // The text's chunks tokenized with `tokenize`: counts them and their tokens, and the text time.
  std::vector<std::vector<int32_t>> tokenize(const std::vector<std::string>& chunks,
                                             const std::function<std::vector<int32_t>(const std::string&)>& tokenize);
  int64_t n_chunks() const { return tm_.n_chunks; }
  // A finished text chunk's audio: appended to the output, then given to on_audio (false ->
  // AbortedError).
  void add_chunk(const std::vector<float>& wave, int64_t chunk);
  SynthTimings& timings() { return tm_; }
  std::vector<float>& audio() { return audio_; }  // the output so far (streaming appends to it)
  const SynthAudioFn& on_audio() const { return on_audio_; }
  // The output; the totals go to *timings when given.
  std::vector<float> finish(SynthTimings* timings);

 private:
  const SynthAudioFn& on_audio_;
  const SynthAbortFn& should_abort_;
  SynthTimings tm_;
  std::vector<float> audio_;
  double t_start_;
};

// The CFM noise and HiFT source generators' state: a request's chunks draw from them one after
// the other, so a caller that interleaves several requests' S3Gen runs (pipeline/batch_synth.h)
// keeps one per request and sets it before each of its chunks.
struct S3GenRngState {
  uint64_t cfm_seed = 0, cfm_calls = 0, hift_seed = 0, hift_calls = 0;
};

}  // namespace cbx
