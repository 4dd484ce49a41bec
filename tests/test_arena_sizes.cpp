// Arenas planned with ArenaPlan (core/arena_plan.h) on real tiny checkpoints
// (chatterbox-mkckpt --size tiny + convert, Multilingual with its CFG pair and Turbo with
// meanflow): a stage run at its reserved maximum size stays inside its arena, and the arena
// holds at most Arena::reserve's rounding to 64 bytes more than that run's high-water mark.
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

TEST_F(ArenaSizes, CfmSolverMtl) { check_cfm_solver(g_dir + "/mtl.gguf", true); }
TEST_F(ArenaSizes, CfmSolverTurbo) { check_cfm_solver(g_dir + "/turbo.gguf", false); }

}  // namespace
}  // namespace cbx
