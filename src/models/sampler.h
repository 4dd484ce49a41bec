// Speech-token sampler, Turbo order (spec §6.7, t3.py inference_turbo), HF processor semantics:
//   1. temperature   logits / T                                (if T > 0 and T != 1)
//   2. top-k         keep logits >= the k-th largest            (if k > 0)
//   3. top-p         sort ascending, softmax, cumsum; drop those with cumulative prob
//                    <= 1 - p, always keeping the largest        (if p < 1); equal
//                    logits sort by id (torch leaves their order unspecified)
//   4. repetition    for each distinct id in `history`: logit / r if > 0 else logit * r
//                    (if r != 1)
//   5. softmax, then one multinomial draw from a seeded PRNG (ours: xoshiro256**, so draws
//      are deterministic per seed but do not reproduce torch.multinomial).
// Greedy mode runs the same chain 1-4 and takes the argmax (first index on ties).
// All buffers are sized for the vocabulary at construction: sampling allocates nothing.
#pragma once
#include <cstdint>
#include <vector>

namespace cbx {

struct SamplerParams {
  float temperature = 0.8f;
  int32_t top_k = 1000;
  double top_p = 0.95;  // double: 1 - top_p is formed as Python does before the f32 compare
  float repetition_penalty = 1.2f;
  bool greedy = false;
  uint64_t seed = 0;
};

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

class TurboSampler {
 public:
  TurboSampler(int32_t vocab, const SamplerParams& p);

  // Steps 1-4 on raw logits [vocab]; history: the ids the repetition penalty sees. Returns
  // false when every processed logit is -inf (the caller stops then).
  bool process(const float* logits, const int32_t* history, int64_t n_history);
  // Processed logits [vocab] from the last process() call.
  const float* processed() const { return proc_.data(); }
  // Greedy: argmax of the processed logits; otherwise softmax + multinomial.
  int32_t pick();
  // process + pick; returns -1 when every processed logit is -inf.
  int32_t sample(const float* logits, const int32_t* history, int64_t n_history);

  const SamplerParams& params() const { return p_; }
  Rng& rng() { return rng_; }

 private:
  void top_k();
  void top_p();

  int32_t vocab_;
  SamplerParams p_;
  Rng rng_;
  std::vector<float> proc_;      // processed logits
  std::vector<float> work_;      // top-k selection copy / top-p sorted probabilities
  std::vector<int32_t> order_;   // top-p sort order
  std::vector<int32_t> order2_;  // top-p radix sort ping-pong
  std::vector<uint32_t> keys_;   // [2 vocab] top-k select / top-p sort keys
  std::vector<double> prob_;     // sampling probabilities
  std::vector<uint32_t> seen_;   // repetition penalty: stamp per id
  uint32_t stamp_ = 0;
};

// Multilingual / original order (spec §6.7, t3.py T3.inference), HF processor semantics:
//   1. CFG           logits = cond + w (cond - uncond)             (uncond may be null: cond)
//   2. repetition    as above, history = BOS + the generated tokens (if r != 1)
//   3. temperature   logits / T                                    (if T != 1)
//   4. min-p         softmax; drop p < min_p * max p, keep the top (if min_p > 0)
//   5. top-p         as above                                      (if p < 1)
//   6. softmax, one multinomial draw (xoshiro256**); greedy: argmax after 1-5.
struct MtlSamplerParams {
  float cfg_weight = 0.5f, temperature = 0.8f, min_p = 0.05f;
  double top_p = 1.0;
  float repetition_penalty = 1.2f;
  bool greedy = false;
  uint64_t seed = 0;
};

class MtlSampler {
 public:
  MtlSampler(int32_t vocab, const MtlSamplerParams& p);
  // Steps 1-5; returns false when every processed logit is -inf.
  bool process(const float* cond, const float* uncond, const int32_t* history, int64_t n_history);
  const float* guided() const { return cfg_.data(); }      // after step 1
  const float* processed() const { return proc_.data(); }  // after step 5
  int32_t pick();                                          // greedy argmax or multinomial; -1 when all -inf
  const MtlSamplerParams& params() const { return p_; }

 private:
  void min_p();
  void top_p();

  int32_t vocab_;
  MtlSamplerParams p_;
  Rng rng_;
  std::vector<float> cfg_, proc_, work_;
  std::vector<int32_t> order_, order2_;
  std::vector<uint32_t> keys_;  // [2 vocab] top-p sort keys
  std::vector<double> prob_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
};

}  // namespace cbx
