// T3 conditioning encoder of the Llama variants (t3/modules/cond_enc.py, perceiver.py; spec §6.4):
//   token 0       spkr_enc(speaker_emb)                     Linear(S -> d, bias)
//   tokens 1..Q   perceiver(prompt_emb)                     Q = 32 queries (absent when P == 0)
//   last token    emotion_adv_fc(exaggeration)              Linear(1 -> d, no bias) = exaggeration
//   * column
// prompt_emb = speech_emb(prompt) + speech_pos_emb[0..P-1] is formed by the caller.
// Perceiver: ONE AttentionBlock2 applied twice with the same weights,
//   pre = block(query, prompt_emb); out = block(pre, pre)
//   block(x1, x2) = x1 + proj_out(mha(to_q(LN x1), to_k(LN x2), to_v(LN x2)))
// with the same LayerNorm (eps 1e-5) on both inputs, n_head heads of d / n_head, no mask,
// scale 1/sqrt(d / n_head).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "models/t3_gpt2.h"  // T3WeightKind

namespace cbx {

class GgufFile;

struct T3CondEncWeights {
  Tensor spkr_enc_w, spkr_enc_b;  // [d, S], [d]
  Tensor emotion_w;               // [d, 1] (t3.emotion_adv)
  Tensor query;                   // [1, Q, d] pre_attention_query (t3.perceiver)
  Tensor norm_w, norm_b;          // [d]
  Tensor to_q_w, to_q_b, to_k_w, to_k_b, to_v_w, to_v_b, proj_w, proj_b;  // [d, d], [d]

  using Visitor = T3Gpt2Weights::Visitor;
  void for_each_tensor(const T3Config& c, const Visitor& fn);
};
void bind_t3_cond_enc(const GgufFile& f, const T3Config& c, T3CondEncWeights& w);

class T3CondEncoder {
 public:
  // max_prompt: most prompt rows forward takes. c, w referenced (must outlive this object).
  T3CondEncoder(const T3Config& c, const T3CondEncWeights& w, ThreadPool& pool, int64_t max_prompt);
  T3CondEncoder(const T3CondEncoder&) = delete;
  T3CondEncoder& operator=(const T3CondEncoder&) = delete;

  // Conditioning rows for a prompt of n_prompt tokens: 1 + (n_prompt > 0 ? Q : 0) + emotion_adv.
  int64_t n_tokens(int64_t n_prompt) const;
  // speaker: [S]; prompt_emb: F32 [P, d] (P may be 0: pass an empty Tensor); out: F32 [n_tokens(P),
  // d].
  void forward(const float* speaker, int64_t n_speaker, const Tensor& prompt_emb, float exaggeration, Tensor& out);
  // The arena: its capacity (planned for max_prompt rows) and its high-water mark.
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }

 private:
  // x1 [n1, d], x2 [n2, d] -> out [n1, d] (out may not alias x1 or x2).
  void block(const Tensor& x1, const Tensor& x2, Tensor& out);

  const T3Config& c_;
  const T3CondEncWeights& w_;
  ThreadPool& pool_;
  int64_t max_prompt_ = 0;
  Arena arena_;
  size_t mark_ = 0;
};

}  // namespace cbx
