// The scheduler of `chatterbox serve`: one engine thread per loaded model runs that model's work
// (speech synthesis, voice cloning) one task at a time, in arrival order, from a bounded queue.
// Connection threads only parse, validate, queue and stream: they never call into the model.
//
// Cross-request batching (--max-batch > 1; Turbo / Nano and Multilingual): the engine keeps up to max_batch
// SpeechJobs active in a cbx::BatchSynth (src/pipeline/batch_synth.h) and advances them together
// one decode step at a time; other tasks (voice uploads) run between steps, and so do the S3Gen
// runs of streamed pieces and finished chunks (BatchSynth::step). SpeechJob's interface
// to the connection thread (wait_event, cancel) is the same either way.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chatterbox.h"
#include "pipeline/batch_synth.h"
#include "server_metrics.h"

namespace cbx::server {

using Clock = std::chrono::steady_clock;

// Logging to stderr, one line at a time; verbose lines only with -v.
void log_line(const std::string& line);
// A line rewritten in place ("\r", for a terminal: model load progress); the next log_line
// starts on a line of its own.
void log_progress(const std::string& line);
void log_verbose(const std::string& line);
void set_verbose(bool on);

// One loaded model.
struct LoadedModel {
  cbx_model* model = nullptr;
  std::string id;       // "chatterbox-turbo", "chatterbox-nano", "chatterbox-multilingual"
  std::string variant;  // cbx_model_variant
  std::vector<std::string> languages;
  int sample_rate = 0;
};

// A unit of model work. run() is called on the model's engine thread and must not throw;
// drop() instead when the task leaves the queue unrun (shutdown).
class Task {
 public:
  virtual ~Task() = default;
  virtual void run(cbx_model* model, const std::atomic<bool>& stop_all) = 0;
  virtual void drop(const std::string& why) = 0;
  // Set by the connection thread when its client has gone; polled by run between decode steps.
  std::atomic<bool> cancel{false};
  uint64_t id = 0;  // request id, for logs
};

// What a connection thread waits for from a SpeechJob.
struct SpeechEvent {
  enum Kind { Audio, Done, Failed } kind;
  std::vector<float> samples;  // Audio
  cbx_status status = CBX_OK;  // Failed
  std::string message;         // Failed
  int http_status = 500;       // Failed: the status to answer with when no bytes went out yet

  static SpeechEvent audio(std::vector<float> x) { return {Audio, std::move(x), CBX_OK, "", 0}; }
  static SpeechEvent done() { return {Done, {}, CBX_OK, "", 200}; }
  static SpeechEvent failed(cbx_status s, std::string msg, int http) { return {Failed, {}, s, std::move(msg), http}; }
};

// One /v1/audio/speech request: inputs set before submit, audio handed over as produced.
class SpeechJob : public Task {
 public:
  std::string text;
  cbx_synth_params params{};
  std::string language;              // params.language points here
  std::shared_ptr<cbx_voice> voice;  // null: the built-in voice
  std::optional<Clock::time_point> deadline;
  Clock::time_point received = Clock::now();
  Metrics* metrics = nullptr;
  int sample_rate = 24000;

  void run(cbx_model* model, const std::atomic<bool>& stop_all) override;
  void drop(const std::string& why) override;

  // Connection side: the next event, waiting at most `wait`; nullopt on timeout.
  std::optional<SpeechEvent> wait_event(std::chrono::milliseconds wait);
  int64_t speech_tokens() const { return speech_tokens_; }
  int64_t text_tokens() const { return text_tokens_; }

  // Batched path (engine thread, model lock held): joins bs; false when the request ended at
  // once (its failure event pushed). batch_over() turns true when it has left the batch.
  bool batch_submit(cbx::BatchSynth& bs, cbx_model* model);
  // Ends the request in bs when its client left, its deadline passed or the server stops;
  // true when it did (the failure event pushed).
  bool batch_check(cbx::BatchSynth& bs, const std::atomic<bool>& stop_all);
  bool batch_over() const { return batch_over_; }

 private:
  void push(SpeechEvent e);
  void push_cancelled(bool timed_out, bool stopping);
  int64_t batch_id_ = 0;
  bool batch_over_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SpeechEvent> events_;
  std::atomic<int64_t> speech_tokens_{0}, text_tokens_{0};
};

// Runs the tasks of one model.
class Engine {
 public:
  // max_batch > 1 batches the speech requests (Turbo / Nano / Multilingual); 1: one request at a
  // time through the C API.
  Engine(LoadedModel model, size_t max_queue, Metrics& metrics, int max_batch = 1);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const LoadedModel& model() const { return model_; }
  // Queues a task; false when the queue is full or the engine is stopping.
  bool submit(std::shared_ptr<Task> task);
  // Drops the queued tasks, lets the running one finish for up to `grace`, then aborts it, and
  // joins the thread. Idempotent.
  void stop(std::chrono::milliseconds grace);
  size_t queued() const;
  // Rough wait a new request would have: (queued + running) x the mean task time, in seconds.
  double estimated_wait_s() const;

 private:
  void loop();
  void loop_batched(cbx::TurboPipeline* turbo, cbx::MtlPipeline* mtl);  // exactly one set
  void task_done(double seconds);

  LoadedModel model_;
  size_t max_queue_;
  int max_batch_ = 1;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false, running_task_ = false;
  std::atomic<bool> stop_all_{false};
  double mean_task_s_ = 1.0;
  std::thread thread_;
};

}  // namespace cbx::server
