// Arenas planned with ArenaPlan (core/arena_plan.h) on real tiny checkpoints
// (chatterbox-mkckpt --size tiny + convert, Multilingual with its CFG pair and Turbo with
// meanflow; the S3 tokenizer and CAMPPlus in both GEMM precisions): a stage run at its
// reserved maximum size stays inside its arena, and the arena
// holds at most Arena::reserve's rounding to 64 bytes more than that run's high-water mark
// (256 where a GEMM's scratch is planned: matmul_scratch_bytes adds 128 and answers for the
// widest ISA the CPU has). The S3Gen stages (flow encoder, CFM estimator, HiFT) are checked in
// F32 and BF16 precision, with their own arena and with one shared work arena.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/campplus.h"
#include "models/cfm_estimator.h"
#include "models/cfm_solver.h"
#include "models/flow_encoder.h"
#include "models/hift_vocoder.h"
#include "models/model_config.h"
#include "models/s3_tokenizer.h"
#include "models/t3_cond_encoder.h"
#include "ops/matmul.h"

namespace cbx {
namespace {

std::string g_dir;

class ArenaSizes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/";
    if (access((bin + "chatterbox").c_str(), X_OK) != 0 || access((bin + "chatterbox-mkckpt").c_str(), X_OK) != 0)
      return;
    char tmpl[] = "/tmp/cbx_arena_sizes_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    std::string cmd;
    for (const char* v : {"mtl", "turbo"})
      cmd += std::string(cmd.empty() ? "" : " && ") + "'" + bin + "chatterbox-mkckpt' --variant " + v +
             " --size tiny --seed 3 --threads 1 '" + g_dir + "/" + v + "' > /dev/null 2>&1 && '" + bin +
             "chatterbox' convert '" + g_dir + "/" + v + "' --type f32 -o '" + g_dir + "/" + v +
             ".gguf' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    if (!g_dir.empty()) (void)std::system(("rm -rf '" + g_dir + "'").c_str());
  }
  void SetUp() override {
    if (g_dir.empty()) GTEST_SKIP() << "chatterbox / chatterbox-mkckpt not built";
  }
};

void check_cfm_solver(const std::string& path, bool cfg) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  CfmEstimatorWeights w;
  bind_cfm_estimator(*f, c.cfm, w);
  ThreadPool pool(2);
  CfmSolverOptions o;
  o.max_frames = 24;
  CfmSolver solver(c.cfm, w, pool, o);
  ASSERT_EQ(solver.uses_cfg(), cfg) << path;
  const int64_t M = c.cfm.out_channels, T = o.max_frames;
  std::vector<float> mu(size_t(M * T), 0.1f), cond(size_t(M * T), 0.f), spks(size_t(M), 0.2f);
  const Tensor mt = make_tensor(DType::F32, {M, T}, mu.data(), mu.size() * 4);
  const Tensor ct = make_tensor(DType::F32, {M, T}, cond.data(), cond.size() * 4);
  const Tensor st = make_tensor(DType::F32, {M}, spks.data(), spks.size() * 4);
  solver.solve(mt, st, ct, 0);  // max_frames, no prompt: the largest mel
  EXPECT_LE(solver.arena_high_water(), solver.arena_bytes()) << path;
  EXPECT_LT(solver.arena_bytes() - solver.arena_high_water(), size_t(64)) << path;
}

// The conditioning encoder at max_prompt prompt rows (Multilingual: the perceiver's two
// attention blocks; Turbo: the prompt rows copied).
void check_cond_encoder(const std::string& path, bool perceiver) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  ASSERT_EQ(c.t3.perceiver, perceiver) << path;
  T3CondEncWeights w;
  bind_t3_cond_enc(*f, c.t3, w);
  ThreadPool pool(2);
  const int64_t d = c.t3.n_embd, P = 40;
  T3CondEncoder enc(c.t3, w, pool, P);
  std::vector<float> spk(size_t(c.t3.speaker_embed_size), 0.1f), prompt(size_t(P * d), 0.05f);
  std::vector<float> out(size_t(enc.n_tokens(P) * d));
  Tensor pt = make_tensor(DType::F32, {P, d}, prompt.data(), prompt.size() * 4);
  Tensor ot = make_tensor(DType::F32, {enc.n_tokens(P), d}, out.data(), out.size() * 4);
  enc.forward(spk.data(), int64_t(spk.size()), pt, 0.5f, ot);
  EXPECT_LE(enc.arena_high_water(), enc.arena_bytes()) << path;
  EXPECT_LE(enc.arena_bytes() - enc.arena_high_water(), size_t(256)) << path;
}

// A 16 kHz test wave: two tones and a slow envelope (any signal does; tokens are not checked).
std::vector<float> test_wave(int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[size_t(i)] = 0.3f * std::sin(0.05f * float(i)) * std::sin(0.0007f * float(i)) + 0.1f * std::sin(0.31f * float(i));
  return w;
}

// The S3 tokenizer at max_samples in both GEMM precisions (set_gemm_precision may switch after
// the arena is sized, so it is planned for either); past 30 s (3000 mel frames) the largest
// call is the whole clip's log-mel cut to 750 tokens.
void check_s3tok(const std::string& path, int64_t max_samples, int64_t max_tokens) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  ThreadPool pool(2);
  S3Tokenizer tok(*f, c, max_samples, pool.size());
  const std::vector<float> wav = test_wave(max_samples);
  for (GemmPrecision g : {GemmPrecision::F32, GemmPrecision::BF16}) {
    tok.set_gemm_precision(g);
    tok.tokenize(pool, wav.data(), max_samples, max_tokens);
  }
  EXPECT_LE(tok.arena_high_water(), tok.arena_bytes()) << path;
  EXPECT_LE(tok.arena_bytes() - tok.arena_high_water(), size_t(256)) << path;
}

// CAMPPlus at max_samples under an F32 and a BF16 precision scope (the caller's scope picks
// its convs' path): the arena and the per-thread arenas of the head's convs.
void check_campplus(const std::string& path) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  ThreadPool pool(2);
  const int64_t n = 16000 * 2 + 77;
  CampPlus cam(*f, c, n, pool.size());
  const std::vector<float> wav = test_wave(n);
  for (GemmPrecision g : {GemmPrecision::F32, GemmPrecision::BF16}) {
    GemmPrecisionScope scope(g);
    cam.embed(pool, wav.data(), n);
  }
  EXPECT_LE(cam.arena_high_water(), cam.arena_bytes()) << path;
  EXPECT_LT(cam.arena_bytes() - cam.arena_high_water(), size_t(64)) << path;
  EXPECT_LE(cam.thread_scratch_high_water(), cam.thread_scratch_bytes()) << path;
  EXPECT_LT(cam.thread_scratch_bytes() - cam.thread_scratch_high_water(), size_t(64)) << path;
}

// The arena a stage's per-call buffers went to: its own, or the shared work arena.
void expect_fits(size_t capacity, size_t high_water, size_t slack, const std::string& what) {
  EXPECT_LE(high_water, capacity) << what;
  EXPECT_LE(capacity - high_water, slack) << what << ": capacity " << capacity << ", high water " << high_water;
}

void check_flow(const std::string& path, GemmPrecision prec, bool shared) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  FlowEncoderWeights w;
  bind_flow_encoder(*f, c.flow, w);
  ThreadPool pool(2);
  Arena work;
  FlowEncoderOptions o;
  o.max_tokens = 12;
  o.gemm = prec;
  if (shared) o.work = &work;
  FlowEncoder enc(c.flow, w, pool, o);
  std::vector<int32_t> prompt(4), tokens(size_t(o.max_tokens) - prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 % size_t(c.flow.vocab));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 13 + 5) % size_t(c.flow.vocab));
  const int64_t M = c.flow.mel_dim, Tm = 6;
  std::vector<float> feat(size_t(Tm * M), 0.1f), emb(size_t(c.flow.spk_embed_dim), 0.3f);
  enc.forward(prompt.data(), int64_t(prompt.size()), tokens.data(), int64_t(tokens.size()), feat.data(), Tm, emb.data(),
              int64_t(emb.size()));
  const std::string what = path + " flow" + (shared ? " (shared)" : "");
  // The convs' scratch is exact, the GEMMs' and attention's planned by their upper bounds
  // (matmul_scratch_bytes, matmul_packed_scratch_bytes: every kernel choice of the widest ISA),
  // which at these tiny sizes leave up to ~15% of the arena unused.
  expect_fits(enc.arena_bytes(), enc.arena_high_water(), enc.arena_bytes() / 4, what);
  if (shared) expect_fits(work.capacity(), work.high_water(), work.capacity() / 4, what + " work arena");
}

void check_cfm_estimator(const std::string& path, GemmPrecision prec, bool shared) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  CfmEstimatorWeights w;
  bind_cfm_estimator(*f, c.cfm, w);
  ThreadPool pool(2);
  Arena work;
  CfmEstimatorOptions o;
  o.max_frames = 20;
  o.max_batch = 2;
  o.gemm = prec;
  if (shared) o.work = &work;
  CfmEstimator est(c.cfm, w, pool, o);
  const int64_t B = o.max_batch, M = c.cfm.out_channels, T = o.max_frames;
  std::vector<float> x(size_t(B * M * T), 0.2f), mu(x.size(), 0.1f), cond(x.size(), 0.f), spks(size_t(B * M), 0.3f);
  const Tensor xt = make_tensor(DType::F32, {B, M, T}, x.data(), x.size() * 4);
  const Tensor mt = make_tensor(DType::F32, {B, M, T}, mu.data(), mu.size() * 4);
  const Tensor ct = make_tensor(DType::F32, {B, M, T}, cond.data(), cond.size() * 4);
  const Tensor st = make_tensor(DType::F32, {B, M}, spks.data(), spks.size() * 4);
  const float t[2] = {0.3f, 0.6f}, r[2] = {0.5f, 0.9f};
  est.forward(xt, Tensor{}, mt, t, st, ct, r);
  const std::string what = path + " cfm estimator" + (shared ? " (shared)" : "");
  // As for the flow encoder: the GEMMs' scratch is planned by upper bounds (~25% here).
  expect_fits(est.arena_bytes(), est.arena_high_water(), est.arena_bytes() / 3, what);
  if (shared) expect_fits(work.capacity(), work.high_water(), work.capacity() / 3, what + " work arena");
}

void check_hift(const std::string& path, GemmPrecision prec, bool shared) {
  auto f = GgufFile::open(path);
  const ModelConfig c = read_config(*f);
  ThreadPool pool(2);
  Arena work;
  HiftOptions o;
  o.max_frames = 10;
  o.gemm = prec;
  if (shared) o.work = &work;
  HiftVocoder voc(c, *f, pool, o);
  std::vector<float> mel(size_t(c.hift.in_channels * o.max_frames), -2.f);
  const Tensor mt = make_tensor(DType::F32, {c.hift.in_channels, o.max_frames}, mel.data(), mel.size() * 4);
  voc.forward(mt);
  const std::string what = path + " hift" + (shared ? " (shared)" : "");
  // Convolutions only: their scratch is exact, so only Arena::reserve's rounding is left.
  expect_fits(voc.arena_bytes(), voc.arena_high_water(), 63, what);
  if (shared) expect_fits(work.capacity(), work.high_water(), 63, what + " work arena");
}

void check_s3gen(const std::string& path) {
  for (GemmPrecision prec : {GemmPrecision::F32, GemmPrecision::BF16})
    for (bool shared : {false, true}) {
      SCOPED_TRACE(std::string(prec == GemmPrecision::F32 ? "f32" : "bf16") + (shared ? ", shared" : ", own"));
      check_flow(path, prec, shared);
      check_cfm_estimator(path, prec, shared);
      check_hift(path, prec, shared);
    }
}

TEST_F(ArenaSizes, CondEncoderMtl) { check_cond_encoder(g_dir + "/mtl.gguf", true); }
TEST_F(ArenaSizes, CondEncoderTurbo) { check_cond_encoder(g_dir + "/turbo.gguf", false); }

TEST_F(ArenaSizes, CfmSolverMtl) { check_cfm_solver(g_dir + "/mtl.gguf", true); }
TEST_F(ArenaSizes, CfmSolverTurbo) { check_cfm_solver(g_dir + "/turbo.gguf", false); }

TEST_F(ArenaSizes, S3Tokenizer) { check_s3tok(g_dir + "/mtl.gguf", 16000 * 3 + 99, -1); }
TEST_F(ArenaSizes, S3TokenizerPast30s) { check_s3tok(g_dir + "/turbo.gguf", 16000 * 31, 750); }
TEST_F(ArenaSizes, CampPlus) { check_campplus(g_dir + "/mtl.gguf"); }
TEST_F(ArenaSizes, S3GenStagesMtl) { check_s3gen(g_dir + "/mtl.gguf"); }
TEST_F(ArenaSizes, S3GenStagesTurbo) { check_s3gen(g_dir + "/turbo.gguf"); }

}  // namespace
}  // namespace cbx
