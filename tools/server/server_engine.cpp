#include "server_engine.h"

#include <cstdio>
#include <new>

#include "pipeline/c_api_internal.h"
#include "pipeline/pipeline_common.h"

namespace cbx::server {

namespace {
std::mutex g_log_mu;
std::atomic<bool> g_verbose{false};
bool g_progress_shown = false;  // a log_progress line without its newline yet (under g_log_mu)
}  // namespace

void log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_progress_shown) std::fputc('\n', stderr);
  g_progress_shown = false;
  std::fprintf(stderr, "serve: %s\n", line.c_str());
  std::fflush(stderr);
}
void log_progress(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "\rserve: %s", line.c_str());
  std::fflush(stderr);
  g_progress_shown = true;
}
void log_verbose(const std::string& line) {
  if (g_verbose) log_line(line);
}
void set_verbose(bool on) { g_verbose = on; }

// ---- SpeechJob ----

namespace {
struct CallbackCtx {
  SpeechJob* job;
  const std::atomic<bool>* stop_all;
  bool timed_out = false;
};
}  // namespace

void SpeechJob::push(SpeechEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<SpeechEvent> SpeechJob::wait_event(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return std::nullopt;
  SpeechEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void SpeechJob::drop(const std::string& why) { push(SpeechEvent::failed(CBX_ERR_ABORTED, why, 503)); }

void SpeechJob::run(cbx_model* model, const std::atomic<bool>& stop_all) {
  CallbackCtx ctx{this, &stop_all};
  cbx_callbacks cb;
  cb.struct_size = sizeof cb;
  // One call per audio block the pipeline hands out (a streamed piece, or a whole text chunk with
  // --no-stream-synthesis); copied out at once.
  cb.on_audio = [](const float* samples, size_t n, int32_t, void* user) -> int {
    auto* c = static_cast<CallbackCtx*>(user);
    if (c->job->cancel) return 1;
    if (n > 0) c->job->push(SpeechEvent::audio(std::vector<float>(samples, samples + n)));
    return 0;
  };
  // Polled between decode steps: the client left, the deadline passed or the server is stopping.
  cb.should_abort = [](void* user) -> int {
    auto* c = static_cast<CallbackCtx*>(user);
    if (c->job->cancel || *c->stop_all) return 1;
    if (c->job->deadline && Clock::now() > *c->job->deadline) {
      c->timed_out = true;
      return 1;
    }
    return 0;
  };
  cb.user_data = &ctx;
  params.language = language.empty() ? nullptr : language.c_str();
  if (cancel) {
    push(SpeechEvent::failed(CBX_ERR_ABORTED, "cancelled: the client closed the connection", 499));
    return;
  }
  if (deadline && Clock::now() > *deadline) {
    push(SpeechEvent::failed(CBX_ERR_ABORTED, "the request timed out while queued (--timeout)", 504));
    return;
  }
  log_verbose("request " + std::to_string(id) + ": generation started");
  const cbx_status s = cbx_synthesize_voice(model, voice.get(), text.c_str(), &params, nullptr, nullptr, &cb);
  if (s == CBX_OK) {
    cbx_timings t;
    t.struct_size = sizeof t;
    if (cbx_model_last_timings(model, &t) == CBX_OK) {
      speech_tokens_ = t.n_speech_tokens;
      text_tokens_ = t.n_text_tokens;
      if (metrics) {
        metrics->add_speech_tokens(t.n_speech_tokens);
        metrics->add_audio_seconds(double(t.n_samples) / sample_rate);
      }
    }
    log_verbose("request " + std::to_string(id) + ": generation finished, " + std::to_string(speech_tokens_) +
                " speech tokens");
    push(SpeechEvent::done());
    return;
  }
  SpeechEvent e = SpeechEvent::failed(s, cbx_last_error(), 500);
  switch (s) {
    case CBX_ERR_INVALID_ARGUMENT:
    case CBX_ERR_TEXT:
    case CBX_ERR_VOICE:
      e.http_status = 400;
      break;
    case CBX_ERR_ABORTED:
      if (ctx.timed_out) {
        e.http_status = 504;
        e.message = "the request timed out while generating (--timeout)";
      } else if (stop_all) {
        e.http_status = 503;
        e.message = "the server is shutting down";
      } else {
        e.http_status = 499;
        e.message = "cancelled: the client closed the connection";
      }
      if (metrics) metrics->count_cancelled();
      log_verbose("request " + std::to_string(id) + ": generation cancelled (" + e.message + ")");
      break;
    default:
      break;
  }
  push(std::move(e));
}

// ---- SpeechJob, batched ----

void SpeechJob::push_cancelled(bool timed_out, bool stopping) {
  SpeechEvent e = SpeechEvent::failed(CBX_ERR_ABORTED, "cancelled: the client closed the connection", 499);
  if (timed_out) {
    e.http_status = 504;
    e.message = "the request timed out while generating (--timeout)";
  } else if (stopping) {
    e.http_status = 503;
    e.message = "the server is shutting down";
  }
  if (metrics) metrics->count_cancelled();
  log_verbose("request " + std::to_string(id) + ": generation cancelled (" + e.message + ")");
  push(std::move(e));
}

bool SpeechJob::batch_submit(cbx::BatchSynth& bs, cbx_model* model) {
  batch_over_ = true;
  if (cancel) {
    push(SpeechEvent::failed(CBX_ERR_ABORTED, "cancelled: the client closed the connection", 499));
    return false;
  }
  if (deadline && Clock::now() > *deadline) {
    push(SpeechEvent::failed(CBX_ERR_ABORTED, "the request timed out while queued (--timeout)", 504));
    return false;
  }
  cbx::BatchSynthRequest r;
  r.text = text;
  // The audio callback runs on the engine thread: copy each piece / chunk out at once.
  r.on_audio = [this](const float* s, int64_t n, int64_t, int64_t) {
    if (cancel) return false;
    if (n > 0) push(SpeechEvent::audio(std::vector<float>(s, s + n)));
    return true;
  };
  r.on_done = [this](const cbx::BatchSynthStats& st) {
    batch_over_ = true;
    speech_tokens_ = st.n_speech_tokens;
    text_tokens_ = st.n_text_tokens;
    if (metrics) {
      metrics->add_speech_tokens(st.n_speech_tokens);
      metrics->add_audio_seconds(double(st.n_samples) / sample_rate);
    }
    log_verbose("request " + std::to_string(id) + ": generation finished, " + std::to_string(st.n_speech_tokens) +
                " speech tokens");
    push(SpeechEvent::done());
  };
  r.on_error = [this](std::exception_ptr e) {
    batch_over_ = true;
    try {
      std::rethrow_exception(e);
    } catch (const cbx::AbortedError&) {
      push_cancelled(false, false);
    } catch (const std::exception& x) {
      push(SpeechEvent::failed(CBX_ERR_INTERNAL, x.what(), 500));
    } catch (...) {
      push(SpeechEvent::failed(CBX_ERR_INTERNAL, "unknown error", 500));
    }
  };
  try {
    params.language = language.empty() ? nullptr : language.c_str();
    // Streaming and its schedule as the C API's cbx_synthesize_voice takes them.
    if (cbx::model_mtl_pipeline(model))
      r.mtl_params = cbx::mtl_params_of(model, params);
    else
      r.params = cbx::turbo_params_of(model, params);
    if (const cbx::Voice* v = cbx::voice_of_handle(voice.get())) r.voice = std::make_shared<cbx::Voice>(*v);
    batch_id_ = bs.submit(std::move(r));
  } catch (const cbx::TextError& x) {
    push(SpeechEvent::failed(CBX_ERR_TEXT, x.what(), 400));
    return false;
  } catch (const cbx::InvalidArgumentError& x) {
    push(SpeechEvent::failed(CBX_ERR_INVALID_ARGUMENT, x.what(), 400));
    return false;
  } catch (const cbx::Error& x) {  // a voice the model cannot use, a sampler value out of range
    push(SpeechEvent::failed(CBX_ERR_VOICE, x.what(), 400));
    return false;
  } catch (const std::bad_alloc&) {
    push(SpeechEvent::failed(CBX_ERR_OUT_OF_MEMORY, "out of memory", 500));
    return false;
  } catch (const std::exception& x) {
    push(SpeechEvent::failed(CBX_ERR_INTERNAL, x.what(), 500));
    return false;
  }
  batch_over_ = false;
  log_verbose("request " + std::to_string(id) + ": generation started (batched)");
  return true;
}

bool SpeechJob::batch_check(cbx::BatchSynth& bs, const std::atomic<bool>& stop_all) {
  if (batch_over_) return false;
  const bool timed_out = deadline && Clock::now() > *deadline;
  if (!cancel && !stop_all && !timed_out) return false;
  bs.cancel(batch_id_);
  batch_over_ = true;
  push_cancelled(timed_out, stop_all);
  return true;
}

// ---- Engine ----

Engine::Engine(LoadedModel model, size_t max_queue, Metrics& metrics, int max_batch)
    : model_(std::move(model)), max_queue_(max_queue), max_batch_(max_batch), metrics_(metrics) {
  cbx::TurboPipeline* turbo = max_batch_ > 1 ? cbx::model_turbo_pipeline(model_.model) : nullptr;
  cbx::MtlPipeline* mtl = max_batch_ > 1 ? cbx::model_mtl_pipeline(model_.model) : nullptr;
  if (turbo || mtl)
    thread_ = std::thread([this, turbo, mtl] { loop_batched(turbo, mtl); });
  else
    thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(std::chrono::milliseconds(0)); }

bool Engine::submit(std::shared_ptr<Task> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(task));
  }
  metrics_.add_queue_depth(1);
  cv_.notify_all();
  return true;
}

size_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

double Engine::estimated_wait_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (double(queue_.size()) + (running_task_ ? 1.0 : 0.0)) * mean_task_s_;
}

void Engine::loop() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      running_task_ = true;
    }
    metrics_.add_queue_depth(-1);
    metrics_.add_active(1);
    const Clock::time_point t0 = Clock::now();
    task->run(model_.model, stop_all_);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    metrics_.add_active(-1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_task_ = false;
    }
    task_done(dt);
  }
}

void Engine::task_done(double dt) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mean_task_s_ = 0.8 * mean_task_s_ + 0.2 * dt;
  }
  idle_cv_.notify_all();
}

// The batching loop: between decode steps it admits queued speech requests into free rows and
// runs other tasks (voice uploads), ends the requests whose client left / deadline passed / the
// server stops, then advances every active request by one step (BatchSynth::step: one T3 token
// for all rows, then, oldest request first, the S3Gen runs of the streams that are due and of the
// chunks that finished, so their audio goes out before the next token; docs/server.md).
void Engine::loop_batched(cbx::TurboPipeline* turbo, cbx::MtlPipeline* mtl) {
  std::unique_ptr<cbx::BatchSynth> bs;
  {
    std::lock_guard<std::mutex> model_lock(cbx::model_mutex(model_.model));
    bs = turbo ? std::make_unique<cbx::BatchSynth>(*turbo, max_batch_)
               : std::make_unique<cbx::BatchSynth>(*mtl, max_batch_);
  }
  struct Active {
    std::shared_ptr<SpeechJob> job;
    Clock::time_point t0;
  };
  std::vector<Active> active;
  cbx::BatchSynthTimes seen;  // bs->times() as last exported to the metrics
  auto export_times = [&] {
    const cbx::BatchSynthTimes t = bs->times();
    metrics_.add_stage("decode", t.decode_steps - seen.decode_steps, t.decode_s - seen.decode_s);
    metrics_.add_stage("s3gen_stream", t.stream_runs - seen.stream_runs, t.stream_s - seen.stream_s);
    metrics_.add_stage("s3gen_final", t.final_runs - seen.final_runs, t.final_s - seen.final_s);
    metrics_.add_stage("s3gen_chunk", t.chunk_runs - seen.chunk_runs, t.chunk_s - seen.chunk_s);
    metrics_.add_stage("flow", 0, t.flow_s - seen.flow_s);
    metrics_.add_stage("cfm", 0, t.cfm_s - seen.cfm_s);
    metrics_.add_stage("hift", 0, t.hift_s - seen.hift_s);
    seen = t;
  };
  for (;;) {
    std::vector<std::shared_ptr<Task>> taken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (queue_.empty() && active.empty()) return;  // stopping, nothing left
      size_t rows = active.size();
      while (!queue_.empty()) {
        const bool speech = dynamic_cast<SpeechJob*>(queue_.front().get()) != nullptr;
        if (speech && rows >= size_t(max_batch_)) break;
        rows += speech ? 1 : 0;
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      running_task_ = true;
    }
    for (auto& t : taken) {
      metrics_.add_queue_depth(-1);
      metrics_.add_active(1);
      const Clock::time_point t0 = Clock::now();
      if (auto job = std::dynamic_pointer_cast<SpeechJob>(t)) {
        bool joined = false;
        {
          std::lock_guard<std::mutex> model_lock(cbx::model_mutex(model_.model));
          joined = job->batch_submit(*bs, model_.model);
        }
        if (joined) {
          active.push_back({job, t0});
          continue;
        }
      } else {
        t->run(model_.model, stop_all_);  // takes the model's lock itself, through the C API
      }
      metrics_.add_active(-1);
      task_done(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    {
      std::lock_guard<std::mutex> model_lock(cbx::model_mutex(model_.model));
      for (const Active& a : active) a.job->batch_check(*bs, stop_all_);
      if (bs->n_requests() > 0) {
        try {
          bs->step();
        } catch (...) {
          bs->fail_all(std::current_exception());
        }
        export_times();
      }
    }
    for (auto it = active.begin(); it != active.end();) {
      if (!it->job->batch_over()) {
        ++it;
        continue;
      }
      metrics_.add_active(-1);
      task_done(std::chrono::duration<double>(Clock::now() - it->t0).count());
      it = active.erase(it);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_task_ = !active.empty();
    }
    idle_cv_.notify_all();
  }
}

void Engine::stop(std::chrono::milliseconds grace) {
  std::deque<std::shared_ptr<Task>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : dropped) {
    metrics_.add_queue_depth(-1);
    t->drop("the server is shutting down");
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_for(lock, grace, [&] { return !running_task_; })) stop_all_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace cbx::server
