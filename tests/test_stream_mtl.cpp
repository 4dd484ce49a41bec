// Multilingual streaming (src/pipeline/stream_synth.h through MtlPipeline) on a tiny synthetic
// Multilingual model: the 10-step CFG CFM and the tail trim. Streamed against non-streamed S3Gen
// on the same tokens and seed (length, the last run's mel, determinism), the schedule's edge
// cases, a restart before any audio (a late SOS), and the pipeline's streamed synthesize (same
// tokens and length as non-streamed, pieces, abort within one piece). Skipped when chatterbox /
// chatterbox-mkckpt are not built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "models/cfm_solver.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/s3gen_stage.h"
#include "pipeline/stream_synth.h"

namespace cbx {
namespace {

std::string g_dir;

class MtlStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_stream_mtl_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    const std::string cmd = "'" + bin + "chatterbox-mkckpt' --variant mtl --size tiny --seed 1 --threads 1 '" + g_dir +
                            "/ckpt' > /dev/null 2>&1 && '" + bin + "chatterbox' convert '" + g_dir + "/ckpt' -o '" +
                            g_dir + "/m.gguf' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    MtlLoadParams lp;
    lp.n_threads = 2;
    lp.max_new_tokens = 160;
    pipe_ = std::make_unique<MtlPipeline>(g_dir + "/m.gguf", lp);
  }
  static void TearDownTestSuite() {
    pipe_.reset();
    if (!g_dir.empty()) (void)std::system(("rm -rf '" + g_dir + "'").c_str());
  }
  void SetUp() override {
    if (!pipe_) GTEST_SKIP() << "chatterbox / chatterbox-mkckpt not built";
  }

  // n random speech tokens, as MtlPipeline::postprocess gives them.
  static std::vector<int32_t> tokens(int64_t n, uint32_t seed = 7) {
    std::vector<int32_t> t;
    uint32_t x = seed;
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      t.push_back(int32_t((x >> 8) % 6561u));
    }
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

  static std::unique_ptr<MtlPipeline> pipe_;
};
std::unique_ptr<MtlPipeline> MtlStream::pipe_;

StreamSchedule small_schedule() {
  StreamSchedule s;
  s.first_tokens = 20;
  s.chunk_tokens = 25;
  return s;
}

TEST_F(MtlStream, LengthEqualsNonStreamedForEdgeCases) {
  const StreamSchedule s = small_schedule();
  // 1 token; 2 (the tail trim keeps 1 token's audio either way); the first chunk exactly; first
  // + one chunk exactly (EOS at a chunk boundary: the last push and finish see the same tokens);
  // between; long.
  for (int64_t n : {1, 2, 20, 45, 46, 100}) {
    const std::vector<int32_t> t = tokens(n);
    std::vector<int64_t> joins;
    const std::vector<float> a = plain(t, 3), b = streamed(t, 3, s, &joins);
    EXPECT_EQ(a.size(), b.size()) << n << " tokens";
    EXPECT_EQ(int64_t(b.size()), pipe_->tail_keep_samples(n)) << n << " tokens: the tail trim's length";
    if (n >= 100) {
      EXPECT_GE(joins.size(), 2u) << n << " tokens: audio should come in pieces";
    }
    for (float v : b) ASSERT_TRUE(std::isfinite(v));
  }
  // A run after every token, from the first.
  StreamSchedule every;
  every.first_tokens = 1;
  every.chunk_tokens = 1;
  for (int64_t n : {1, 3, 12}) {
    const std::vector<int32_t> t = tokens(n, 5);
    EXPECT_EQ(plain(t, 4).size(), streamed(t, 4, every).size()) << n << " tokens, a run per token";
  }
}

TEST_F(MtlStream, DeterministicPerSeed) {
  const std::vector<int32_t> t = tokens(90);
  const StreamSchedule s = small_schedule();
  const std::vector<float> a = streamed(t, 11, s), b = streamed(t, 11, s), c = streamed(t, 12, s);
  ASSERT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

// With the whole context kept, the last run is the non-streamed CFG CFM: its mel frames equal
// the non-streamed mel's (the same noise at every frame position).
TEST_F(MtlStream, LastRunMelEqualsNonStreamed) {
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

// A restart before any audio went out (T3 sampled a SOS: the tokens before it are dropped) gives
// exactly the stream of the later tokens alone, with the same noise; after audio, it is refused.
TEST_F(MtlStream, RestartBeforeAudioDropsTheEarlierTokens) {
  StreamSchedule s = small_schedule();
  s.first_tokens = 5;  // a run at 5 tokens: its audio is all held back
  const std::vector<int32_t> early = tokens(6, 3), later = tokens(70, 9);
  const std::vector<float> want = streamed(later, 6, s);
  pipe_->reseed_s3gen(6);
  std::vector<float> audio;
  {
    StreamRun run(&pipe_->s3gen_stream(), pipe_->voice(), s, nullptr, audio, nullptr, 0, 1);
    for (int32_t t : early) run.on_token(t, true);
    EXPECT_GE(pipe_->s3gen_stream().runs(), 1);
    ASSERT_EQ(pipe_->s3gen_stream().emitted_samples(), 0);
    ASSERT_TRUE(run.restart());
    EXPECT_TRUE(run.tokens().empty());
    for (int32_t t : later) run.on_token(t, true);
    EXPECT_GT(pipe_->s3gen_stream().emitted_samples(), 0);
    EXPECT_FALSE(run.restart());
    EXPECT_EQ(run.tokens(), later);
    run.finish(run.tokens(), pipe_->tail_keep_samples(int64_t(later.size())));
  }
  EXPECT_EQ(audio, want);
}

TEST_F(MtlStream, ScheduleIsChecked) {
  const std::vector<int32_t> t = tokens(10);
  StreamSchedule s;
  s.chunk_tokens = 0;
  EXPECT_THROW(streamed(t, 1, s), InvalidArgumentError);
  s = {};
  s.prompt_tokens = -1;
  EXPECT_THROW(streamed(t, 1, s), InvalidArgumentError);
  MtlSynthParams p;
  p.language = "en";
  p.stream = true;
  p.stream_schedule.first_tokens = 0;
  EXPECT_THROW(pipe_->synthesize("Hello.", p), InvalidArgumentError);
}

// The pipeline's streamed synthesize: the same speech tokens and samples count as non-streamed
// (same T3 tokens, tail trim included), several pieces, deterministic, and a stop in the first
// piece's callback or by should_abort after it stops there.
TEST_F(MtlStream, SynthesizeStreamsAndAborts) {
  MtlSynthParams p;
  p.language = "en";
  p.seed = 4;
  p.stream_schedule = small_schedule();
  const std::string text = "Streaming check one two three.";
  SynthTimings ta, tb;
  const std::vector<float> a = pipe_->synthesize(text, p, &ta);
  p.stream = true;
  int64_t pieces = 0, total = 0;
  const std::vector<float> b = pipe_->synthesize(text, p, &tb, [&](const float*, int64_t n, int64_t, int64_t) {
    ++pieces;
    total += n;
    return true;
  });
  ASSERT_GE(ta.n_speech_tokens, 70) << "the tiny model's generation is too short for this test";
  EXPECT_EQ(ta.n_speech_tokens, tb.n_speech_tokens);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(total, int64_t(b.size()));
  EXPECT_GE(pieces, 3);
  EXPECT_EQ(pipe_->synthesize(text, p), b);
  int64_t calls = 0;
  EXPECT_THROW(
      pipe_->synthesize(text, p, nullptr, [&](const float*, int64_t, int64_t, int64_t) { return ++calls < 1; }),
      AbortedError);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_THROW(pipe_->synthesize(
                   text, p, nullptr, [&](const float*, int64_t, int64_t, int64_t) { return ++calls > 0; },
                   [&]() { return calls > 0; }),
               AbortedError);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace cbx
