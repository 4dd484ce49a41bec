#include "models/t3_cond_encoder.h"

#include <algorithm>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/t3_llama.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

namespace {
constexpr float kPerceiverLnEps = 1e-5f;  // nn.LayerNorm default
}  // namespace

void T3CondEncWeights::for_each_tensor(const T3Config& c, const Visitor& fn) {
  const int64_t d = c.n_embd;
  using K = T3WeightKind;
  fn("t3.cond_enc.spkr_enc.weight", spkr_enc_w, {d, c.speaker_embed_size}, K::Matrix, true);
  fn("t3.cond_enc.spkr_enc.bias", spkr_enc_b, {d}, K::Vector, true);
  fn("t3.cond_enc.emotion_adv_fc.weight", emotion_w, {d, 1}, K::Vector, c.emotion_adv);
  const bool p = c.perceiver;
  const std::string a = "t3.cond_enc.perceiver.attn.";
  fn("t3.cond_enc.perceiver.pre_attention_query", query, {1, c.perceiver_n_query, d}, K::Vector, p);
  fn(a + "norm.weight", norm_w, {d}, K::Vector, p);
  fn(a + "norm.bias", norm_b, {d}, K::Vector, p);
  fn(a + "to_q.weight", to_q_w, {d, d}, K::Matrix, p);
  fn(a + "to_q.bias", to_q_b, {d}, K::Vector, p);
  fn(a + "to_k.weight", to_k_w, {d, d}, K::Matrix, p);
  fn(a + "to_k.bias", to_k_b, {d}, K::Vector, p);
  fn(a + "to_v.weight", to_v_w, {d, d}, K::Matrix, p);
  fn(a + "to_v.bias", to_v_b, {d}, K::Vector, p);
  fn(a + "proj_out.weight", proj_w, {d, d}, K::Matrix, p);
  fn(a + "proj_out.bias", proj_b, {d}, K::Vector, p);
}

void bind_t3_cond_enc(const GgufFile& f, const T3Config& c, T3CondEncWeights& w) {
  CBX_CHECK(c.n_embd > 0 && c.speaker_embed_size > 0, "%s: bad T3 width %d / speaker size %d", f.path().c_str(),
            c.n_embd, c.speaker_embed_size);
  if (c.perceiver)
    CBX_CHECK(c.perceiver_n_query > 0 && c.perceiver_n_head > 0 && c.n_embd % c.perceiver_n_head == 0 &&
                  c.n_embd / c.perceiver_n_head <= 512,
              "%s: perceiver needs queries > 0 and a head count dividing the width %d (queries %d, "
              "heads %d)",
              f.path().c_str(), c.n_embd, c.perceiver_n_query, c.perceiver_n_head);
  w.for_each_tensor(c, [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, T3WeightKind kind,
                           bool required) {
    if (!required) {  // a disabled feature: its tensors are not read
      slot = Tensor{};
      return;
    }
    bind_t3_tensor(f, name, slot, shape, kind, true);
  });
}

T3CondEncoder::T3CondEncoder(const T3Config& c, const T3CondEncWeights& w, ThreadPool& pool, int64_t max_prompt)
    : c_(c), w_(w), pool_(pool), max_prompt_(max_prompt) {
  CBX_CHECK(max_prompt >= 0, "t3 cond encoder: max_prompt %lld", (long long)max_prompt);
  CBX_CHECK(!w.spkr_enc_w.empty(), "t3 cond encoder: weights are not bound");
  const int64_t d = c.n_embd, Q = c.perceiver ? c.perceiver_n_query : 0;
  const int nt = pool.size();
  // forward()'s allocations at max_prompt rows in its order: the speaker projection's scratch,
  // then with a perceiver its output rows and two blocks (each: six row buffers, the scratch
  // of its projections and attention, all rewound).
  ArenaPlan plan;
  plan.scratch(matmul_scratch_bytes(w.spkr_enc_w.dtype, 1, d, c.speaker_embed_size, nt));
  if (c.perceiver && max_prompt > 0) {
    plan.alloc(DType::F32, {Q, d});
    auto block = [&](int64_t n1, int64_t n2) {
      const size_t m = plan.mark();
      for (int64_t rows : {n1, n2, n1, n2, n2, n1}) plan.alloc(DType::F32, {rows, d});
      plan.scratch(matmul_scratch_bytes(w.to_q_w.dtype, n1, d, d, nt));
      plan.scratch(matmul_scratch_bytes(w.to_k_w.dtype, n2, d, d, nt));
      plan.scratch(matmul_scratch_bytes(w.to_v_w.dtype, n2, d, d, nt));
      plan.scratch(attention_scratch_bytes(c.perceiver_n_head, n2, d / c.perceiver_n_head));
      plan.scratch(matmul_scratch_bytes(w.proj_w.dtype, n1, d, d, nt));
      plan.rewind(m);
    };
    block(Q, max_prompt);
    block(Q, Q);
  }
  arena_.reserve(plan.bytes());
  mark_ = arena_.mark();
}

int64_t T3CondEncoder::n_tokens(int64_t n_prompt) const {
  int64_t n = 1;
  if (n_prompt > 0) n += c_.perceiver ? c_.perceiver_n_query : n_prompt;
  if (c_.emotion_adv) n += 1;
  return n;
}

void T3CondEncoder::block(const Tensor& x1, const Tensor& x2, Tensor& out) {
  const int64_t d = c_.n_embd, n1 = x1.shape[0], n2 = x2.shape[0];
  const int64_t Hp = c_.perceiver_n_head, Dp = d / Hp;
  const size_t m = arena_.mark();
  Tensor l1 = arena_.alloc(DType::F32, {n1, d}, "perceiver ln x1");
  Tensor l2 = arena_.alloc(DType::F32, {n2, d}, "perceiver ln x2");
  Tensor q = arena_.alloc(DType::F32, {n1, d}, "perceiver q");
  Tensor k = arena_.alloc(DType::F32, {n2, d}, "perceiver k");
  Tensor v = arena_.alloc(DType::F32, {n2, d}, "perceiver v");
  Tensor o = arena_.alloc(DType::F32, {n1, d}, "perceiver attention");
  layer_norm(pool_, x1, w_.norm_w, w_.norm_b, kPerceiverLnEps, l1);
  layer_norm(pool_, x2, w_.norm_w, w_.norm_b, kPerceiverLnEps, l2);
  matmul_bias(pool_, w_.to_q_w, w_.to_q_b, l1, q, &arena_);
  matmul_bias(pool_, w_.to_k_w, w_.to_k_b, l2, k, &arena_);
  matmul_bias(pool_, w_.to_v_w, w_.to_v_b, l2, v, &arena_);
  const int64_t s1[3] = {Hp, n1, Dp}, s2[3] = {Hp, n2, Dp}, st[3] = {Dp * 4, d * 4, 4};
  Tensor qh = make_view(q, 3, s1, st, 0), oh = make_view(o, 3, s1, st, 0);
  Tensor kh = make_view(k, 3, s2, st, 0), vh = make_view(v, 3, s2, st, 0);
  attention(pool_, qh, kh, vh, Tensor{}, oh, AttentionParams{}, &arena_);
  matmul_bias(pool_, w_.proj_w, w_.proj_b, o, out, &arena_);
  add(pool_, out, x1, out);
  arena_.rewind(m);
}

void T3CondEncoder::forward(const float* speaker, int64_t n_speaker, const Tensor& prompt_emb, float exaggeration,
                            Tensor& out) {
  const int64_t d = c_.n_embd;
  CBX_CHECK(speaker && n_speaker == c_.speaker_embed_size,
            "t3 cond encoder: speaker embedding has %lld values, expected %d", (long long)n_speaker,
            c_.speaker_embed_size);
  const int64_t P = prompt_emb.empty() ? 0 : prompt_emb.shape[0];
  if (P > 0)
    CBX_CHECK(prompt_emb.dtype == DType::F32 && prompt_emb.ndim == 2 && prompt_emb.shape[1] == d,
              "t3 cond encoder: prompt embeddings must be f32 [P, %lld], got %s", (long long)d,
              prompt_emb.shape_str().c_str());
  CBX_CHECK(P <= max_prompt_, "t3 cond encoder: %lld prompt rows exceed the reserved %lld", (long long)P,
            (long long)max_prompt_);
  const int64_t n = n_tokens(P);
  CBX_CHECK(out.dtype == DType::F32 && out.ndim == 2 && out.shape[0] == n && out.shape[1] == d,
            "t3 cond encoder: output must be f32 [%lld, %lld], got %s", (long long)n, (long long)d,
            out.shape_str().c_str());
  arena_.rewind(mark_);
  Tensor spk = make_tensor(DType::F32, {1, n_speaker}, const_cast<float*>(speaker), size_t(n_speaker) * 4);
  Tensor row0 = slice(out, 0, 0, 1);
  matmul_bias(pool_, w_.spkr_enc_w, w_.spkr_enc_b, spk, row0, &arena_);
  int64_t r = 1;
  if (P > 0) {
    if (c_.perceiver) {
      const int64_t Q = c_.perceiver_n_query;
      Tensor query = reshape(w_.query, {Q, d});
      Tensor pre = arena_.alloc(DType::F32, {Q, d}, "perceiver cross-attention out");
      block(query, prompt_emb, pre);
      Tensor rows = slice(out, 0, r, Q);
      block(pre, pre, rows);
      r += Q;
    } else {
      Tensor rows = slice(out, 0, r, P);
      copy_tensor(pool_, prompt_emb, rows);
      r += P;
    }
  }
  if (c_.emotion_adv) {  // Linear(1 -> d) on a scalar: the weight column times exaggeration
    float* dst = static_cast<float*>(out.row(r));
    const float* col = w_.emotion_w.ptr<float>();
    for (int64_t i = 0; i < d; ++i) dst[i] = col[i] * exaggeration;
    ++r;
  }
  CBX_ASSERT(r == n);
}

}  // namespace cbx
