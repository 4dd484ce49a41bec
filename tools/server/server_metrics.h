// Prometheus metrics of `chatterbox serve` (text exposition format 0.0.4): counters, gauges and
// two histograms, all updated from any thread and rendered by GET /metrics.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace cbx::server {

class Metrics {
 public:
  // One finished HTTP request: its route ("/v1/audio/speech"; "other" for unknown paths) and status.
  void count_request(const std::string& endpoint, int status);
  void add_speech_tokens(int64_t n);
  void add_audio_seconds(double s);
  void observe_ttfa(double seconds);      // request received -> first audio bytes handed to the socket
  void observe_duration(double seconds);  // request received -> response finished (speech only)
  void count_cancelled();                 // client gone, timeout or shutdown while generating
  void add_queue_depth(int64_t delta);
  void add_active(int64_t delta);  // requests being generated now (batch rows)
  // Engine time by stage (batched engines: decode steps, S3Gen runs and their flow / CFM / HiFT
  // parts, cbx::BatchSynthTimes): `runs` more runs that took `seconds` in all. Stages without
  // runs of their own (flow, cfm, hift) pass 0.
  void add_stage(const std::string& stage, int64_t runs, double seconds);

  std::string render() const;

 private:
  // Upper bounds of the histogram buckets, in seconds (+Inf implied).
  static constexpr std::array<double, 12> kBuckets = {0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128};
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> counts{};
    uint64_t n = 0;
    double sum = 0;
    void observe(double v);
    void render(std::string& out, const char* name, const char* help) const;
  };

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  int64_t speech_tokens_ = 0, queue_depth_ = 0, active_ = 0;
  uint64_t cancelled_ = 0;
  double audio_seconds_ = 0;
  std::map<std::string, std::pair<int64_t, double>> stages_;  // stage -> runs, seconds
  Histogram ttfa_, duration_;
};

}  // namespace cbx::server
