#include "pipeline/batch_synth.h"

#include <utility>

#include "core/error.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/synth_options.h"

namespace cbx {

namespace {
// The stream pool: the pipeline's own stream and max_batch - 1 more over its S3GenStage.
template <class P>
void make_streams(P& pipe, int max_batch, std::vector<std::unique_ptr<S3GenStream>>& own,
                  std::vector<S3GenStream*>& pool) {
  S3GenStream& first = pipe.s3gen_stream();
  pool.push_back(&first);
  for (int i = 1; i < max_batch; ++i) {
    own.push_back(std::make_unique<S3GenStream>(first.stage(), pipe.config()));
    pool.push_back(own.back().get());
  }
}
}  // namespace

BatchSynth::BatchSynth(TurboPipeline& pipe, int max_batch)
    : turbo_(&pipe), batch_(std::make_unique<T3Batch>(pipe.t3(), pipe.pool(), max_batch)) {
  make_streams(pipe, max_batch, own_streams_, streams_);
}
BatchSynth::BatchSynth(MtlPipeline& pipe, int max_batch)
    : mtl_(&pipe), mtl_batch_(std::make_unique<T3MtlBatch>(pipe.t3(), pipe.pool(), max_batch)) {
  make_streams(pipe, max_batch, own_streams_, streams_);
}
BatchSynth::~BatchSynth() = default;

S3GenStream* BatchSynth::free_stream() const {
  for (S3GenStream* s : streams_) {
    bool held = false;
    for (const Req& q : reqs_) held = held || q.s3_stream == s;
    if (!held) return s;
  }
  return nullptr;
}

template <class F>
void BatchSynth::with_rng(Req& q, F&& fn) {
  with_pipe([&](auto& p) {
    p.set_s3gen_rng_state(q.rng);
    fn();
    q.rng = p.s3gen_rng_state();
  });
}

int BatchSynth::max_batch() const { return batch_ ? batch_->max_batch() : mtl_batch_->max_batch(); }
int BatchSynth::n_t3_active() const { return batch_ ? batch_->n_active() : mtl_batch_->n_active(); }
bool BatchSynth::row_finished(int row) const { return batch_ ? batch_->finished(row) : mtl_batch_->finished(row); }
bool BatchSynth::row_active(int row) const { return batch_ ? batch_->active(row) : mtl_batch_->active(row); }
void BatchSynth::row_release(int row) {
  if (batch_)
    batch_->release(row);
  else
    mtl_batch_->release(row);
}
const Voice& BatchSynth::voice_of(const Req& q) const {
  return q.in.voice ? *q.in.voice : with_pipe([](auto& p) -> const Voice& { return p.builtin_voice(); });
}

GemmPrecision BatchSynth::gemm_precision() const { return turbo_ ? turbo_->gemm_precision() : mtl_->gemm_precision(); }

int64_t BatchSynth::submit(BatchSynthRequest r) {
  CBX_CHECK(can_admit(), "BatchSynth::submit: all %d rows are in use", max_batch());
  GemmPrecisionScope gemm_scope(gemm_precision());  // the pipeline's, as its synthesize holds
  Req q;
  uint64_t seed = 0;
  if (turbo_) {
    q.sp = turbo_->sampler_params(r.params);
    seed = r.params.seed;
    q.stream = r.params.stream;
    if (q.stream) check_stream_schedule(r.params.stream_schedule);
  } else {
    q.ms = mtl_->sampling_of(r.mtl_params, &q.cond.exaggeration);
    seed = r.mtl_params.seed;
    q.stream = r.mtl_params.stream;
    if (q.stream) check_stream_schedule(r.mtl_params.stream_schedule);
  }
  if (r.voice) {  // the checks synthesize's set_voice makes; the built-in voice stays in use
    with_pipe([&](auto& p) {
      p.set_voice(*r.voice, "voice");
      p.reset_voice();
    });
  }
  if (turbo_) {
    for (const std::string& c : turbo_->split_text(r.text, r.params.max_chunk_tokens)) {
      q.ids.push_back(turbo_->tokenize(c));
      q.stats.n_text_tokens += int64_t(q.ids.back().size());
    }
  } else {
    const MtlSynthParams& p = r.mtl_params;
    const std::string lang = mtl_->check_language(p.language);
    for (const std::string& c : mtl_->split_text(r.text, lang, p.max_chunk_tokens)) {
      q.ids.push_back(mtl_->tokenize(c, lang));
      q.stats.n_text_tokens += int64_t(q.ids.back().size());
    }
  }
  q.stats.n_chunks = int64_t(q.ids.size());
  // synthesize's reseed_s3gen(seed): the generators as they are right after it.
  with_pipe([&](auto& p) {
    const S3GenRngState saved = p.s3gen_rng_state();
    p.reseed_s3gen(seed);
    q.rng = p.s3gen_rng_state();
    p.set_s3gen_rng_state(saved);
  });
  q.in = std::move(r);
  q.id = next_id_++;
  if (q.stream) {
    q.s3_stream = free_stream();
    CBX_CHECK(q.s3_stream, "BatchSynth::submit: no free stream (%d in use)", int(streams_.size()));
  }
  // In the list before its chunk starts: the chunk's StreamRun refers to the request's fields.
  reqs_.push_back(std::move(q));
  try {
    start_chunk(reqs_.back());
  } catch (...) {
    reqs_.pop_back();
    throw;
  }
  return reqs_.back().id;
}

void BatchSynth::start_chunk(Req& q) {
  const std::vector<int32_t>& ids = q.ids[q.chunk];
  const Voice& v = voice_of(q);
  if (q.stream) {
    q.run.reset();
    q.run_audio.clear();
    q.fed = 0;
    q.seen_sos = q.ended = false;
    const StreamSchedule& sched = turbo_ ? q.in.params.stream_schedule : q.in.mtl_params.stream_schedule;
    q.run = std::make_unique<StreamRun>(q.s3_stream, v, sched, &s3_tm_, q.run_audio, q.in.on_audio, int64_t(q.chunk),
                                        q.stats.n_chunks);
  }
  if (mtl_) {
    q.ms.seed = chunk_seed(q.in.mtl_params.seed, int64_t(q.chunk));
    if (q.cond.speaker_emb.empty()) {
      q.cond.speaker_emb = v.speaker_emb;
      q.cond.cond_prompt_tokens = v.cond_prompt_tokens;
    }
    q.row = mtl_batch_->start(q.cond, ids, q.ms, mtl_->max_new_tokens());
    return;
  }
  q.sp.seed = chunk_seed(q.in.params.seed, int64_t(q.chunk));
  q.row =
      batch_->start(ids.data(), int64_t(ids.size()), v.speaker_emb.data(), int64_t(v.speaker_emb.size()),
                    v.cond_prompt_tokens.data(), int64_t(v.cond_prompt_tokens.size()), q.sp, turbo_->max_new_tokens());
}

void BatchSynth::feed_stream(Req& q) {
  const std::vector<int32_t>& toks = batch_ ? batch_->tokens(q.row) : mtl_batch_->tokens(q.row);
  if (q.fed >= toks.size()) return;
  const int64_t runs0 = q.s3_stream->runs_total();  // runs() restarts when a generation begins
  const double t0 = pipeline_now_ms();
  with_rng(q, [&] {
    for (; q.fed < toks.size(); ++q.fed) {
      const int32_t tok = toks[q.fed];
      if (turbo_) {  // TurboPipeline::synthesize's on_step
        q.run->on_token(tok, tok >= 0 && tok < turbo_->config().t3.start_speech_token);
        continue;
      }
      const T3Config& tc = mtl_->config().t3;  // MtlPipeline::synthesize's on_token
      if (q.ended) continue;
      if (tok == tc.stop_speech_token) {
        q.ended = true;
      } else if (tok == tc.start_speech_token) {
        if (!q.seen_sos) (void)q.run->restart();
        q.seen_sos = true;
      } else {
        q.run->on_token(tok, tok >= 0 && tok < tc.start_speech_token);
      }
    }
  });
  if (q.s3_stream->runs_total() > runs0) {  // the token loop alone costs next to nothing
    times_.stream_runs += q.s3_stream->runs_total() - runs0;
    times_.stream_s += (pipeline_now_ms() - t0) / 1000.0;
  }
  q.stats.n_samples += int64_t(q.run_audio.size());
  q.run_audio.clear();
}

bool BatchSynth::finish_chunk(Req& q) {
  std::vector<int32_t> speech;
  if (q.stream) feed_stream(q);
  if (mtl_) {
    const T3MtlStats st = mtl_batch_->stats(q.row);
    const bool all_inf = mtl_batch_->all_inf(q.row);
    speech = MtlPipeline::postprocess(mtl_batch_->tokens(q.row), mtl_->config().t3);
    mtl_batch_->release(q.row);
    q.row = -1;
    CBX_CHECK(!all_inf, "t3 mtl: every processed logit is -inf at step %lld (non-finite logits?)",
              (long long)st.n_steps);
    if (st.hit_limit) ++q.stats.chunks_at_limit;
    if (q.stream) speech = q.run->tokens();  // synthesize's streamed tokens (restart decided as they came)
    q.stats.n_speech_tokens += int64_t(speech.size());
  } else {
    const T3TurboResult r = batch_->result(q.row);
    batch_->release(q.row);
    q.row = -1;
    q.stats.n_speech_tokens += int64_t(r.tokens.size());
    if (!r.stopped_eos && !r.stopped_all_inf && r.n_decode >= turbo_->max_new_tokens()) ++q.stats.chunks_at_limit;
    speech = r.speech_tokens;
  }
  if (q.stream) {
    const int64_t keep = mtl_ ? mtl_->tail_keep_samples(int64_t(speech.size())) : -1;
    const double t0 = pipeline_now_ms();
    with_rng(q, [&] { q.run->finish(speech, keep); });
    if (!speech.empty()) {
      ++times_.final_runs;
      times_.final_s += (pipeline_now_ms() - t0) / 1000.0;
    }
    q.stats.n_samples += int64_t(q.run_audio.size());
    q.run.reset();
    q.run_audio.clear();
    return next_chunk(q);
  }
  std::vector<float> wave;
  with_pipe([&](auto& p) {
    // The request's voice and generator state for its S3Gen run; the built-in voice after it.
    struct Restore {
      decltype(p)& pp;
      ~Restore() { pp.reset_voice(); }
    } restore{p};
    if (q.in.voice)
      p.set_voice(*q.in.voice, "voice");
    else
      p.reset_voice();
    p.set_s3gen_rng_state(q.rng);
    const double t0 = pipeline_now_ms();
    wave = p.tokens_to_audio(speech, &s3_tm_);
    ++times_.chunk_runs;
    times_.chunk_s += (pipeline_now_ms() - t0) / 1000.0;
    q.rng = p.s3gen_rng_state();
  });
  q.stats.n_samples += int64_t(wave.size());
  const int64_t k = int64_t(q.chunk);
  if (q.in.on_audio && !q.in.on_audio(wave.data(), int64_t(wave.size()), k, q.stats.n_chunks))
    throw AbortedError("synthesis stopped by the audio callback");
  return next_chunk(q);
}

bool BatchSynth::next_chunk(Req& q) {
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
      if (it->stream && it->row >= 0) feed_stream(*it);
      while (!over && it->row >= 0 && row_finished(it->row)) over = finish_chunk(*it);
    } catch (...) {
      if (it->row >= 0) row_release(it->row);
      it->row = -1;
      over = true;
      if (it->in.on_error) it->in.on_error(std::current_exception());
    }
    it = over ? reqs_.erase(it) : std::next(it);
  }
}

int BatchSynth::step() {
  GemmPrecisionScope gemm_scope(gemm_precision());
  finish_rows();
  int n = 0;
  const double t0 = pipeline_now_ms();
  if (batch_)
    n = batch_->n_decoding() > 0 ? batch_->step() : 0;
  else
    n = mtl_batch_->n_decoding() > 0 ? mtl_batch_->step() : 0;
  if (n > 0) {
    ++times_.decode_steps;
    times_.decode_s += (pipeline_now_ms() - t0) / 1000.0;
  }
  finish_rows();
  return n;
}

bool BatchSynth::cancel(int64_t id) {
  for (auto it = reqs_.begin(); it != reqs_.end(); ++it) {
    if (it->id != id) continue;
    if (it->row >= 0) row_release(it->row);
    reqs_.erase(it);
    return true;
  }
  return false;
}

void BatchSynth::fail_all(std::exception_ptr e) {
  std::list<Req> gone;
  gone.swap(reqs_);
  for (Req& q : gone) {
    if (q.row >= 0 && row_active(q.row)) row_release(q.row);
    if (q.in.on_error) q.in.on_error(e);
  }
}

BatchSynthTimes BatchSynth::times() const {
  BatchSynthTimes t = times_;
  t.flow_s = s3_tm_.flow_ms / 1000.0;
  t.cfm_s = s3_tm_.cfm_ms / 1000.0;
  t.hift_s = s3_tm_.hift_ms / 1000.0;
  return t;
}

bool BatchSynth::has(int64_t id) const {
  for (const Req& q : reqs_)
    if (q.id == id) return true;
  return false;
}

}  // namespace cbx
