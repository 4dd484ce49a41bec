// T3 Llama backbone (Multilingual): the fused decode path (one pool run per step, KV-head
// split q/k/v + RoPE + KV store + attention, row-split o_proj / gate+up / down_proj with the
// RMS norms, SwiGLU and residuals fused, both CFG rows per weight read) against the
// op-by-op path on random weights: every weight type, both KV types, 1 and 2 sequences,
// GQA and plain heads, 1, 2 and 3 threads (3 splits the KV heads unevenly). The two paths
// run the same kernels in the same order per output, so the logits must be bit-identical,
// and so must the fused logits with and without the planar re-layout of Q4_0 / Q8_0 matrices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/matvec_q4p.h"
#include "models/t3_llama.h"
#include "weight_store_test_util.h"

using namespace cbx;

namespace {

struct Store : test::WeightStore {
  Store() : WeightStore(11) {}
};

T3Config tiny_config(int n_kv_head) {
  T3Config c;
  c.arch = "llama";
  c.n_layer = 2;
  // d = 512 and n_ff = 544 give Q4_0 rows with a full 16-block group (and a tail block in
  // down_proj); n_head * head_dim = 64 != d (Llama allows it).
  c.n_embd = 512;
  c.n_head = 4;
  c.n_kv_head = n_kv_head;
  c.head_dim = 16;
  c.n_ff = 544;  // 34 chunks of 16 rows: uneven splits over 3 threads
  c.n_ctx = 64;
  c.norm_eps = 1e-5f;
  c.rope_theta = 500000.f;
  c.rope_factor = 8.f;
  c.rope_low_freq_factor = 1.f;
  c.rope_high_freq_factor = 4.f;
  c.rope_orig_max_pos = 16;  // small, so the llama3 bands all occur with head_dim 16
  c.text_vocab = 10;
  c.speech_vocab = 100;  // not a multiple of 16: a partial row chunk in the head
  c.speaker_embed_size = 8;
  return c;
}

void fill_weights(const T3Config& c, DType mt, Store& st, T3LlamaWeights& w) {
  const int64_t d = c.n_embd, ff = c.n_ff, q = int64_t(c.n_head) * c.head_dim, kv = int64_t(c.n_kv_head) * c.head_dim;
  w.layers.resize(size_t(c.n_layer));
  for (T3LlamaLayer& L : w.layers) {
    L.attn_norm = st.make(DType::F32, {d}, 0.2f, 1.f);
    L.wq = st.make(mt, {q, d}, 0.15f);
    L.wk = st.make(mt, {kv, d}, 0.15f);
    L.wv = st.make(mt, {kv, d}, 0.15f);
    L.wo = st.make(mt, {d, q}, 0.15f);
    L.ffn_norm = st.make(DType::F32, {d}, 0.2f, 1.f);
    L.w_gate = st.make(mt, {ff, d}, 0.15f);
    L.w_up = st.make(mt, {ff, d}, 0.15f);
    L.w_down = st.make(mt, {d, ff}, 0.1f);
  }
  w.norm = st.make(DType::F32, {d}, 0.2f, 1.f);
  w.speech_head_w = st.make(mt, {c.speech_vocab, d}, 0.2f);
}

struct RunOut {
  std::vector<std::vector<float>> logits;  // one entry per call: [B * speech_vocab]
  size_t packed = 0;
};

// As T3Mtl: a 5-token shared prefix (sequence 0, copied to the others), 4 tokens of each of the
// B sequences, then `steps` one-token calls with different embeddings per sequence.
RunOut run(const T3Config& c, const T3LlamaWeights& w, int threads, DType kv, int64_t B, bool fused, int steps,
           bool pack_planar = true) {
  ThreadPool pool(threads);
  T3LlamaOptions o;
  o.max_ctx = 32;
  o.max_tokens = 8;
  o.n_rows = 2;
  o.kv_type = kv;
  o.pack_planar = pack_planar;
  T3Llama m(c, w, pool, o);
  m.set_fused_decode(fused);
  RunOut out;
  out.packed = m.packed_weight_bytes();
  const int64_t d = c.n_embd, V = c.speech_vocab;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto rows = [&](int64_t n) {
    std::vector<float> e(size_t(n * d));
    for (float& v : e) v = nd(rng);
    return e;
  };
  auto keep = [&](const Tensor& lg) {
    out.logits.emplace_back(size_t(lg.shape[0] * V));
    for (int64_t b = 0; b < lg.shape[0]; ++b)
      std::copy(static_cast<const float*>(lg.row(b)), static_cast<const float*>(lg.row(b)) + V,
                out.logits.back().begin() + b * V);
  };
  std::vector<float> pre = rows(5);
  keep(m.forward(make_tensor(DType::F32, {5, d}, pre.data(), pre.size() * 4), 1));
  for (int64_t b = 1; b < B; ++b) m.copy_sequence(0, b);
  std::vector<float> tail = rows(4 * B);
  keep(m.forward(make_tensor(DType::F32, {4 * B, d}, tail.data(), tail.size() * 4), B));
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x = rows(B);
    keep(m.forward(make_tensor(DType::F32, {B, d}, x.data(), x.size() * 4), B));
  }
  EXPECT_EQ(m.n_past(), 9 + steps);
  return out;
}

}  // namespace

TEST(T3DecodeLlama, FusedMatchesOpByOpBitExact) {
  for (int n_kv : {2, 4}) {  // GQA (2 query heads per KV head) and plain
    const T3Config c = tiny_config(n_kv);
    for (DType mt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      Store st;
      T3LlamaWeights w;
      fill_weights(c, mt, st, w);
      for (DType kv : {DType::F16, DType::F32}) {
        for (int64_t B : {1, 2}) {
          const RunOut ref = run(c, w, 2, kv, B, false, 12);
          for (const auto& l : ref.logits)
            for (float v : l) ASSERT_TRUE(std::isfinite(v));
          double scale = 0;
          for (float v : ref.logits.back()) scale = std::max(scale, double(std::fabs(v)));
          EXPECT_GT(scale, 0.0);
          if (B == 2) {  // the two sequences got different inputs: their logits differ
            const std::vector<float>& last = ref.logits.back();
            EXPECT_FALSE(std::equal(last.begin(), last.begin() + c.speech_vocab, last.begin() + c.speech_vocab));
          }
          for (int threads : {1, 2, 3}) {
            const RunOut got = run(c, w, threads, kv, B, true, 12);
            EXPECT_EQ(got.logits, ref.logits) << dtype_name(mt) << " kv " << dtype_name(kv) << " B " << B
                                              << " n_kv_head " << n_kv << " threads " << threads;
          }
          if (mt == DType::Q4_0 || mt == DType::Q8_0) {
            const RunOut plain = run(c, w, 2, kv, B, true, 12, false);
            const RunOut packed = run(c, w, 2, kv, B, true, 0, true);
            EXPECT_EQ(plain.packed, 0u);
            EXPECT_EQ(packed.packed > 0, planar_dot(mt, active_isa()) != nullptr);
            EXPECT_EQ(plain.logits, ref.logits) << "planar re-layout changed the logits: " << dtype_name(mt);
          }
        }
      }
    }
  }
}

// gate_proj and up_proj of different types take differently converted activations: the
// fused decode keeps both (its row pieces run gate and up together) and still matches.
TEST(T3DecodeLlama, FusedMatchesOpByOpWithMixedGateUpTypes) {
  const T3Config c = tiny_config(2);
  const std::pair<DType, DType> kinds[] = {
      {DType::Q4_0, DType::Q8_0}, {DType::Q8_0, DType::Q4_0}, {DType::Q4_0, DType::F16}};
  for (auto [gate_t, up_t] : kinds) {
    Store st;
    T3LlamaWeights w;
    fill_weights(c, gate_t, st, w);
    for (T3LlamaLayer& L : w.layers) L.w_up = st.make(up_t, {c.n_ff, c.n_embd}, 0.15f);
    const RunOut ref = run(c, w, 2, DType::F16, 2, false, 12);
    for (int threads : {2, 3}) {
      const RunOut got = run(c, w, threads, DType::F16, 2, true, 12);
      EXPECT_EQ(got.logits, ref.logits) << dtype_name(gate_t) << " / " << dtype_name(up_t) << " threads " << threads;
    }
  }
}

// A capture forces the op-by-op path for one-token calls too (it reports every named
// intermediate of every layer).
TEST(T3DecodeLlama, CaptureTakesOpByOpPath) {
  const T3Config c = tiny_config(2);
  Store st;
  T3LlamaWeights w;
  fill_weights(c, DType::Q4_0, st, w);
  ThreadPool pool(2);
  T3LlamaOptions o;
  o.max_ctx = 16;
  o.max_tokens = 4;
  o.n_rows = 2;
  T3Llama m(c, w, pool, o);
  int layers_seen = 0;
  m.set_capture([&](const char* name, int, const Tensor&) {
    if (std::string(name) == "l_out") ++layers_seen;
  });
  std::vector<float> x(size_t(2 * c.n_embd), 0.25f);
  m.forward(make_tensor(DType::F32, {2, c.n_embd}, x.data(), x.size() * 4), 2);
  EXPECT_EQ(layers_seen, c.n_layer);
  m.forward(make_tensor(DType::F32, {2, c.n_embd}, x.data(), x.size() * 4), 2);
  EXPECT_EQ(layers_seen, 2 * c.n_layer);
}

// The arena is sized by an ArenaPlan of forward()'s allocations: a prefill of n_rows *
// max_tokens rows that fills the cache to max_ctx (the largest activations, GEMM and
// attention scratch) stays inside it, and the plan leaves no more room than the ops' own
// scratch estimates keep: matmul_scratch_bytes answers for the widest ISA the CPU has,
// + 128 bytes, so under a forced narrower ISA only "fits, within half" is checked.
TEST(T3DecodeLlama, ArenaFitsMaxSizes) {
  const bool native = active_isa() == detected_isa();
  for (int n_kv_head : {4, 2}) {
    const T3Config c = tiny_config(n_kv_head);
    for (DType mt : {DType::F32, DType::Q8_0}) {
      Store st;
      T3LlamaWeights w;
      fill_weights(c, mt, st, w);
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        T3LlamaOptions o;
        o.max_ctx = 16;
        o.max_tokens = 8;
        o.n_rows = 2;
        T3Llama m(c, w, pool, o);
        std::vector<float> e(size_t(16 * c.n_embd), 0.25f);
        Tensor rows = make_tensor(DType::F32, {16, c.n_embd}, e.data(), e.size() * 4);
        m.forward(rows, 2);
        m.forward(rows, 2);  // 8 + 8 = max_ctx keys
        const std::string what = std::string(dtype_name(mt)) + " kv heads " + std::to_string(n_kv_head) + " threads " +
                                 std::to_string(threads);
        EXPECT_LE(m.arena_high_water(), m.arena_bytes()) << what;
        EXPECT_LE(m.arena_bytes() - m.arena_high_water(), native ? size_t(512) : m.arena_bytes() / 2) << what;
      }
    }
  }
}
