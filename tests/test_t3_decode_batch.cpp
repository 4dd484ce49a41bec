// T3Batch (models/t3_batch.h): rows decoded together, joining and leaving between steps, give
// every row exactly the tokens T3Turbo::generate gives the same request alone with the same
// seed. Tiny synthetic Turbo models (chatterbox-mkckpt + convert) with f32 and q4_0 T3
// matrices; two voices (rows of the same voice share its prefix); sampled and greedy rows;
// different token limits so that rows leave at different steps; 1 and 3 threads. Runs once per
// ISA (CMakeLists.txt: test_t3_decode*), each with its own attention and planar kernels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/t3_batch.h"
#include "models/t3_turbo.h"
#include "pipeline/turbo_pipeline.h"

namespace cbx {
namespace {

std::string g_dir;

class T3BatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_t3batch_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    std::string cmd =
        "'" + bin + "chatterbox-mkckpt' --variant turbo --size tiny --seed 3 '" + g_dir + "/ckpt' > /dev/null 2>&1";
    for (const char* t : {"f32", "q4_0"})
      cmd += std::string(" && '") + bin + "chatterbox' convert '" + g_dir + "/ckpt' --type " + t + " -o '" + g_dir +
             "/" + t + ".gguf' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    if (!g_dir.empty()) (void)std::system(("rm -rf '" + g_dir + "'").c_str());
  }
  void SetUp() override {
    if (g_dir.empty()) GTEST_SKIP() << "chatterbox / chatterbox-mkckpt not built";
  }
};

struct Request {
  std::vector<int32_t> text;
  int voice = 0;  // 0: the built-in voice, 1: another (its speaker embedding and prompt changed)
  SamplerParams sp;
  int64_t max_new = 0;
  int join_step = 0;  // the batch step before which it is submitted
};

struct VoiceIn {
  std::vector<float> spk;
  std::vector<int32_t> prompt;
};

void check_model(const std::string& path, int threads, int max_batch) {
  TurboLoadParams lp;
  lp.n_threads = threads;
  lp.max_new_tokens = 64;
  TurboPipeline pipe(path, lp);
  T3Turbo& t3 = pipe.t3();
  VoiceIn voices[2];
  voices[0].spk = pipe.speaker_emb();
  voices[0].prompt = pipe.cond_prompt_tokens();
  voices[1] = voices[0];
  for (float& v : voices[1].spk) v = -0.5f * v + 0.01f;
  voices[1].prompt.resize(voices[1].prompt.size() / 2 + 1);
  for (size_t i = 0; i < voices[1].prompt.size(); ++i) voices[1].prompt[i] = int32_t((i * 37 + 11) % 6561);

  const char* texts[] = {"Hello there.",
                         "A somewhat longer sentence, with a clause.",
                         "Short.",
                         "Numbers and words go here, one by one.",
                         "The quick brown fox.",
                         "Yes!",
                         "Another voice speaks now."};
  std::vector<Request> reqs;
  for (int i = 0; i < 7; ++i) {
    Request r;
    r.text = pipe.tokenize(texts[i]);
    r.voice = (i == 2 || i == 5) ? 1 : 0;
    r.sp = t3.default_sampler();
    r.sp.seed = 1000 + uint64_t(i) * 77;
    r.sp.greedy = i == 3;
    r.sp.temperature = i == 4 ? 1.3f : r.sp.temperature;
    r.max_new = 10 + (i * 13) % 50;  // different lengths: rows leave at different steps
    r.join_step = i < 2 ? 0 : i * 3;
    reqs.push_back(r);
  }

  // Alone, one at a time.
  std::vector<std::vector<int32_t>> want(reqs.size()), want_speech(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    const VoiceIn& v = voices[r.voice];
    T3TurboResult res = t3.generate(r.text.data(), int64_t(r.text.size()), v.spk.data(), int64_t(v.spk.size()),
                                    v.prompt.data(), int64_t(v.prompt.size()), r.sp, r.max_new);
    want[i] = res.tokens;
    want_speech[i] = res.speech_tokens;
    ASSERT_FALSE(want[i].empty());
  }

  // Batched: rows join at their step when a slot is free, leave when finished.
  T3Batch batch(t3, pipe.pool(), max_batch);
  std::deque<size_t> pending;
  for (size_t i = 0; i < reqs.size(); ++i) pending.push_back(i);
  std::vector<int> req_of_row(size_t(max_batch), -1);
  std::vector<bool> got(reqs.size(), false);
  int max_rows_seen = 0;
  for (int step = 0; step < 10000; ++step) {
    while (!pending.empty() && reqs[pending.front()].join_step <= step && batch.free_slots() > 0) {
      const size_t i = pending.front();
      pending.pop_front();
      const Request& r = reqs[i];
      const VoiceIn& v = voices[r.voice];
      const int row = batch.start(r.text.data(), int64_t(r.text.size()), v.spk.data(), int64_t(v.spk.size()),
                                  v.prompt.data(), int64_t(v.prompt.size()), r.sp, r.max_new);
      req_of_row[size_t(row)] = int(i);
    }
    max_rows_seen = std::max(max_rows_seen, batch.n_decoding());
    batch.step();
    for (int row = 0; row < max_batch; ++row) {
      if (!batch.finished(row)) continue;
      const size_t i = size_t(req_of_row[size_t(row)]);
      const T3TurboResult res = batch.result(row);
      EXPECT_EQ(res.tokens, want[i]) << path << " request " << i << " (row " << row << ")";
      EXPECT_EQ(res.speech_tokens, want_speech[i]) << path << " request " << i;
      got[i] = true;
      batch.release(row);
    }
    if (pending.empty() && batch.n_active() == 0) break;
  }
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(got[i]) << "request " << i << " never finished";
  // The arena is planned from the constructor's own allocation calls: the steps fit, and it
  // holds no more than Arena::reserve's rounding to 64 bytes beyond them.
  EXPECT_LE(batch.arena_high_water(), batch.arena_bytes());
  EXPECT_LT(batch.arena_bytes() - batch.arena_high_water(), size_t(64));
  if (max_batch > 1) {
    EXPECT_GE(max_rows_seen, 2);
    EXPECT_LE(batch.n_prefixes(), size_t(2));  // one per voice, shared by its rows
  }
}

TEST_F(T3BatchTest, RowsMatchAloneF32) { check_model(g_dir + "/f32.gguf", 2, 3); }
TEST_F(T3BatchTest, RowsMatchAloneQ4) { check_model(g_dir + "/q4_0.gguf", 2, 4); }
TEST_F(T3BatchTest, RowsMatchAloneQ4ThreeThreads) { check_model(g_dir + "/q4_0.gguf", 3, 3); }
TEST_F(T3BatchTest, OneRowBatch) { check_model(g_dir + "/q4_0.gguf", 1, 1); }

TEST_F(T3BatchTest, ErrorsAndCancel) {
  TurboLoadParams lp;
  lp.n_threads = 1;
  lp.max_new_tokens = 16;
  TurboPipeline pipe(g_dir + "/q4_0.gguf", lp);
  T3Batch batch(pipe.t3(), pipe.pool(), 2);
  const std::vector<int32_t> text = pipe.tokenize("Hi.");
  const auto& spk = pipe.speaker_emb();
  const auto& pr = pipe.cond_prompt_tokens();
  SamplerParams sp = pipe.t3().default_sampler();
  auto start = [&](int64_t max_new) {
    return batch.start(text.data(), int64_t(text.size()), spk.data(), int64_t(spk.size()), pr.data(),
                       int64_t(pr.size()), sp, max_new);
  };
  const int a = start(16);
  const int b = start(16);
  EXPECT_NE(a, b);
  EXPECT_THROW(start(16), Error);  // both rows in use
  EXPECT_THROW(start(17), Error);  // more than the reserved max_new
  EXPECT_EQ(batch.step(), 2);
  batch.release(a);  // cancelled mid-way: its slot is free again
  EXPECT_FALSE(batch.active(a));
  EXPECT_THROW(batch.result(a), Error);
  EXPECT_THROW(batch.result(b), Error);  // not finished yet
  const int c = start(0);
  EXPECT_TRUE(batch.finished(c));  // max_new 0: only the prefill token
  EXPECT_EQ(batch.tokens(c).size(), size_t(1));
  EXPECT_THROW(T3Batch(pipe.t3(), pipe.pool(), 0), Error);
}

}  // namespace
}  // namespace cbx
