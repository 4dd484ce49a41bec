// Request-level continuous batching over a Turbo / Nano or a Multilingual pipeline (a server's
// engine drives it).
//
// Up to max_batch requests are active at once, each in one row of a T3Batch (Turbo / Nano,
// models/t3_batch.h) or one request slot of a T3MtlBatch (Multilingual, models/t3_mtl_batch.h:
// a CFG pair of rows): a request's text is split and tokenized as the pipeline's synthesize does,
// its chunks are decoded one after the other in its row, and the rows of all active requests
// advance together one token per step(). When a row's chunk has finished decoding, that chunk's
// S3Gen/HiFT runs at once (between steps, on the pipeline's pool) and its audio goes to the
// request's on_audio; then the request's next chunk starts in the freed row, or the request is
// done.
//
// Every request's audio is identical, sample for sample, to synthesize of the same text, voice
// and parameters alone (TurboPipeline's or MtlPipeline's):
//  - chunk k's sampler seed is seed + k * 0x9E3779B97F4A7C15 and its token limit the pipeline's,
//    as in synthesize; T3Batch / T3MtlBatch give a row generate's tokens; Multilingual chunks
//    are post-processed and tail-trimmed as synthesize does (MtlPipeline::postprocess,
//    tokens_to_audio), in the request's language, with its exaggeration;
//  - synthesize reseeds the CFM / HiFT generators once per request and draws from them chunk
//    after chunk; here each request keeps its own generator state (S3GenRngState), set before
//    each of its S3Gen runs and saved after it, so other requests' chunks in between change
//    nothing; the request's voice is set for its S3Gen run and the built-in one restored after.
// Streaming inside a chunk (TurboSynthParams / MtlSynthParams::stream, stream_synth.h): such a
// request holds one S3GenStream of a pool of max_batch (the pipeline's own stream and
// max_batch - 1 more, reserved at construction, all over the pipeline's one S3GenStage: runs are
// sequential). Its row's tokens go to a StreamRun as they are sampled, in synthesize's order and
// with its filtering (Multilingual: start-of-speech restart, nothing after the stop token); when
// the stream's schedule is due, its S3Gen run happens between steps with the request's generator
// state set (S3GenStream::begin draws the generation's noise), and every piece goes to on_audio.
// The chunk's end runs the stream's finish (Multilingual: with the tail trim). The pieces, and
// their boundaries, are those of synthesize with stream = true alone.
// Order between steps (finish_rows): requests oldest first; for each, its stream's due runs, then
// the finished chunk's S3Gen. All of them run before the next decode step.
// Requests join (submit) and leave (done, cancel, failure) between steps.
// Not thread-safe: one caller drives it, and nothing else may use the pipeline meanwhile.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "models/sampler.h"
#include "models/t3_batch.h"
#include "models/t3_mtl_batch.h"
#include "ops/matmul.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/stream_synth.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace cbx {

// What a finished request produced (SynthTimings' counters of synthesize).
struct BatchSynthStats {
  int64_t n_chunks = 0, n_text_tokens = 0, n_speech_tokens = 0, n_samples = 0, chunks_at_limit = 0;
};

// Where a BatchSynth's time went since construction (wall seconds on the driving thread; the
// server's GET /metrics exports them). S3Gen runs: stream_* the runs a streaming request's
// schedule made due during decoding (S3GenStream::push), final_* the last run of a streamed
// chunk (finish), chunk_* the S3Gen of a non-streamed chunk; flow_s / cfm_s / hift_s split all of
// them by stage.
struct BatchSynthTimes {
  int64_t decode_steps = 0, stream_runs = 0, final_runs = 0, chunk_runs = 0;
  double decode_s = 0, stream_s = 0, final_s = 0, chunk_s = 0, flow_s = 0, cfm_s = 0, hift_s = 0;
};

struct BatchSynthRequest {
  std::string text;
  // Turbo / Nano: seed, sampler values, max_chunk_tokens, stream + stream_schedule
  TurboSynthParams params;
  // Multilingual: language, seed, sampler values, stream + stream_schedule (on_progress unused)
  MtlSynthParams mtl_params;
  std::shared_ptr<const Voice> voice;  // null: the pipeline's built-in voice
  // Each chunk's audio, or each streamed piece of it, in order (synthesize's on_audio). false:
  // stop; the request then ends through on_error with an AbortedError.
  SynthAudioFn on_audio;
  std::function<void(const BatchSynthStats&)> on_done;
  // The request failed after submit (its S3Gen, a callback that threw, on_audio said stop); it
  // has left the batch. Not called for cancel().
  std::function<void(std::exception_ptr)> on_error;
};

class BatchSynth {
 public:
  // pipe must outlive this object; max_batch >= 1 requests (the T3 batch's slots are reserved now).
  BatchSynth(TurboPipeline& pipe, int max_batch);
  BatchSynth(MtlPipeline& pipe, int max_batch);
  BatchSynth(const BatchSynth&) = delete;
  BatchSynth& operator=(const BatchSynth&) = delete;
  ~BatchSynth();

  // Checks the request (text, parameters, voice: the errors synthesize gives), splits and
  // tokenizes its text and starts its first chunk in a free row; returns its id (> 0). Throws
  // TextError / InvalidArgumentError / cbx::Error for a bad request, cbx::Error when no row is
  // free (see can_admit). A request whose first token ends its chunk is handled by the next step().
  int64_t submit(BatchSynthRequest r);
  bool can_admit() const { return int(reqs_.size()) < max_batch(); }

  // Between steps (finish_rows, oldest request first): the due stream runs of streaming requests
  // and S3Gen for every chunk that has finished decoding (handing out its audio, starting the
  // request's next chunk or finishing the request); then one decode step of all active rows; then
  // finish_rows again for the tokens that step sampled. Returns the rows the decode step advanced.
  // A failure of the decode step itself throws (the batch is then unusable: fail_all).
  int step();

  // Ends a request between steps: frees its row; no callback is called. false: no such request.
  bool cancel(int64_t id);
  // Ends every request with on_error(e) (e.g. after step() threw, or at shutdown).
  void fail_all(std::exception_ptr e);

  bool has(int64_t id) const;
  int n_requests() const { return int(reqs_.size()); }
  int max_batch() const;
  int n_t3_active() const;  // requests holding a T3 batch slot
  BatchSynthTimes times() const;

 private:
  struct Req {
    int64_t id = 0;
    BatchSynthRequest in;
    SamplerParams sp;  // Turbo / Nano
    T3MtlSampling ms;  // Multilingual, with its conditioning
    T3MtlCond cond;
    std::vector<std::vector<int32_t>> ids;  // token ids per text chunk
    size_t chunk = 0;                       // the chunk being decoded
    int row = -1;
    S3GenRngState rng;
    BatchSynthStats stats;
    // Streaming (stream true): the pool's stream it holds, the chunk's StreamRun (its audio
    // scratch: the pieces of the current run), the row tokens fed to it so far, and
    // MtlPipeline::synthesize's start/stop state of the chunk.
    bool stream = false;
    S3GenStream* s3_stream = nullptr;
    std::unique_ptr<StreamRun> run;
    std::vector<float> run_audio;
    size_t fed = 0;
    bool seen_sos = false, ended = false;
  };
  const Voice& voice_of(const Req& q) const;
  GemmPrecision gemm_precision() const;  // the pipeline's (its load params)
  void start_chunk(Req& q);
  // The T3 batch's rows / request slots, whichever variant.
  bool row_finished(int row) const;
  bool row_active(int row) const;
  void row_release(int row);
  // fn(pipeline) with the TurboPipeline or MtlPipeline (the methods both have).
  template <class F>
  decltype(auto) with_pipe(F&& fn) const {
    return turbo_ ? fn(*turbo_) : fn(*mtl_);
  }
  // S3Gen of every finished row's chunk; a request that ends leaves reqs_.
  void finish_rows();
  // The chunk of q that just finished decoding: audio out, next chunk started. true: q is over.
  bool finish_chunk(Req& q);
  // Starts q's next chunk or ends q (on_done). true: q is over.
  bool next_chunk(Req& q);
  // Feeds the row's new tokens to q's StreamRun (its due runs, with q's generator state).
  void feed_stream(Req& q);
  // fn() with q's generator state set before and saved after.
  template <class F>
  void with_rng(Req& q, F&& fn);
  S3GenStream* free_stream() const;

  TurboPipeline* turbo_ = nullptr;  // exactly one of the two pipelines
  MtlPipeline* mtl_ = nullptr;
  std::unique_ptr<T3Batch> batch_;         // Turbo / Nano
  std::unique_ptr<T3MtlBatch> mtl_batch_;  // Multilingual
  std::list<Req> reqs_;
  std::vector<std::unique_ptr<S3GenStream>> own_streams_;  // the pool beyond the pipeline's stream
  std::vector<S3GenStream*> streams_;                      // the pool: max_batch streams
  int64_t next_id_ = 1;
  BatchSynthTimes times_;
  SynthTimings s3_tm_;  // flow / CFM / HiFT ms of every S3Gen run
};

}  // namespace cbx
