// T3MtlBatch (models/t3_mtl_batch.h): requests decoded together, joining and leaving between
// steps, give every request exactly the tokens T3Mtl::generate gives it alone with the same
// seed. Tiny synthetic Multilingual models (chatterbox-mkckpt --variant mtl + convert) with f32
// and q4_0 T3 matrices; CFG pairs and single-row requests (cfg_weight 0); two voices; sampled
// and greedy requests; different token limits so that requests leave at different steps; 1, 2
// and 3 threads; voice prefixes shared by the requests of one conditioning. Runs once per ISA
// (CMakeLists.txt: test_t3_decode*).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "models/t3_llama.h"
#include "models/t3_mtl.h"
#include "models/t3_mtl_batch.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/voice.h"

namespace cbx {
namespace {

std::string g_dir;

class T3MtlBatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_t3mtlbatch_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    std::string cmd = "'" + bin + "chatterbox-mkckpt' --variant mtl --size tiny --seed 5 --threads 1 '" + g_dir +
                      "/ckpt' > /dev/null 2>&1";
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
  int voice = 0;
  T3MtlSampling s;
  int64_t max_new = 0;
  int join_step = 0;  // the batch step before which it is submitted
};

void check_model(const std::string& path, int threads, int max_batch) {
  MtlLoadParams lp;
  lp.n_threads = threads;
  lp.max_new_tokens = 48;
  MtlPipeline pipe(path, lp);
  T3Mtl& t3 = pipe.t3();
  T3MtlCond voices[2];
  voices[0].speaker_emb = pipe.voice().speaker_emb;
  voices[0].cond_prompt_tokens = pipe.voice().cond_prompt_tokens;
  voices[1] = voices[0];
  for (float& v : voices[1].speaker_emb) v = -0.5f * v + 0.01f;
  voices[1].cond_prompt_tokens.resize(voices[1].cond_prompt_tokens.size() / 2 + 1);
  for (size_t i = 0; i < voices[1].cond_prompt_tokens.size(); ++i)
    voices[1].cond_prompt_tokens[i] = int32_t((i * 37 + 11) % 6561);
  voices[1].exaggeration = 0.8f;

  const char* texts[] = {"Hello there.",
                         "Une phrase un peu plus longue, avec une virgule.",
                         "Short.",
                         "Numbers and words go here, one by one.",
                         "The quick brown fox.",
                         "Ja!"};
  const char* langs[] = {"en", "fr", "en", "en", "en", "de"};
  const float cfgs[] = {0.5f, 0.f, 1.0f, 0.3f, 0.f, 0.5f};
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.text = pipe.tokenize(texts[i], langs[i]);
    r.voice = (i == 2 || i == 4) ? 1 : 0;
    r.s = t3.default_sampling();
    r.s.cfg_weight = cfgs[i];
    r.s.seed = 1000 + uint64_t(i) * 77;
    r.s.greedy = i == 3;
    r.s.temperature = i == 5 ? 1.3f : r.s.temperature;
    r.max_new = 8 + (i * 13) % 40;  // different lengths: requests leave at different steps
    r.join_step = i < 2 ? 0 : i * 3;
    reqs.push_back(r);
  }

  // Alone, one at a time.
  std::vector<std::vector<int32_t>> want(reqs.size());
  std::vector<T3MtlStats> want_st(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    T3MtlSampling s = r.s;
    // generate's limit is the T3's max_new_tokens: a shorter one is its force_n_tokens minus
    // the EOS ignoring; check with a T3 limit when it matters (the tiny model rarely stops).
    want[i] = t3.generate(voices[r.voice], r.text, s, &want_st[i]);
    if (int64_t(want[i].size()) > r.max_new) want[i].resize(size_t(r.max_new));
    ASSERT_FALSE(want[i].empty());
  }

  // Batched: requests join at their step when a slot is free, leave when finished.
  T3MtlBatch batch(t3, pipe.pool(), max_batch);
  std::deque<size_t> pending;
  for (size_t i = 0; i < reqs.size(); ++i) pending.push_back(i);
  std::vector<int> req_of(size_t(max_batch), -1);
  std::vector<bool> got(reqs.size(), false);
  int max_seen = 0;
  for (int step = 0; step < 10000; ++step) {
    while (!pending.empty() && reqs[pending.front()].join_step <= step && batch.free_slots() > 0) {
      const size_t i = pending.front();
      pending.pop_front();
      const Request& r = reqs[i];
      req_of[size_t(batch.start(voices[r.voice], r.text, r.s, r.max_new))] = int(i);
    }
    max_seen = std::max(max_seen, batch.n_decoding());
    batch.step();
    for (int q = 0; q < max_batch; ++q) {
      if (!batch.finished(q)) continue;
      const size_t i = size_t(req_of[size_t(q)]);
      EXPECT_EQ(batch.tokens(q), want[i]) << path << " request " << i << " (slot " << q << ")";
      const T3MtlStats st = batch.stats(q);
      EXPECT_EQ(st.n_rows, want_st[i].n_rows) << "request " << i;
      EXPECT_EQ(st.prompt_len, want_st[i].prompt_len) << "request " << i;
      EXPECT_EQ(st.n_steps, int64_t(want[i].size()));
      got[i] = true;
      batch.release(q);
    }
    if (pending.empty() && batch.n_active() == 0) break;
  }
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(got[i]) << "request " << i << " never finished";
  // The arena is planned from the constructor's own allocation calls: the steps fit, and it
  // holds no more than Arena::reserve's rounding to 64 bytes beyond them.
  EXPECT_LE(batch.arena_high_water(), batch.arena_bytes());
  EXPECT_LT(batch.arena_bytes() - batch.arena_high_water(), size_t(64));
  if (max_batch > 1) {
    EXPECT_GE(max_seen, 2);
  }
}

TEST_F(T3MtlBatchTest, RequestsMatchAloneF32) { check_model(g_dir + "/f32.gguf", 2, 3); }
TEST_F(T3MtlBatchTest, RequestsMatchAloneQ4) { check_model(g_dir + "/q4_0.gguf", 2, 4); }
TEST_F(T3MtlBatchTest, RequestsMatchAloneQ4ThreeThreads) { check_model(g_dir + "/q4_0.gguf", 3, 3); }
TEST_F(T3MtlBatchTest, OneRequestBatch) { check_model(g_dir + "/q4_0.gguf", 1, 1); }

// Voice prefixes: rows with the same conditioning (speaker, prompt, exaggeration) reference one
// copy of its keys/values; a CFG request joining with its prefix held skips the prefix compute;
// single-row requests keep their own copy; an idle copy is kept up to kIdlePrefixes and the
// oldest one freed beyond them. Every request still gets generate's tokens alone.
TEST_F(T3MtlBatchTest, VoicePrefixShared) {
  MtlLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 20;
  MtlPipeline pipe(g_dir + "/q4_0.gguf", lp);
  T3Mtl& t3 = pipe.t3();
  T3MtlCond v0;
  v0.speaker_emb = pipe.voice().speaker_emb;
  v0.cond_prompt_tokens = pipe.voice().cond_prompt_tokens;
  T3MtlCond v1 = v0;  // another emotion: another prefix
  v1.exaggeration = 0.9f;
  T3MtlCond v2 = v0;  // another speaker, no prompt
  for (float& v : v2.speaker_emb) v = 0.25f * v - 0.02f;
  v2.cond_prompt_tokens.clear();
  struct Job {
    const T3MtlCond* cond;
    const char* text;
    float cfg;
    uint64_t seed;
  };
  const Job jobs[] = {{&v0, "Hello there.", 0.5f, 11},     {&v0, "Another one, a bit longer.", 0.5f, 12},
                      {&v1, "Hello there.", 0.5f, 13},     {&v0, "Single row.", 0.f, 14},
                      {&v0, "Back again.", 0.7f, 15},      {&v1, "Emotion kept.", 0.5f, 16},
                      {&v2, "No prompt at all.", 0.5f, 17}};
  const int n_jobs = int(sizeof(jobs) / sizeof(jobs[0]));
  std::vector<std::vector<int32_t>> text(n_jobs), want(n_jobs);
  std::vector<T3MtlSampling> samp(n_jobs);
  for (int i = 0; i < n_jobs; ++i) {
    text[size_t(i)] = pipe.tokenize(jobs[i].text, "en");
    samp[size_t(i)] = t3.default_sampling();
    samp[size_t(i)].cfg_weight = jobs[i].cfg;
    samp[size_t(i)].seed = jobs[i].seed;
    want[size_t(i)] = t3.generate(*jobs[i].cond, text[size_t(i)], samp[size_t(i)]);
  }
  T3MtlBatch batch(t3, pipe.pool(), 4);
  // A row's slot holds the positions after its prefix only.
  const size_t rb = dtype_row_bytes(t3.backbone().kv_type(), t3.config().t3.head_dim);
  const size_t whole_head = (size_t(t3.backbone().max_ctx()) * rb + 63) / 64 * 64;
  EXPECT_LT(batch.row_slot_bytes(), 2 * size_t(t3.config().t3.n_layer * t3.config().t3.n_kv_head) * whole_head);
  std::vector<int> job_of(4, -1);
  auto start = [&](int i) {
    const int q = batch.start(*jobs[i].cond, text[size_t(i)], samp[size_t(i)]);
    job_of[size_t(q)] = i;
    return q;
  };
  auto run_to_end = [&]() {
    while (batch.step() > 0) {
    }
    for (int q = 0; q < 4; ++q)
      if (batch.active(q)) {
        EXPECT_TRUE(batch.finished(q));
        EXPECT_EQ(batch.tokens(q), want[size_t(job_of[size_t(q)])]) << "job " << job_of[size_t(q)];
      }
  };
  const size_t p0 = t3.backbone().prefix_bytes(t3.cond_len(v0));
  const int a = start(0);
  EXPECT_FALSE(batch.prefix_reused(a));
  EXPECT_EQ(batch.n_prefixes(), size_t(1));
  EXPECT_EQ(batch.prefix_bytes(), p0);
  for (int k = 0; k < 3; ++k) batch.step();
  const int b = start(1);  // same voice, joins 3 steps later: the held prefix
  EXPECT_TRUE(batch.prefix_reused(b));
  EXPECT_EQ(batch.n_prefixes(), size_t(1));
  EXPECT_EQ(batch.prefix_bytes(), p0);
  batch.step();
  const int c = start(2);  // another exaggeration
  EXPECT_FALSE(batch.prefix_reused(c));
  EXPECT_EQ(batch.n_prefixes(), size_t(2));
  const int d = start(3);  // single row: its own copy (prefix and text are one forward)
  EXPECT_FALSE(batch.prefix_reused(d));
  EXPECT_EQ(batch.n_prefixes(), size_t(3));
  EXPECT_EQ(batch.n_idle_prefixes(), size_t(0));
  run_to_end();
  batch.release(a);
  EXPECT_EQ(batch.n_idle_prefixes(), size_t(0));  // b still reads it
  batch.release(b);
  batch.release(c);
  EXPECT_EQ(batch.n_idle_prefixes(), size_t(2));
  EXPECT_EQ(batch.n_prefixes(), size_t(3));
  batch.release(d);  // a third idle prefix: the oldest (v0's CFG copy) is freed
  EXPECT_EQ(batch.n_idle_prefixes(), T3MtlBatch::kIdlePrefixes);
  EXPECT_EQ(batch.n_prefixes(), T3MtlBatch::kIdlePrefixes);
  const int e = start(4);  // v0 again: computed again
  EXPECT_FALSE(batch.prefix_reused(e));
  const int f = start(5);  // v1's idle copy was kept
  EXPECT_TRUE(batch.prefix_reused(f));
  const int g = start(6);
  EXPECT_FALSE(batch.prefix_reused(g));
  EXPECT_EQ(batch.n_prefixes(), size_t(4));  // e, f, g in use, v0's single-row copy idle
  run_to_end();
  for (int q : {e, f, g}) batch.release(q);
  // A cached prefix is for the CFG pair only (a single-row prefill runs prefix and text as one).
  std::vector<uint8_t> kv(p0);
  EXPECT_THROW(t3.prefill_cached(v0, text[0], 0.f, kv.data(), nullptr), Error);
  EXPECT_THROW(t3.prefill_cached(v0, text[0], 0.5f, nullptr, nullptr), Error);
  EXPECT_EQ(batch.n_idle_prefixes(), T3MtlBatch::kIdlePrefixes);
}

TEST_F(T3MtlBatchTest, ErrorsAndCancel) {
  MtlLoadParams lp;
  lp.n_threads = 1;
  lp.max_new_tokens = 16;
  MtlPipeline pipe(g_dir + "/q4_0.gguf", lp);
  T3MtlBatch batch(pipe.t3(), pipe.pool(), 2);
  const std::vector<int32_t> text = pipe.tokenize("Hi.", "en");
  T3MtlCond cond;
  cond.speaker_emb = pipe.voice().speaker_emb;
  cond.cond_prompt_tokens = pipe.voice().cond_prompt_tokens;
  const T3MtlSampling s = pipe.t3().default_sampling();
  const int a = batch.start(cond, text, s, 16, true);
  const int b = batch.start(cond, text, s, 16, true);
  EXPECT_NE(a, b);
  EXPECT_THROW(batch.start(cond, text, s, 16), Error);  // both requests in use
  batch.release(b);
  EXPECT_THROW(batch.start(cond, text, s, 17), Error);  // more than the reserved max_new
  T3MtlCond bad = cond;
  bad.speaker_emb.pop_back();
  EXPECT_THROW(batch.start(bad, text, s, 4), Error);  // generate's input checks
  std::vector<int32_t> bad_text = text;
  bad_text.push_back(1 << 30);
  EXPECT_THROW(batch.start(cond, bad_text, s, 4), Error);
  EXPECT_FALSE(batch.active(b));
  EXPECT_EQ(batch.step(), 1);
  EXPECT_THROW(batch.stats(b), Error);
  const int c = batch.start(cond, text, s, 1);
  EXPECT_TRUE(batch.finished(c));  // max_new 1: only the prefill token
  EXPECT_EQ(batch.tokens(c).size(), size_t(1));
  while (batch.step() > 0) {
  }
  EXPECT_EQ(batch.tokens(a).size(), size_t(16));  // ignore_eos: exactly max_new tokens
  EXPECT_FALSE(batch.stats(a).hit_limit);
  EXPECT_THROW(T3MtlBatch(pipe.t3(), pipe.pool(), 0), Error);
}

}  // namespace
}  // namespace cbx
