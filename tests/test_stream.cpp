// Streaming synthesis (src/pipeline/stream_synth.h) on a tiny synthetic Turbo model: streamed
// against non-streamed S3Gen on the same tokens and seed (length, the last run's mel, joins,
// determinism), edge cases of the schedule, and the pipeline's streamed synthesize (pieces,
// abort within one piece). Skipped when chatterbox / chatterbox-mkckpt are not built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "models/cfm_solver.h"
#include "models/hift_vocoder.h"
#include "pipeline/s3gen_stage.h"
#include "pipeline/stream_synth.h"
#include "pipeline/turbo_pipeline.h"

namespace cbx {
namespace {

std::string g_dir, g_model;

class Stream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_stream_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    const std::string cmd = "'" + bin + "chatterbox-mkckpt' --variant turbo --size tiny --seed 1 '" + g_dir +
                            "/ckpt' > /dev/null 2>&1 && '" + bin + "chatterbox' convert '" + g_dir + "/ckpt' -o '" +
                            g_dir + "/t.gguf' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    g_model = g_dir + "/t.gguf";
    TurboLoadParams lp;
    lp.n_threads = 2;
    lp.max_new_tokens = 160;
    pipe_ = std::make_unique<TurboPipeline>(g_model, lp);
  }
  static void TearDownTestSuite() {
    pipe_.reset();
    if (!g_dir.empty()) (void)std::system(("rm -rf '" + g_dir + "'").c_str());
  }
  void SetUp() override {
    if (!pipe_) GTEST_SKIP() << "chatterbox / chatterbox-mkckpt not built";
  }

  // n random speech tokens + the silence tokens, as T3Turbo::postprocess gives them.
  static std::vector<int32_t> tokens(int64_t n, uint32_t seed = 7) {
    std::vector<int32_t> t;
    uint32_t x = seed;
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      t.push_back(int32_t((x >> 8) % 6561u));
    }
    const ModelConfig& c = pipe_->config();
    for (int i = 0; i < c.pipeline.n_silence_tokens; ++i) t.push_back(c.flow.silence_token);
    return t;
  }
  static std::vector<float> plain(const std::vector<int32_t>& t, uint64_t seed) {
    pipe_->reseed_s3gen(seed);
    return pipe_->tokens_to_audio(t);
  }
  // Streamed audio; joins: sample positions where a piece after the first starts.
  static std::vector<float> streamed(const std::vector<int32_t>& t, uint64_t seed, const StreamSchedule& s,
                                     std::vector<int64_t>* joins = nullptr) {
    pipe_->reseed_s3gen(seed);
    int64_t at = 0;
    std::vector<int64_t> j;
    std::vector<float> a = pipe_->tokens_to_audio_stream(t, s, nullptr, [&](const float*, int64_t n) {
      if (at > 0) j.push_back(at);
      at += n;
    });
    EXPECT_EQ(at, int64_t(a.size()));
    if (joins) *joins = j;
    return a;
  }

  static std::unique_ptr<TurboPipeline> pipe_;
};
std::unique_ptr<TurboPipeline> Stream::pipe_;

StreamSchedule small_schedule() {
  StreamSchedule s;
  s.first_tokens = 20;
  s.chunk_tokens = 25;
  return s;
}

TEST_F(Stream, LengthEqualsNonStreamedForEdgeCases) {
  const StreamSchedule s = small_schedule();
  // 1 token; the first chunk exactly; first + one chunk exactly (EOS at a chunk boundary);
  // between; long. A stream pushes only the tokens before the silence.
  for (int64_t n : {1, 19, 20, 21, 45, 46, 100, 157}) {
    const std::vector<int32_t> t = tokens(n);
    std::vector<int64_t> joins;
    const std::vector<float> a = plain(t, 3), b = streamed(t, 3, s, &joins);
    EXPECT_EQ(a.size(), b.size()) << n << " tokens";
    if (n >= 100) {
      EXPECT_GE(joins.size(), 2u) << n << " tokens: audio should come in pieces";
    }
    for (float v : b) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST_F(Stream, DeterministicPerSeed) {
  const std::vector<int32_t> t = tokens(90);
  const StreamSchedule s = small_schedule();
  const std::vector<float> a = streamed(t, 11, s), b = streamed(t, 11, s), c = streamed(t, 12, s);
  ASSERT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

// With the whole context kept, the last run is the non-streamed S3Gen: its mel frames equal the
// non-streamed mel's, and frames from earlier runs differ only through the missing right context.
TEST_F(Stream, LastRunMelEqualsNonStreamed) {
  const std::vector<int32_t> t = tokens(100);
  StreamSchedule s = small_schedule();
  s.context_tokens = 0;
  s.prompt_tokens = 0;
  (void)plain(t, 5);
  const Tensor& ref = pipe_->s3gen_stream().stage().cfm().last_mel();
  const std::vector<float> ref_mel(ref.ptr<float>(), ref.ptr<float>() + ref.numel());
  const int64_t T = ref.shape[1], M = ref.shape[0];
  (void)streamed(t, 5, s);
  const S3GenStream& st = pipe_->s3gen_stream();
  ASSERT_EQ(st.mel_frames(), T);
  const int64_t f0 = st.last_run_first_frame();
  ASSERT_GT(f0, 0);
  double max_last = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = f0; f < T; ++f)
      max_last = std::max(max_last, double(std::fabs(st.mel()[m * st.mel_stride() + f] - ref_mel[size_t(m * T + f)])));
  EXPECT_LE(max_last, 1e-5);
}

// The joins: streamed audio against HiFT over the stream's own mel in one pass with the same
// draws. A missing, repeated or mis-phased sample at a join would show as a large local error.
TEST_F(Stream, JoinsAreContinuous) {
  const std::vector<int32_t> t = tokens(140);
  const StreamSchedule s = small_schedule();
  std::vector<int64_t> joins;
  const std::vector<float> x = streamed(t, 9, s, &joins);
  ASSERT_GE(joins.size(), 3u);
  S3GenStream& st = pipe_->s3gen_stream();
  HiftVocoder& h = st.stage().hift();
  // The same generator call the stream took: reseed, then one draw.
  pipe_->reseed_s3gen(9);
  std::vector<float> phases(size_t(h.n_harmonic_channels()));
  const uint64_t key = h.take_draws(phases.data());
  const int64_t T = st.mel_frames(), N = T * h.samples_per_frame(), H1 = h.n_harmonic_channels();
  std::vector<float> noise(size_t(H1 * N));
  h.fill_noise(key, 0, (N + HiftVocoder::kNoiseBlock - 1) / HiftVocoder::kNoiseBlock, noise.data(), N, N);
  HiftDraws d;
  d.phases = phases.data();
  d.noise = noise.data();
  Tensor mel =
      make_tensor(DType::F32, {80, st.mel_stride()}, const_cast<float*>(st.mel()), size_t(80 * st.mel_stride()) * 4);
  const Tensor& w = h.forward(slice(mel, 1, 0, T), &d);
  std::vector<float> ref(w.ptr<float>(), w.ptr<float>() + w.numel());
  hift_trim_fade(ref.data(), int64_t(ref.size()), pipe_->config().pipeline.trim_fade_samples);
  ASSERT_EQ(ref.size(), x.size());
  // Error and signal energy within 1 frame of each join, and over everything.
  double e_all = 0, s_all = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e_all += double(x[i] - ref[i]) * (x[i] - ref[i]);
    s_all += double(ref[i]) * ref[i];
  }
  for (int64_t j : joins) {
    double e = 0, sg = 0;
    for (int64_t i = std::max<int64_t>(0, j - 480); i < std::min<int64_t>(int64_t(x.size()), j + 480); ++i) {
      e += double(x[size_t(i)] - ref[size_t(i)]) * (x[size_t(i)] - ref[size_t(i)]);
      sg += double(ref[size_t(i)]) * ref[size_t(i)];
    }
    EXPECT_LE(std::sqrt(e / std::max(sg, 1e-20)), 0.05) << "join at sample " << j;
    // The sample-to-sample step at the join is no larger than the steps around it.
    double step_in = 0;
    for (int64_t i = j - 480; i < j + 480; ++i)
      if (i != j && i > 0) step_in = std::max(step_in, double(std::fabs(x[size_t(i)] - x[size_t(i) - 1])));
    EXPECT_LE(std::fabs(x[size_t(j)] - x[size_t(j) - 1]), step_in) << "join at sample " << j;
  }
  EXPECT_LE(std::sqrt(e_all / s_all), 0.05);
}

TEST_F(Stream, ScheduleIsChecked) {
  const std::vector<int32_t> t = tokens(10);
  StreamSchedule s;
  s.first_tokens = 0;
  EXPECT_THROW(streamed(t, 1, s), InvalidArgumentError);
  s = {};
  s.chunk_tokens = -1;
  EXPECT_THROW(streamed(t, 1, s), InvalidArgumentError);
  s = {};
  s.context_tokens = -2;
  EXPECT_THROW(streamed(t, 1, s), InvalidArgumentError);
}

TEST_F(Stream, WindowedScheduleKeepsLengthAndStaysClose) {
  const std::vector<int32_t> t = tokens(150);
  StreamSchedule s = small_schedule();
  s.context_tokens = 15;
  s.prompt_tokens = 10;
  std::vector<int64_t> joins;
  const std::vector<float> a = plain(t, 2), b = streamed(t, 2, s, &joins);
  ASSERT_EQ(a.size(), b.size());
  const StreamDistance d = stream_logmel_distance(a.data(), b.data(), int64_t(a.size()), joins);
  EXPECT_GT(d.n_near, 0);
  EXPECT_TRUE(std::isfinite(d.near_joins) && std::isfinite(d.elsewhere));
  std::printf("tiny model, windowed schedule: log-mel rel L2 near joins %.4f, elsewhere %.4f\n", d.near_joins,
              d.elsewhere);
}

// The pipeline's streamed synthesize: same samples count as non-streamed (same T3 tokens), several
// pieces, and stopping in the first piece's callback stops there.
TEST_F(Stream, SynthesizeStreamsAndAborts) {
  TurboSynthParams p;
  p.seed = 4;
  p.stream_schedule = small_schedule();
  const std::string text = "Streaming check one two three.";
  const std::vector<float> a = pipe_->synthesize(text, p);
  p.stream = true;
  int64_t pieces = 0, total = 0;
  const std::vector<float> b = pipe_->synthesize(text, p, nullptr, [&](const float*, int64_t n, int64_t, int64_t) {
    ++pieces;
    total += n;
    return true;
  });
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(total, int64_t(b.size()));
  EXPECT_GE(pieces, 3);
  int64_t calls = 0;
  EXPECT_THROW(
      pipe_->synthesize(text, p, nullptr, [&](const float*, int64_t, int64_t, int64_t) { return ++calls < 1; }),
      AbortedError);
  EXPECT_EQ(calls, 1);
  // should_abort after the first piece: aborted before a second.
  calls = 0;
  EXPECT_THROW(pipe_->synthesize(
                   text, p, nullptr, [&](const float*, int64_t, int64_t, int64_t) { return ++calls > 0; },
                   [&]() { return calls > 0; }),
               AbortedError);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace cbx
