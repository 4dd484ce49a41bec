// TurboSampler (temperature -> top-k -> top-p -> repetition) against a plain reference of the
// same HF semantics (copy + nth_element for top-k, a comparison sort for top-p), on random
// speech-head-sized logits: the processed logits must be identical, bit for bit (the radix
// select / sort in sampler.cpp only change how the order is found). Ties: top-k keeps every
// logit equal to the k-th (checked on logits with many ties); top-p sorts equal logits by
// id, so the reference does too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "models/sampler.h"

using namespace cbx;

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> reference(std::vector<float> s, const SamplerParams& p, const std::vector<int32_t>& hist) {
  const int64_t V = int64_t(s.size());
  if (p.temperature > 0.f && p.temperature != 1.f)
    for (float& v : s) v = v / p.temperature;
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> w = s;
    std::nth_element(w.begin(), w.begin() + (p.top_k - 1), w.end(), std::greater<float>());
    const float kth = w[size_t(p.top_k - 1)];
    for (float& v : s)
      if (v < kth) v = kNegInf;
  }
  if (p.top_p < 1.0) {
    std::vector<int32_t> ord;
    float mx = kNegInf;
    for (int32_t i = 0; i < V; ++i)
      if (s[size_t(i)] != kNegInf) ord.push_back(i), mx = std::max(mx, s[size_t(i)]);
    std::stable_sort(ord.begin(), ord.end(), [&](int32_t a, int32_t b) { return s[size_t(a)] < s[size_t(b)]; });
    std::vector<float> e(ord.size());
    double sum = 0;
    for (size_t j = 0; j < ord.size(); ++j) sum += e[j] = std::exp(s[size_t(ord[j])] - mx);
    const float thr = float(1.0 - p.top_p), inv = float(1.0 / sum);
    double cum = 0;
    for (size_t j = 0; j + 1 < ord.size(); ++j) {
      cum += double(e[j] * inv);
      if (float(cum) <= thr)
        s[size_t(ord[j])] = kNegInf;
      else
        break;
    }
  }
  if (p.repetition_penalty != 1.f) {
    std::vector<char> seen(size_t(V), 0);
    for (int32_t id : hist) {
      if (seen[size_t(id)]) continue;
      seen[size_t(id)] = 1;
      float& v = s[size_t(id)];
      v = v < 0.f ? v * p.repetition_penalty : v / p.repetition_penalty;
    }
  }
  return s;
}

void expect_same(const SamplerParams& p, const std::vector<float>& logits, const std::vector<int32_t>& hist,
                 const char* what) {
  TurboSampler s(int32_t(logits.size()), p);
  const bool any = s.process(logits.data(), hist.data(), int64_t(hist.size()));
  const std::vector<float> ref = reference(logits, p, hist);
  ASSERT_TRUE(any) << what;
  size_t diff = 0, kept = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += std::memcmp(&ref[i], s.processed() + i, 4) != 0;
    kept += ref[i] != kNegInf;
  }
  EXPECT_EQ(diff, 0u) << what << ": processed logits differ at " << diff << " of " << ref.size() << " ids";
  EXPECT_GT(kept, 0u) << what;
}

}  // namespace

TEST(TurboSampler, MatchesReferenceOnRandomLogits) {
  const int32_t V = 6563;
  std::mt19937 rng(11);
  std::vector<int32_t> hist(300);
  for (int32_t& h : hist) h = int32_t(rng() % V);
  SamplerParams defaults;  // 0.8 / 1000 / 0.95 / 1.2
  SamplerParams sharp;
  sharp.temperature = 0.15f, sharp.top_k = 40, sharp.top_p = 0.7, sharp.repetition_penalty = 1.5f;
  SamplerParams k1;
  k1.top_k = 1;
  SamplerParams all;
  all.top_k = V + 5, all.top_p = 0.5;
  for (int trial = 0; trial < 12; ++trial) {
    std::normal_distribution<float> nd(0.f, 0.5f + trial);
    std::vector<float> lg(static_cast<size_t>(V), 0.f);
    for (float& v : lg) v = nd(rng);
    for (int j = 0; j < 40; ++j) lg[rng() % V] = kNegInf;  // masked ids
    lg[rng() % V] = 0.f;
    lg[rng() % V] = -0.f;
    expect_same(defaults, lg, hist, "defaults");
    expect_same(sharp, lg, hist, "sharp");
    expect_same(k1, lg, hist, "top_k 1");
    expect_same(all, lg, hist, "top_k > vocab");
  }
}

TEST(TurboSampler, TopKKeepsTiesWithTheKth) {
  const int32_t V = 3000;
  std::mt19937 rng(5);
  SamplerParams p;
  p.temperature = 1.f, p.top_p = 1.0, p.repetition_penalty = 1.f;
  for (int32_t k : {1, 7, 100, 999, 2999}) {
    p.top_k = k;
    std::vector<float> lg(static_cast<size_t>(V), 0.f);
    for (float& v : lg) v = float(int(rng() % 41) - 20) * 0.25f;  // 41 distinct values
    expect_same(p, lg, {}, "ties");
    TurboSampler s(V, p);
    ASSERT_TRUE(s.process(lg.data(), nullptr, 0));
    int64_t kept = 0;
    for (int32_t i = 0; i < V; ++i) kept += s.processed()[i] != kNegInf;
    EXPECT_GE(kept, k);  // ties with the k-th stay
  }
}
