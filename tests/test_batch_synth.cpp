// BatchSynth (pipeline/batch_synth.h): requests of different lengths, chunk counts, seeds and
// voices, submitted at different steps and decoded together, each get exactly the audio
// TurboPipeline::synthesize gives them alone (chunk by chunk, byte for byte); a request
// cancelled mid-batch frees its row and the others go on unchanged. Tiny synthetic Turbo model
// (chatterbox-mkckpt + convert). The same for a tiny Multilingual model: CFG pairs and
// cfg_weight 0 requests, several languages and exaggerations, against MtlPipeline::synthesize.
// Streaming requests (stream = true, a short schedule) beside plain ones, both variants: each
// streamed request's pieces, boundaries included, are synthesize's with stream = true alone; a
// cancelled stream's row and stream serve the next request unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/batch_synth.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/turbo_pipeline.h"
#include "pipeline/voice.h"

namespace cbx {
namespace {

std::string g_dir;

class BatchSynthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_batchsynth_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    const std::string cmd = "'" + bin + "chatterbox-mkckpt' --variant turbo --size tiny --seed 5 '" + g_dir +
                            "/ckpt' > /dev/null 2>&1 && '" + bin + "chatterbox' convert '" + g_dir +
                            "/ckpt' --type q4_0 -o '" + g_dir + "/m.gguf' > /dev/null 2>&1 && '" + bin +
                            "chatterbox-mkckpt' --variant mtl --size tiny --seed 5 --threads 1 '" + g_dir +
                            "/mck' > /dev/null 2>&1 && '" + bin + "chatterbox' convert '" + g_dir +
                            "/mck' --type q4_0 -o '" + g_dir + "/mtl.gguf' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    if (!g_dir.empty()) (void)std::system(("rm -rf '" + g_dir + "'").c_str());
  }
  void SetUp() override {
    if (g_dir.empty()) GTEST_SKIP() << "chatterbox / chatterbox-mkckpt not built";
  }
};

struct Case {
  std::string text;
  uint64_t seed = 0;
  int64_t chunk_tokens = 0;  // max_chunk_tokens: small values give several chunks
  bool other_voice = false;
  int join_step = 0;
  bool stream = false;  // token-chunked streaming (kSchedule)
};

// A short schedule: the tiny models' chunks have few tokens; several runs per chunk.
StreamSchedule test_schedule() {
  StreamSchedule s;
  s.first_tokens = 3;
  s.chunk_tokens = 4;
  s.context_tokens = 5;
  s.prompt_tokens = 20;
  return s;
}

struct Got {
  std::vector<std::vector<float>> chunks;
  int64_t n_chunks = -1;
  bool done = false, failed = false;
  BatchSynthStats stats;
};

template <class Pipe>
std::shared_ptr<const Voice> make_other_voice(const Pipe& pipe) {
  auto v = std::make_shared<Voice>(pipe.builtin_voice());
  for (float& x : v->speaker_emb) x = -0.5f * x + 0.01f;
  v->cond_prompt_tokens.resize(v->cond_prompt_tokens.size() / 2 + 1);
  for (size_t i = 0; i < v->cond_prompt_tokens.size(); ++i) v->cond_prompt_tokens[i] = int32_t((i * 37 + 11) % 6561);
  for (float& x : v->embedding) x = 0.7f * x - 0.02f;
  return v;
}

TurboSynthParams params_of(const Case& c) {
  TurboSynthParams p;
  p.seed = c.seed;
  p.max_chunk_tokens = c.chunk_tokens;
  p.stream = c.stream;
  p.stream_schedule = test_schedule();
  return p;
}

// What synthesize gives the case alone: its audio chunk by chunk (streamed: piece by piece).
std::vector<std::vector<float>> alone(TurboPipeline& pipe, const Case& c, const std::shared_ptr<const Voice>& other) {
  if (c.other_voice) pipe.set_voice(*other);
  std::vector<std::vector<float>> out;
  pipe.synthesize(c.text, params_of(c), nullptr, [&](const float* s, int64_t n, int64_t, int64_t) {
    out.emplace_back(s, s + n);
    return true;
  });
  pipe.reset_voice();
  return out;
}

BatchSynthRequest request_of(const Case& c, const std::shared_ptr<const Voice>& other, Got& g) {
  BatchSynthRequest r;
  r.text = c.text;
  r.params = params_of(c);
  if (c.other_voice) r.voice = other;
  r.on_audio = [&g](const float* s, int64_t n, int64_t k, int64_t n_chunks) {
    EXPECT_EQ(k, int64_t(g.chunks.size()));
    g.n_chunks = n_chunks;
    g.chunks.emplace_back(s, s + n);
    return true;
  };
  r.on_done = [&g](const BatchSynthStats& st) {
    g.done = true;
    g.stats = st;
  };
  r.on_error = [&g](std::exception_ptr) { g.failed = true; };
  return r;
}

void expect_same(const std::vector<std::vector<float>>& want, const Got& g, size_t i) {
  ASSERT_EQ(g.chunks.size(), want.size()) << "request " << i;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(g.chunks[k].size(), want[k].size()) << "request " << i << " chunk " << k;
    EXPECT_EQ(std::memcmp(g.chunks[k].data(), want[k].data(), want[k].size() * sizeof(float)), 0)
        << "request " << i << " chunk " << k << ": audio differs from synthesize alone";
  }
}

const std::vector<Case> kCases = {
    {"Hello there.", 1, 0, false, 0},
    {"A somewhat longer sentence, with a clause. And then a second one follows it here.", 7, 6, false, 0},
    {"Short one. Two. Three words here.", 42, 4, true, 2},
    {"Numbers and words go here, one by one, until the end.", 9, 8, false, 3},
    {"The quick brown fox jumps over the lazy dog. Again!", 12345, 5, true, 5},
    {"Yes!", 3, 0, false, 9},
};

TEST_F(BatchSynthTest, EachRequestEqualsSynthesizeAlone) {
  TurboLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 40;
  TurboPipeline pipe(g_dir + "/m.gguf", lp);
  const auto other = make_other_voice(pipe);
  std::vector<std::vector<std::vector<float>>> want;
  for (const Case& c : kCases) want.push_back(alone(pipe, c, other));
  int multi = 0;
  for (const auto& w : want) multi += w.size() > 1;
  ASSERT_GE(multi, 3) << "the cases should have several chunks";

  BatchSynth bs(pipe, 3);
  std::vector<Got> got(kCases.size());
  size_t next = 0;
  int most = 0;
  for (int step = 0; step < 5000; ++step) {
    while (next < kCases.size() && kCases[next].join_step <= step && bs.can_admit()) {
      bs.submit(request_of(kCases[next], other, got[next]));
      ++next;
    }
    most = std::max(most, bs.n_requests());
    bs.step();
    if (next == kCases.size() && bs.n_requests() == 0) break;
  }
  EXPECT_EQ(most, 3);  // more cases than rows: some waited for a free one
  for (size_t i = 0; i < kCases.size(); ++i) {
    EXPECT_TRUE(got[i].done) << "request " << i;
    EXPECT_FALSE(got[i].failed) << "request " << i;
    EXPECT_EQ(got[i].n_chunks, int64_t(want[i].size()));
    EXPECT_EQ(got[i].stats.n_chunks, int64_t(want[i].size()));
    expect_same(want[i], got[i], i);
  }
  // The pipeline itself is left as it was: synthesize alone still gives the same audio.
  expect_same(alone(pipe, kCases[2], other), got[2], 2);
}

// Streaming requests (S3Gen runs between decode steps on their schedules) next to plain ones:
// each streamed request's pieces, boundaries included, are synthesize's with stream = true.
TEST_F(BatchSynthTest, StreamedRequestsEqualSynthesizeAlone) {
  TurboLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 40;
  TurboPipeline pipe(g_dir + "/m.gguf", lp);
  const auto other = make_other_voice(pipe);
  std::vector<Case> cases = kCases;
  for (size_t i = 0; i < cases.size(); ++i) cases[i].stream = i != 3;  // one plain request among them
  cases.push_back({"One more streamed request, joining late.", 77, 0, true, 11, true});
  std::vector<std::vector<std::vector<float>>> want;
  for (const Case& c : cases) want.push_back(alone(pipe, c, other));
  int split = 0;  // streamed chunks that came in several pieces
  for (size_t i = 0; i < cases.size(); ++i) {
    const int64_t n_chunks = int64_t(pipe.split_text(cases[i].text, cases[i].chunk_tokens).size());
    if (cases[i].stream) split += int64_t(want[i].size()) > n_chunks;
    if (!cases[i].stream) {
      EXPECT_EQ(int64_t(want[i].size()), n_chunks);
    }
  }
  ASSERT_GE(split, 3) << "the streamed cases should give several pieces per chunk";

  BatchSynth bs(pipe, 4);
  std::vector<Got> got(cases.size());
  size_t next = 0;
  int most = 0;
  for (int step = 0; step < 5000; ++step) {
    while (next < cases.size() && cases[next].join_step <= step && bs.can_admit()) {
      Got& g = got[next];
      BatchSynthRequest r = request_of(cases[next], other, g);
      r.on_audio = [&g](const float* s, int64_t n, int64_t, int64_t n_chunks) {  // chunk k: several pieces
        g.n_chunks = n_chunks;
        g.chunks.emplace_back(s, s + n);
        return true;
      };
      bs.submit(std::move(r));
      ++next;
    }
    most = std::max(most, bs.n_requests());
    bs.step();
    if (next == cases.size() && bs.n_requests() == 0) break;
  }
  EXPECT_EQ(most, 4);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(got[i].done) << "request " << i;
    EXPECT_FALSE(got[i].failed) << "request " << i;
    int64_t total = 0;
    for (const auto& w : want[i]) total += int64_t(w.size());
    EXPECT_EQ(got[i].stats.n_samples, total) << "request " << i;
    expect_same(want[i], got[i], i);
  }
  expect_same(alone(pipe, cases[2], other), got[2], 2);
  EXPECT_EQ(bs.n_t3_active(), 0);

  // The time breakdown counts what ran: one S3Gen run per plain chunk, a run for every streamed
  // piece (a run may emit nothing, so at least as many runs as pieces), at most one final run
  // per streamed chunk; the flow / CFM / HiFT parts lie inside the runs.
  const BatchSynthTimes t = bs.times();
  int64_t plain_chunks = 0, streamed_chunks = 0, pieces = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    (cases[i].stream ? streamed_chunks : plain_chunks) += got[i].n_chunks;
    if (cases[i].stream) pieces += int64_t(got[i].chunks.size());
  }
  EXPECT_EQ(t.chunk_runs, plain_chunks);
  EXPECT_LE(t.final_runs, streamed_chunks);
  EXPECT_GE(t.stream_runs, 1);
  EXPECT_GE(t.stream_runs + t.final_runs, pieces);
  EXPECT_GT(t.decode_steps, 0);
  EXPECT_GT(t.decode_s, 0);
  EXPECT_GT(t.cfm_s, 0);
  EXPECT_LE(t.flow_s + t.cfm_s + t.hift_s, t.stream_s + t.final_s + t.chunk_s);
}

// A streaming request cancelled after its first piece frees its row and its stream; the request
// that takes them over, and the one beside, still get synthesize's pieces.
TEST_F(BatchSynthTest, CancelledStreamIsReused) {
  TurboLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 40;
  TurboPipeline pipe(g_dir + "/m.gguf", lp);
  const auto other = make_other_voice(pipe);
  Case a = kCases[0], b = kCases[5], c = {"Short one, two.", 42, 0, true, 0, true};
  a.stream = b.stream = true;
  const auto want_b = alone(pipe, b, other), want_c = alone(pipe, c, other);
  BatchSynth bs(pipe, 2);
  Got ga, gb, gc;
  auto piecewise = [&](const Case& cs, Got& g) {
    BatchSynthRequest r = request_of(cs, other, g);
    r.on_audio = [&g](const float* s, int64_t n, int64_t, int64_t) {
      g.chunks.emplace_back(s, s + n);
      return true;
    };
    return r;
  };
  const int64_t ida = bs.submit(piecewise(a, ga));
  bs.submit(piecewise(b, gb));
  for (int step = 0; step < 100 && ga.chunks.empty(); ++step) bs.step();
  ASSERT_FALSE(ga.chunks.empty());
  ASSERT_FALSE(ga.done);
  EXPECT_TRUE(bs.cancel(ida));
  bs.submit(piecewise(c, gc));  // a's row and stream
  for (int step = 0; step < 5000 && bs.n_requests() > 0; ++step) bs.step();
  EXPECT_TRUE(gb.done && gc.done);
  EXPECT_FALSE(ga.done || ga.failed);
  expect_same(want_b, gb, 1);
  expect_same(want_c, gc, 2);
}

TEST_F(BatchSynthTest, CancelMidBatchFreesTheRow) {
  TurboLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 40;
  TurboPipeline pipe(g_dir + "/m.gguf", lp);
  const auto other = make_other_voice(pipe);
  const Case a = kCases[1], b = kCases[3], c = kCases[4], d = kCases[2];
  const auto want_a = alone(pipe, a, other), want_c = alone(pipe, c, other), want_d = alone(pipe, d, other);

  BatchSynth bs(pipe, 3);
  Got ga, gb, gc, gd;
  bs.submit(request_of(a, other, ga));
  const int64_t idb = bs.submit(request_of(b, other, gb));
  bs.submit(request_of(c, other, gc));
  EXPECT_FALSE(bs.can_admit());
  EXPECT_THROW(bs.submit(request_of(d, other, gd)), Error);
  for (int i = 0; i < 3; ++i) bs.step();
  EXPECT_TRUE(bs.cancel(idb));
  EXPECT_FALSE(bs.has(idb));
  EXPECT_FALSE(bs.cancel(idb));
  const size_t b_chunks = gb.chunks.size();
  ASSERT_TRUE(bs.can_admit());
  bs.submit(request_of(d, other, gd));  // takes the cancelled request's row
  for (int step = 0; step < 5000 && bs.n_requests() > 0; ++step) bs.step();
  EXPECT_EQ(bs.n_requests(), 0);
  EXPECT_EQ(gb.chunks.size(), b_chunks);  // nothing after the cancel
  EXPECT_FALSE(gb.done);
  EXPECT_FALSE(gb.failed);
  EXPECT_TRUE(ga.done && gc.done && gd.done);
  expect_same(want_a, ga, 0);
  expect_same(want_c, gc, 2);
  expect_same(want_d, gd, 3);
  EXPECT_EQ(bs.n_t3_active(), 0);
}

TEST_F(BatchSynthTest, BadRequestsAndStoppedAudio) {
  TurboLoadParams lp;
  lp.n_threads = 1;
  lp.max_new_tokens = 16;
  TurboPipeline pipe(g_dir + "/m.gguf", lp);
  BatchSynth bs(pipe, 2);
  Got g;
  Case c = kCases[0];
  c.text = "   ";
  EXPECT_THROW(bs.submit(request_of(c, nullptr, g)), TextError);
  c.text = "Hi.";
  BatchSynthRequest r = request_of(c, nullptr, g);
  r.params.temperature = 100;
  EXPECT_THROW(bs.submit(r), Error);
  r = request_of(c, nullptr, g);
  r.params.stream = true;
  r.params.stream_schedule.first_tokens = 0;
  EXPECT_THROW(bs.submit(r), InvalidArgumentError);
  auto bad_voice = std::make_shared<Voice>(pipe.builtin_voice());
  bad_voice->speaker_emb.resize(3);
  r = request_of(c, nullptr, g);
  r.voice = bad_voice;
  EXPECT_THROW(bs.submit(r), Error);
  EXPECT_EQ(bs.n_requests(), 0);
  // on_audio saying stop ends the request through on_error with AbortedError.
  r = request_of(c, nullptr, g);
  bool aborted = false;
  r.on_audio = [](const float*, int64_t, int64_t, int64_t) { return false; };
  r.on_error = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const AbortedError&) {
      aborted = true;
    } catch (...) {
    }
  };
  bs.submit(r);
  for (int step = 0; step < 100 && bs.n_requests() > 0; ++step) bs.step();
  EXPECT_TRUE(aborted);
  EXPECT_EQ(bs.n_t3_active(), 0);
  EXPECT_THROW(BatchSynth(pipe, 0), Error);
}

// ---- Multilingual ----

struct MtlCase {
  std::string text, language;
  uint64_t seed = 0;
  int64_t chunk_tokens = 0;
  float cfg_weight = -1, exaggeration = -1;
  bool other_voice = false;
  int join_step = 0;
  bool stream = false;
};

MtlSynthParams mtl_params_of(const MtlCase& c) {
  MtlSynthParams p;
  p.language = c.language;
  p.seed = c.seed;
  p.max_chunk_tokens = c.chunk_tokens;
  p.cfg_weight = c.cfg_weight;
  p.exaggeration = c.exaggeration;
  p.stream = c.stream;
  p.stream_schedule = test_schedule();
  return p;
}

std::vector<std::vector<float>> mtl_alone(MtlPipeline& pipe, const MtlCase& c,
                                          const std::shared_ptr<const Voice>& other) {
  if (c.other_voice) pipe.set_voice(*other);
  std::vector<std::vector<float>> out;
  pipe.synthesize(c.text, mtl_params_of(c), nullptr, [&](const float* s, int64_t n, int64_t, int64_t) {
    out.emplace_back(s, s + n);
    return true;
  });
  pipe.reset_voice();
  return out;
}

TEST_F(BatchSynthTest, MultilingualRequestsEqualSynthesizeAlone) {
  MtlLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 16;
  MtlPipeline pipe(g_dir + "/mtl.gguf", lp);
  const auto other = make_other_voice(pipe);
  const std::vector<MtlCase> cases = {
      {"Hello there.", "en", 1, 0, -1, -1, false, 0},
      {"Une phrase, avec une virgule. Et une autre.", "fr", 7, 8, 0.f, -1, false, 0},
      {"Short one. Two. Three words here.", "en", 42, 5, 1.0f, 0.9f, true, 2},
      {"Hallo, wie geht es dir heute?", "de", 9, 0, -1, 0.2f, false, 4},
      {"Yes! No. Maybe.", "en", 3, 3, 0.f, -1, true, 7},
  };
  std::vector<std::vector<std::vector<float>>> want;
  for (const MtlCase& c : cases) want.push_back(mtl_alone(pipe, c, other));
  int multi = 0;
  for (const auto& w : want) multi += w.size() > 1;
  ASSERT_GE(multi, 2) << "the cases should have several chunks";

  BatchSynth bs(pipe, 3);
  std::vector<Got> got(cases.size());
  size_t next = 0;
  int most = 0;
  for (int step = 0; step < 5000; ++step) {
    while (next < cases.size() && cases[next].join_step <= step && bs.can_admit()) {
      Case tc;  // request_of's callbacks; the Multilingual parameters below
      tc.text = cases[next].text;
      BatchSynthRequest r = request_of(tc, other, got[next]);
      r.mtl_params = mtl_params_of(cases[next]);
      if (cases[next].other_voice) r.voice = other;
      bs.submit(std::move(r));
      ++next;
    }
    most = std::max(most, bs.n_requests());
    bs.step();
    if (next == cases.size() && bs.n_requests() == 0) break;
  }
  EXPECT_EQ(most, 3);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(got[i].done) << "request " << i;
    EXPECT_FALSE(got[i].failed) << "request " << i;
    EXPECT_EQ(got[i].stats.n_chunks, int64_t(want[i].size()));
    expect_same(want[i], got[i], i);
  }
  expect_same(mtl_alone(pipe, cases[2], other), got[2], 2);
  EXPECT_EQ(bs.n_t3_active(), 0);

  // Bad Multilingual requests are refused at submit with synthesize's errors.
  Got g;
  Case tc;
  tc.text = "Hi.";
  BatchSynthRequest r = request_of(tc, other, g);
  r.mtl_params.language = "xx";
  EXPECT_THROW(bs.submit(r), InvalidArgumentError);
  r.mtl_params.language = "en";
  r.mtl_params.cfg_weight = 200;
  EXPECT_THROW(bs.submit(r), InvalidArgumentError);
  EXPECT_EQ(bs.n_requests(), 0);
}

TEST_F(BatchSynthTest, MultilingualStreamedRequestsEqualSynthesizeAlone) {
  MtlLoadParams lp;
  lp.n_threads = 2;
  lp.max_new_tokens = 16;
  MtlPipeline pipe(g_dir + "/mtl.gguf", lp);
  const auto other = make_other_voice(pipe);
  const std::vector<MtlCase> cases = {
      {"Hello there.", "en", 1, 0, -1, -1, false, 0, true},
      {"Une phrase, avec une virgule. Et une autre.", "fr", 7, 8, 0.f, -1, false, 0, true},
      {"Short one. Two. Three words here.", "en", 42, 5, 1.0f, 0.9f, true, 1, false},
      {"Hallo, wie geht es dir heute?", "de", 9, 0, -1, 0.2f, true, 3, true},
      {"Yes! No. Maybe.", "en", 3, 3, 0.f, -1, false, 6, true},
  };
  std::vector<std::vector<std::vector<float>>> want;
  for (const MtlCase& c : cases) want.push_back(mtl_alone(pipe, c, other));
  int split = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const int64_t n_chunks = int64_t(pipe.split_text(cases[i].text, cases[i].language, cases[i].chunk_tokens).size());
    if (cases[i].stream) split += int64_t(want[i].size()) > n_chunks;
  }
  ASSERT_GE(split, 2) << "the streamed cases should give several pieces per chunk";

  BatchSynth bs(pipe, 3);
  std::vector<Got> got(cases.size());
  size_t next = 0;
  for (int step = 0; step < 5000; ++step) {
    while (next < cases.size() && cases[next].join_step <= step && bs.can_admit()) {
      Got& g = got[next];
      Case tc;
      tc.text = cases[next].text;
      BatchSynthRequest r = request_of(tc, other, g);
      r.on_audio = [&g](const float* s, int64_t n, int64_t, int64_t n_chunks) {
        g.n_chunks = n_chunks;
        g.chunks.emplace_back(s, s + n);
        return true;
      };
      r.mtl_params = mtl_params_of(cases[next]);
      if (cases[next].other_voice) r.voice = other;
      bs.submit(std::move(r));
      ++next;
    }
    bs.step();
    if (next == cases.size() && bs.n_requests() == 0) break;
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(got[i].done) << "request " << i;
    EXPECT_FALSE(got[i].failed) << "request " << i;
    expect_same(want[i], got[i], i);
  }
  EXPECT_EQ(bs.n_t3_active(), 0);
}

}  // namespace
}  // namespace cbx
