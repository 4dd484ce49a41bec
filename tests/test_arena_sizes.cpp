// Arenas planned with ArenaPlan (core/arena_plan.h) on real tiny checkpoints
// (chatterbox-mkckpt --size tiny + convert, Multilingual with its CFG pair and Turbo with
// meanflow): a stage run at its reserved maximum size stays inside its arena, and the arena
// holds at most Arena::reserve's rounding to 64 bytes more than that run's high-water mark
// (256 where a GEMM's scratch is planned: matmul_scratch_bytes adds 128 and answers for the
// widest ISA the CPU has).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/cfm_estimator.h"
#include "models/cfm_solver.h"
#include "models/model_config.h"
#include "models/t3_cond_encoder.h"

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

TEST_F(ArenaSizes, CondEncoderMtl) { check_cond_encoder(g_dir + "/mtl.gguf", true); }
TEST_F(ArenaSizes, CondEncoderTurbo) { check_cond_encoder(g_dir + "/turbo.gguf", false); }

TEST_F(ArenaSizes, CfmSolverMtl) { check_cfm_solver(g_dir + "/mtl.gguf", true); }
TEST_F(ArenaSizes, CfmSolverTurbo) { check_cfm_solver(g_dir + "/turbo.gguf", false); }

}  // namespace
}  // namespace cbx
