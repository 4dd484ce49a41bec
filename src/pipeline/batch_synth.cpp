#include "pipeline/batch_synth.h"

#include <utility>

#include "core/error.h"
#include "pipeline/pipeline_common.h"

namespace cbx {

namespace {
constexpr uint64_t kChunkSeedStep = 0x9E3779B97F4A7C15ull;  // TurboPipeline::synthesize's
}  // namespace

BatchSynth::BatchSynth(TurboPipeline& pipe, int max_batch) : pipe_(pipe), batch_(pipe.t3(), pipe.pool(), max_batch) {}

int64_t BatchSynth::submit(BatchSynthRequest r) {
  CBX_CHECK(can_admit(), "BatchSynth::submit: all %d rows are in use", batch_.max_batch());
  CBX_CHECK(!r.params.stream, "BatchSynth::submit: streaming inside a chunk is not batched (params.stream)");
  Req q;
  q.sp = pipe_.sampler_params(r.params);
  if (r.voice) {  // the checks synthesize's set_voice makes; the built-in voice stays in use
    pipe_.set_voice(*r.voice, "voice");
    pipe_.reset_voice();
  }
  for (const std::string& c : pipe_.split_text(r.text, r.params.max_chunk_tokens)) {
    q.ids.push_back(pipe_.tokenize(c));
    q.stats.n_text_tokens += int64_t(q.ids.back().size());
  }
  q.stats.n_chunks = int64_t(q.ids.size());
  // synthesize's reseed_s3gen(seed): the generators as they are right after it.
  const S3GenRngState saved = pipe_.s3gen_rng_state();
  pipe_.reseed_s3gen(r.params.seed);
  q.rng = pipe_.s3gen_rng_state();
  pipe_.set_s3gen_rng_state(saved);
  q.in = std::move(r);
  q.id = next_id_++;
  start_chunk(q);
  reqs_.push_back(std::move(q));
  return reqs_.back().id;
}

void BatchSynth::start_chunk(Req& q) {
  const std::vector<int32_t>& ids = q.ids[q.chunk];
  const Voice& v = voice_of(q);
  q.sp.seed = q.in.params.seed + uint64_t(q.chunk) * kChunkSeedStep;
  q.row = batch_.start(ids.data(), int64_t(ids.size()), v.speaker_emb.data(), int64_t(v.speaker_emb.size()),
                       v.cond_prompt_tokens.data(), int64_t(v.cond_prompt_tokens.size()), q.sp,
                       pipe_.max_new_tokens());
}

bool BatchSynth::finish_chunk(Req& q) {
  const T3TurboResult r = batch_.result(q.row);
  batch_.release(q.row);
  q.row = -1;
  q.stats.n_speech_tokens += int64_t(r.tokens.size());
  if (!r.stopped_eos && !r.stopped_all_inf && r.n_decode >= pipe_.max_new_tokens()) ++q.stats.chunks_at_limit;
  std::vector<float> wave;
  {
    // The request's voice and generator state for its S3Gen run; the built-in voice after it.
    struct Restore {
      TurboPipeline& p;
      ~Restore() { p.reset_voice(); }
    } restore{pipe_};
    if (q.in.voice) pipe_.set_voice(*q.in.voice, "voice");
    else pipe_.reset_voice();
    pipe_.set_s3gen_rng_state(q.rng);
    wave = pipe_.tokens_to_audio(r.speech_tokens);
    q.rng = pipe_.s3gen_rng_state();
  }
  q.stats.n_samples += int64_t(wave.size());
  const int64_t k = int64_t(q.chunk);
  if (q.in.on_audio && !q.in.on_audio(wave.data(), int64_t(wave.size()), k, q.stats.n_chunks))
    throw AbortedError("synthesis stopped by the audio callback");
  if (++q.chunk < q.ids.size()) {
    start_chunk(q);
    return false;
  }
  if (q.in.on_done) q.in.on_done(q.stats);
  return true;
}

void BatchSynth::finish_rows() {
  // A chunk that starts finished (its first token ends it) is handled in the same pass.
  for (auto it = reqs_.begin(); it != reqs_.end();) {
    bool over = false;
    try {
      while (!over && it->row >= 0 && batch_.finished(it->row)) over = finish_chunk(*it);
    } catch (...) {
      if (it->row >= 0) batch_.release(it->row);
      it->row = -1;
      over = true;
      if (it->in.on_error) it->in.on_error(std::current_exception());
    }
    it = over ? reqs_.erase(it) : std::next(it);
  }
}

int BatchSynth::step() {
  finish_rows();
  const int n = batch_.n_decoding() > 0 ? batch_.step() : 0;
  finish_rows();
  return n;
}

bool BatchSynth::cancel(int64_t id) {
  for (auto it = reqs_.begin(); it != reqs_.end(); ++it) {
    if (it->id != id) continue;
    if (it->row >= 0) batch_.release(it->row);
    reqs_.erase(it);
    return true;
  }
  return false;
}

void BatchSynth::fail_all(std::exception_ptr e) {
  std::list<Req> gone;
  gone.swap(reqs_);
  for (Req& q : gone) {
    if (q.row >= 0 && batch_.active(q.row)) batch_.release(q.row);
    if (q.in.on_error) q.in.on_error(e);
  }
}

bool BatchSynth::has(int64_t id) const {
  for (const Req& q : reqs_)
    if (q.id == id) return true;
  return false;
}

}  // namespace cbx
