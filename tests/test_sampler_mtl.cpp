// MtlSampler (Multilingual order: CFG -> repetition -> temperature -> min-p -> top-p), on
// hand-computed cases. The HF-semantics check on real logits is tests/test_t3_mtl_parity.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "models/sampler.h"

using namespace cbx;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

MtlSamplerParams plain() {  // every step an identity except the ones a test enables
  MtlSamplerParams p;
  p.cfg_weight = 0.f;
  p.temperature = 1.f;
  p.min_p = 0.f;
  p.top_p = 1.0;
  p.repetition_penalty = 1.f;
  p.greedy = true;
  return p;
}
}  // namespace

TEST(MtlSampler, CfgCombine) {
  MtlSamplerParams p = plain();
  p.cfg_weight = 0.5f;
  MtlSampler s(3, p);
  const float cond[3] = {1.f, 2.f, -1.f}, uncond[3] = {3.f, 0.f, -1.f};
  ASSERT_TRUE(s.process(cond, uncond, nullptr, 0));
  EXPECT_FLOAT_EQ(s.guided()[0], 0.f);  // 1 + 0.5 (1 - 3)
  EXPECT_FLOAT_EQ(s.guided()[1], 3.f);  // 2 + 0.5 (2 - 0)
  EXPECT_FLOAT_EQ(s.guided()[2], -1.f);
  EXPECT_EQ(s.pick(), 1);
  // No uncond row: the cond logits unchanged.
  ASSERT_TRUE(s.process(cond, nullptr, nullptr, 0));
  EXPECT_FLOAT_EQ(s.guided()[0], 1.f);
  EXPECT_EQ(s.pick(), 1);
}

TEST(MtlSampler, RepetitionBeforeTemperature) {
  MtlSamplerParams p = plain();
  p.repetition_penalty = 2.f;
  p.temperature = 0.5f;
  MtlSampler s(4, p);
  const float x[4] = {4.f, -2.f, 3.f, 1.f};
  const int32_t hist[3] = {0, 1, 0};  // 0 twice: penalised once
  ASSERT_TRUE(s.process(x, nullptr, hist, 3));
  EXPECT_FLOAT_EQ(s.processed()[0], 4.f);   // 4 / 2 / 0.5
  EXPECT_FLOAT_EQ(s.processed()[1], -8.f);  // -2 * 2 / 0.5
  EXPECT_FLOAT_EQ(s.processed()[2], 6.f);   // 3 / 0.5
  EXPECT_FLOAT_EQ(s.processed()[3], 2.f);
  EXPECT_EQ(s.pick(), 2);  // the penalty moved the argmax from 0 to 2
}

TEST(MtlSampler, MinPKeepsTokensAboveFractionOfTop) {
  MtlSamplerParams p = plain();
  p.min_p = 0.1f;
  MtlSampler s(4, p);
  // p_i / p_max = exp(x_i - 0): 1, e^-1 = 0.37, e^-2 = 0.135, e^-3 = 0.05 (< 0.1: dropped)
  const float x[4] = {0.f, -1.f, -2.f, -3.f};
  ASSERT_TRUE(s.process(x, nullptr, nullptr, 0));
  EXPECT_FLOAT_EQ(s.processed()[0], 0.f);
  EXPECT_FLOAT_EQ(s.processed()[2], -2.f);
  EXPECT_EQ(s.processed()[3], -kInf);
}

TEST(MtlSampler, TopPAfterMinP) {
  MtlSamplerParams p = plain();
  p.top_p = 0.5;
  MtlSampler s(3, p);
  // probabilities 0.665, 0.245, 0.090: ascending cumsum 0.090, 0.335 <= 0.5 dropped, 1.0 kept
  const float x[3] = {1.f, 0.f, -1.f};
  ASSERT_TRUE(s.process(x, nullptr, nullptr, 0));
  EXPECT_FLOAT_EQ(s.processed()[0], 1.f);
  EXPECT_EQ(s.processed()[1], -kInf);
  EXPECT_EQ(s.processed()[2], -kInf);
}

TEST(MtlSampler, SamplingIsSeededAndStaysInTheKeptSet) {
  MtlSamplerParams p = plain();
  p.greedy = false;
  p.min_p = 0.2f;
  p.seed = 42;
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = -0.1f * float(i);  // min-p keeps ids 0..16
  MtlSampler a(64, p), b(64, p);
  std::vector<int> seen(64, 0);
  for (int k = 0; k < 400; ++k) {
    ASSERT_TRUE(a.process(x.data(), nullptr, nullptr, 0));
    ASSERT_TRUE(b.process(x.data(), nullptr, nullptr, 0));
    const int32_t ta = a.pick(), tb = b.pick();
    ASSERT_EQ(ta, tb);
    ASSERT_GE(ta, 0);
    ASSERT_TRUE(std::isfinite(a.processed()[ta]));
    ++seen[size_t(ta)];
  }
  EXPECT_GT(seen[0], seen[10]);  // more likely ids come up more often
  EXPECT_GT(seen[5], 0);
}

TEST(MtlSampler, RejectsBadParametersAndHistory) {
  MtlSamplerParams p = plain();
  p.temperature = 0.f;
  EXPECT_THROW(MtlSampler(8, p), Error);
  p = plain();
  p.min_p = 1.5f;
  EXPECT_THROW(MtlSampler(8, p), Error);
  p = plain();
  p.top_p = 0.0;
  EXPECT_THROW(MtlSampler(8, p), Error);
  p = plain();
  p.repetition_penalty = 2.f;
  MtlSampler s(8, p);
  const float x[8] = {};
  const int32_t bad = 8;
  EXPECT_THROW(s.process(x, nullptr, &bad, 1), Error);
}
