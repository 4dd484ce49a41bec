// Streaming S3Gen (docs/streaming.md): the audio of one generation in pieces while T3 is still
// decoding. Every time the schedule says so, S3Gen runs over the voice prompt and the speech
// tokens so far the way upstream's flow does with finalize=False: the encoder's last
// pre_lookahead_len x token_mel_ratio frames (whose right context is not known yet) are left out
// of the CFM, and only mel frames not emitted before are kept. The last run (finish) has
// finalize=True. Emitted mel frames never change.
//
//   - Noise: the CFM noise is drawn once per generation for the longest length, the HiFT phases
//     and noise once per generation by absolute sample position, exactly as the non-streamed
//     S3GenStage::to_audio would draw them (same generator calls), so a frame position gets the
//     same noise in every run and a seeded stream is deterministic.
//   - Context window: a run keeps the last prompt_tokens prompt tokens (with their prompt mel)
//     and the last context_tokens generated tokens before the first new frame; earlier tokens
//     are left out, which bounds a run's cost (0 = keep all: the last run then equals the
//     non-streamed S3Gen on the frames it emits).
//   - HiFT: each run vocodes the new mel frames plus kHiftContext already emitted frames on the
//     left; the last kHiftHold frames' audio is held back (its right context is not known yet)
//     and cross-faded (raised cosine over kHiftFade frames) with the next run's. The harmonic
//     source continues its phase at every join (HiftDraws::cycle_start): no click, gap or
//     repeated sample. The start trim/fade applies once, to the generation's first samples.
//
// The streamed audio has exactly the non-streamed length for the same tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"
#include "pipeline/pipeline_common.h"

namespace cbx {

class S3GenStage;
struct Voice;

// When S3Gen runs during a generation (speech tokens after post-processing).
struct StreamSchedule {
  int64_t first_tokens = 25;    // tokens before the first run (the first audio)
  int64_t chunk_tokens = 60;    // new tokens between later runs
  int64_t context_tokens = 40;  // generated tokens of left context a run keeps; 0 = all
  int64_t prompt_tokens = 100;  // prompt tokens (from its end) a run keeps; 0 = all
};

// A variant's default schedule: Turbo / Nano the StreamSchedule defaults above; Multilingual
// first_tokens 20 and prompt_tokens 50: its CFM runs 10 CFG steps (~10x Turbo's 2), so a smaller
// first run and prompt window keep its first audio early (docs/streaming.md).
StreamSchedule default_stream_schedule(Variant v);

// Throws InvalidArgumentError naming the field: first_tokens / chunk_tokens must be 1 .. 10000,
// context_tokens and prompt_tokens 0 .. 10000 (prompt_tokens > 0 must keep at least 1 token).
void check_stream_schedule(const StreamSchedule& s);

// Audio out of a stream: the samples (valid during the call).
using StreamSink = std::function<void(const float* samples, int64_t n)>;

class S3GenStream {
 public:
  static constexpr int64_t kHiftContext = 16;  // frames of left context per HiFT run
  static constexpr int64_t kHiftHold = 16;     // frames held back at a non-final run's end
  static constexpr int64_t kHiftFade = 4;      // frames cross-faded at a join (<= kHiftHold)

  // s3 must outlive this object; buffers are reserved here for s3's largest generation.
  explicit S3GenStream(S3GenStage& s3, const ModelConfig& c);
  ~S3GenStream();

  // Starts a generation with voice v (it must stay alive until finish) and draws its noise.
  void begin(const Voice& v, const StreamSchedule& s);
  // Forgets the tokens of the generation so far (Multilingual: T3 sampled a start-of-speech
  // token, which drops the tokens before it), keeping its noise. Only before any audio was
  // emitted: returns false (and changes nothing) after.
  bool restart();
  // Whether the schedule runs S3Gen once n_tokens speech tokens exist.
  bool due(int64_t n_tokens) const { return n_tokens >= next_at_; }
  // A finalize=False run over tokens [n] (the post-processed tokens so far, n <= max_speech):
  // passes the new audio (possibly none) to sink. Adds the stage times to tm (may be null).
  void push(const std::vector<int32_t>& tokens, SynthTimings* tm, const StreamSink& sink);
  // The last run (finalize=True) over all tokens; keep_samples >= 0 caps the generation's total
  // (Multilingual's tail trim). Returns the generation's total samples.
  int64_t finish(const std::vector<int32_t>& tokens, SynthTimings* tm, const StreamSink& sink,
                 int64_t keep_samples = -1);

  int64_t runs() const { return runs_; }              // S3Gen runs of this generation
  int64_t runs_total() const { return runs_total_; }  // S3Gen runs of this object, all generations
  // The generation's mel frames so far ([M, mel_frames()], row stride mel_stride()) and the
  // first frame the last run added (tests compare them with the non-streamed mel).
  const float* mel() const { return mel_.data(); }
  int64_t mel_frames() const { return mel_done_; }
  int64_t mel_stride() const { return max_out_frames_; }
  int64_t last_run_first_frame() const { return last_first_; }
  S3GenStage& stage() { return s3_; }
  int64_t emitted_samples() const { return emitted_; }
  int64_t cfm_frames() const { return cfm_frames_; }  // CFM frames run (all runs)

 private:
  void run(const std::vector<int32_t>& tokens, bool finalize, SynthTimings* tm, const StreamSink& sink,
           int64_t keep_samples);
  void vocode(int64_t g_end, bool finalize, SynthTimings* tm, const StreamSink& sink, int64_t keep_samples);
  void emit(float* x, int64_t n, const StreamSink& sink, int64_t keep_samples);

  S3GenStage& s3_;
  const ModelConfig& c_;
  const Voice* v_ = nullptr;
  StreamSchedule sched_;
  int64_t M_ = 80, ratio_ = 2, spf_ = 480, H1_ = 9, max_flow_frames_ = 0, max_out_frames_ = 0;
  std::vector<float> cfm_noise_, noise_win_;  // [M, max_flow_frames]
  std::vector<float> mel_;                    // [M, max_out_frames]: emitted mel frames
  std::unique_ptr<float[]> hift_noise_;       // [H1, spf max_out_frames], filled block by block
  std::vector<float> hift_phases_;
  uint64_t hift_key_ = 0;
  int64_t noise_blocks_ = 0;    // HiFT noise blocks filled
  std::vector<double> cycles_;  // harmonic cycles at the start of frame a_done_
  std::vector<float> tail_;     // held-back audio of frames [a_done_, + kHiftFade)
  bool have_tail_ = false;
  std::vector<float> out_;  // emission scratch
  int64_t next_at_ = 0, last_first_ = 0, mel_done_ = 0, a_done_ = 0, emitted_ = 0, runs_ = 0, cfm_frames_ = 0;
  int64_t runs_total_ = 0;
};

// Log-mel (S3GenMel, 480-sample frames) distance of x from ref (n samples each): the relative
// L2 |mel(x) - mel(ref)| / |mel(ref)| over the frames within near_frames of a join (sample
// positions where a streamed piece starts), and over the other frames.
struct StreamDistance {
  double near_joins = 0, elsewhere = 0;
  int64_t n_near = 0, n_else = 0;  // frames in each region
};
StreamDistance stream_logmel_distance(const float* ref, const float* x, int64_t n, const std::vector<int64_t>& joins,
                                      int64_t near_frames = 2);

// Streams a generation whose post-processed tokens are known (tests, benches): tokens
// [0, n_streamed) arrive one at a time as T3 would give them (runs when due), then finish runs
// over all of them (synthesize streams the tokens before the appended silence). Returns the
// concatenated pieces.
std::vector<float> stream_tokens(S3GenStream& s, const Voice& v, const StreamSchedule& sched,
                                 const std::vector<int32_t>& tokens, int64_t n_streamed, SynthTimings* tm,
                                 const StreamSink& sink = nullptr, int64_t keep_samples = -1);

// One text chunk's stream inside a pipeline's synthesize: collects the speech tokens as T3
// samples them, runs the stream when the schedule says so, appends every piece to audio and
// passes it to on_audio (false -> AbortedError). With a null stream it does nothing. The
// generation begins (draws its noise) at the first speech token, or in finish: a chunk without
// speech tokens draws nothing, as the non-streamed path (Multilingual) does not.
class StreamRun {
 public:
  // Throws InvalidArgumentError for a bad schedule (check_stream_schedule).
  StreamRun(S3GenStream* s, const Voice& v, const StreamSchedule& sched, SynthTimings* tm, std::vector<float>& audio,
            const SynthAudioFn& on_audio, int64_t chunk, int64_t n_chunks);
  // A sampled token; speech: it is kept by the post-processing (a speech token, not BOS/EOS).
  void on_token(int32_t token, bool speech);
  // Drops the speech tokens collected so far (S3GenStream::restart); false when audio of them
  // was already emitted (then they stay).
  bool restart();
  // The speech tokens collected so far.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The last run over the post-processed tokens (silence included; none: no audio);
  // keep_samples as S3GenStream::finish.
  void finish(const std::vector<int32_t>& speech_tokens, int64_t keep_samples = -1);
  double ms() const { return ms_; }  // wall time of the runs made during decoding
  int64_t pieces() const { return pieces_; }

 private:
  void begin();

  S3GenStream* s_;
  const Voice& v_;
  StreamSchedule sched_;
  bool begun_ = false;
  SynthTimings* tm_;
  std::vector<float>& audio_;
  SynthAudioFn on_audio_;  // a copy: callers may pass a temporary (nullptr, a lambda)
  int64_t chunk_, n_chunks_, pieces_ = 0;
  std::vector<int32_t> tokens_;
  double ms_ = 0;
  StreamSink sink_;
};

}  // namespace cbx
