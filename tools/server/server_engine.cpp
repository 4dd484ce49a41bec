#include "server_engine.h"

#include <cstdio>

namespace cbx::server {

namespace {
std::mutex g_log_mu;
std::atomic<bool> g_verbose{false};
}  // namespace

void log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "serve: %s\n", line.c_str());
  std::fflush(stderr);
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

void SpeechJob::drop(const std::string& why) {
  push(SpeechEvent::failed(CBX_ERR_ABORTED, why, 503));
}

void SpeechJob::run(cbx_model* model, const std::atomic<bool>& stop_all) {
  CallbackCtx ctx{this, &stop_all};
  cbx_callbacks cb;
  cb.struct_size = sizeof cb;
  // One call per audio block the pipeline hands out (today: per text chunk); copied out at once.
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
    case CBX_ERR_VOICE: e.http_status = 400; break;
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
    default: break;
  }
  push(std::move(e));
}

// ---- Engine ----

Engine::Engine(LoadedModel model, size_t max_queue, Metrics& metrics)
    : model_(std::move(model)), max_queue_(max_queue), metrics_(metrics) {
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
      mean_task_s_ = 0.8 * mean_task_s_ + 0.2 * dt;
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
