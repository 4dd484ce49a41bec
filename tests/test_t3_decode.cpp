// T3 GPT-2 backbone: the fused one-row decode path (one pool run per step, row-split
// projections with fused norm/bias/GELU/residual, attention per thread's heads) against
// the op-by-op path on random weights, for every weight type and both KV types, with
// 1, 2 and 3 threads (3 does not divide the heads: uneven splits). The two paths run the
// same kernels in the same order per output, so the logits must agree to float rounding;
// the fused logits must not depend on the thread count at all, nor on whether Q4_0 / Q8_0
// layer matrices are re-laid out (T3Gpt2Options::pack_planar).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/matvec_q4p.h"
#include "models/t3_gpt2.h"
#include "weight_store_test_util.h"

using namespace cbx;

namespace {

struct Store : test::WeightStore {
  Store() : WeightStore(7) {}
};

T3Config tiny_config() {
  T3Config c;
  c.arch = "gpt2";
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.head_dim = 16;
  c.n_ff = 256;
  c.n_ctx = 64;
  c.text_vocab = 10;
  c.speech_vocab = 100;  // not a multiple of 16: a partial row chunk in the head
  c.speaker_embed_size = 8;
  return c;
}

void fill_weights(const T3Config& c, DType mt, Store& st, T3Gpt2Weights& w) {
  const int64_t d = c.n_embd, ff = c.n_ff;
  w.wpe = st.make(DType::F32, {c.n_ctx, d}, 0.5f);
  w.layers.resize(size_t(c.n_layer));
  for (T3Gpt2Layer& L : w.layers) {
    L.ln_1_w = st.make(DType::F32, {d}, 0.3f);
    L.ln_1_b = st.make(DType::F32, {d}, 0.1f);
    L.c_attn_w = st.make(mt, {3 * d, d}, 0.15f);
    L.c_attn_b = st.make(DType::F32, {3 * d}, 0.1f);
    L.c_proj_w = st.make(mt, {d, d}, 0.15f);
    L.c_proj_b = st.make(DType::F32, {d}, 0.1f);
    L.ln_2_w = st.make(DType::F32, {d}, 0.3f);
    L.ln_2_b = st.make(DType::F32, {d}, 0.1f);
    L.fc_w = st.make(mt, {ff, d}, 0.15f);
    L.fc_b = st.make(DType::F32, {ff}, 0.1f);
    L.proj_w = st.make(mt, {d, ff}, 0.08f);
    L.proj_b = st.make(DType::F32, {d}, 0.1f);
  }
  w.ln_f_w = st.make(DType::F32, {d}, 0.3f);
  w.ln_f_b = st.make(DType::F32, {d}, 0.1f);
  w.speech_head_w = st.make(mt, {c.speech_vocab, d}, 0.2f);
  w.speech_head_b = st.make(DType::F32, {c.speech_vocab}, 0.1f);
}

// Prefill of 9 rows, then `steps` one-row calls; returns the logits of every call.
std::vector<std::vector<float>> run(const T3Config& c, const T3Gpt2Weights& w, int threads, DType kv, bool fused,
                                    int steps, bool pack_planar = true, size_t* packed = nullptr) {
  ThreadPool pool(threads);
  T3Gpt2Options o;
  o.max_ctx = 32;
  o.max_batch = 9;
  o.kv_type = kv;
  o.pack_planar = pack_planar;
  o.kv_huge_pages = threads == 2;  // the KV cache's allocation must not matter either
  T3Gpt2 m(c, w, pool, o);
  if (packed) *packed = m.packed_weight_bytes();
  m.set_fused_decode(fused);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> e(size_t(9 * c.n_embd));
  for (float& v : e) v = nd(rng);
  std::vector<std::vector<float>> out;
  Tensor pre = make_tensor(DType::F32, {9, c.n_embd}, e.data(), e.size() * 4);
  const Tensor& l0 = m.forward(pre);
  out.emplace_back(l0.ptr<float>(), l0.ptr<float>() + c.speech_vocab);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x(size_t(c.n_embd));
    for (float& v : x) v = nd(rng);
    Tensor one = make_tensor(DType::F32, {1, c.n_embd}, x.data(), x.size() * 4);
    const Tensor& l = m.forward(one);
    out.emplace_back(l.ptr<float>(), l.ptr<float>() + c.speech_vocab);
  }
  return out;
}

}  // namespace

TEST(T3Decode, FusedMatchesOpByOp) {
  const T3Config c = tiny_config();
  for (DType mt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    Store st;
    T3Gpt2Weights w;
    fill_weights(c, mt, st, w);
    for (DType kv : {DType::F16, DType::F32}) {
      const auto ref = run(c, w, 2, kv, false, 12);
      std::vector<std::vector<float>> fused1;
      for (int threads : {1, 2, 3}) {
        const auto got = run(c, w, threads, kv, true, 12);
        ASSERT_EQ(got.size(), ref.size());
        double worst = 0, scale = 0;
        for (size_t s = 0; s < ref.size(); ++s)
          for (size_t i = 0; i < ref[s].size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[s][i]));
            worst = std::max(worst, double(std::fabs(got[s][i] - ref[s][i])));
            scale = std::max(scale, double(std::fabs(ref[s][i])));
          }
        // Same kernels and operation order per output: equal up to float rounding
        // (measured 0 on AVX-512; the bound leaves room for FMA contraction differences).
        EXPECT_LE(worst, 1e-5 * scale) << dtype_name(mt) << " kv " << dtype_name(kv) << " threads " << threads;
        EXPECT_GT(scale, 0.0);
        if (threads == 2 && (mt == DType::Q4_0 || mt == DType::Q8_0)) {
          size_t packed_on = 0, packed_off = 1;
          const auto plain = run(c, w, threads, kv, true, 12, false, &packed_off);
          run(c, w, threads, kv, true, 0, true, &packed_on);
          EXPECT_EQ(packed_off, 0u);
          EXPECT_EQ(packed_on > 0, planar_dot(mt, active_isa()) != nullptr);
          EXPECT_EQ(plain, got) << "planar re-layout changed the logits, " << dtype_name(mt) << " kv "
                                << dtype_name(kv);
        }
        if (threads == 1)
          fused1 = got;
        else
          EXPECT_EQ(got, fused1) << "fused logits depend on the thread count: " << dtype_name(mt) << " threads "
                                 << threads;
      }
    }
  }
}

// The voice prefix cache (T3Turbo::prefill) rests on save_kv_rows / load_kv_rows: rows
// [0, 5) forwarded, saved, then 4 more rows and 3 decode steps, against the same after a
// reset and a reuse of the untouched rows, and after a load of the saved rows (with a
// different prompt in between): the same logits, bit for bit, for every weight and cache
// type; kv_rows_unchanged() follows what the forwards wrote.
TEST(T3Decode, SavedKvRowsContinueExactly) {
  const T3Config c = tiny_config();
  for (DType mt : {DType::F32, DType::Q4_0}) {
    Store st;
    T3Gpt2Weights w;
    fill_weights(c, mt, st, w);
    for (DType kv : {DType::F16, DType::F32}) {
      ThreadPool pool(2);
      T3Gpt2Options o;
      o.max_ctx = 32;
      o.max_batch = 9;
      o.kv_type = kv;
      T3Gpt2 m(c, w, pool, o);
      std::mt19937 rng(5);
      std::normal_distribution<float> nd;
      std::vector<float> e(size_t(12 * c.n_embd)), other(size_t(9 * c.n_embd));
      for (float& v : e) v = nd(rng);
      for (float& v : other) v = nd(rng);
      auto rows = [&](std::vector<float>& src, int64_t r0, int64_t n) {
        return make_tensor(DType::F32, {n, c.n_embd}, src.data() + r0 * c.n_embd, size_t(n * c.n_embd) * 4);
      };
      auto rest = [&] {  // rows 5..8 as one call, then rows 9..11 one at a time
        std::vector<float> out;
        const Tensor& l = m.forward(rows(e, 5, 4));
        out.insert(out.end(), l.ptr<float>(), l.ptr<float>() + c.speech_vocab);
        for (int64_t r = 9; r < 12; ++r) {
          const Tensor& s = m.forward(rows(e, r, 1));
          out.insert(out.end(), s.ptr<float>(), s.ptr<float>() + c.speech_vocab);
        }
        return out;
      };
      m.forward(rows(e, 0, 5));
      std::vector<uint8_t> saved(m.kv_rows_bytes(5));
      EXPECT_EQ(saved.size(), size_t(c.n_layer) * 2 * size_t(c.n_head) * 5 * dtype_row_bytes(kv, c.head_dim));
      EXPECT_EQ(m.kv_rows_source(), nullptr);
      m.save_kv_rows(5, saved.data());
      EXPECT_EQ(m.kv_rows_unchanged(), 5);
      EXPECT_EQ(m.kv_rows_source(), saved.data());
      EXPECT_THROW(m.save_kv_rows(6, saved.data()), Error);
      const std::vector<float> first = rest();
      // Rows 5.. were written after the save, rows 0..4 not: they can be taken as they are.
      EXPECT_EQ(m.kv_rows_unchanged(), 5);
      m.reset();
      m.reuse_kv_rows(5);
      EXPECT_EQ(m.n_past(), 5);
      EXPECT_EQ(rest(), first) << dtype_name(mt) << " kv " << dtype_name(kv) << " (reused rows)";
      m.reset();
      m.forward(rows(other, 0, 9));  // overwrite the cache with another prompt
      EXPECT_EQ(m.kv_rows_unchanged(), 0);
      m.reset();
      EXPECT_THROW(m.reuse_kv_rows(5), Error);
      m.load_kv_rows(5, saved.data());
      EXPECT_EQ(m.n_past(), 5);
      EXPECT_EQ(m.kv_rows_unchanged(), 5);
      const std::vector<float> again = rest();
      EXPECT_EQ(first, again) << dtype_name(mt) << " kv " << dtype_name(kv);
      EXPECT_THROW(m.load_kv_rows(33, saved.data()), Error);
      std::vector<uint8_t> copy(saved);
      m.load_kv_rows(5, copy.data());
      EXPECT_EQ(m.kv_rows_source(), copy.data());
      // A forward that starts inside the kept rows lowers the count to where it wrote.
      m.reset();
      m.load_kv_rows(5, saved.data());
      m.reset();
      m.forward(rows(other, 0, 3));
      EXPECT_EQ(m.kv_rows_unchanged(), 0);
      m.load_kv_rows(5, saved.data());
      m.forward(rows(other, 0, 2));  // rows 5, 6
      EXPECT_EQ(m.kv_rows_unchanged(), 5);
    }
  }
}

// T3Gpt2Options::row_prefill_max: a forward of a few rows with Q8_0 / Q4_0 layer matrices
// runs its projections on the decode's row kernels, whose outputs per row equal a one-row
// call's. So a 9-row prefill must match the same 9 rows fed one at a time (op-by-op and
// fused decode), up to the attention kernels' float rounding (multi-query vs one-query
// order; the bound as in FusedMatchesOpByOp), and the decode steps after it too. With
// row_prefill_max = 0 the same prefill takes the GEMM (bf16 or f32 products of f32
// activations instead of 8-bit ones): close, not equal.
TEST(T3Decode, RowPrefillMatchesOneRowCalls) {
  const T3Config c = tiny_config();
  for (DType mt : {DType::Q8_0, DType::Q4_0}) {
    Store st;
    T3Gpt2Weights w;
    fill_weights(c, mt, st, w);
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::vector<float> e(size_t(12 * c.n_embd));
    for (float& v : e) v = nd(rng);
    auto rows = [&](int64_t r0, int64_t n) {
      return make_tensor(DType::F32, {n, c.n_embd}, e.data() + r0 * c.n_embd, size_t(n * c.n_embd) * 4);
    };
    for (DType kv : {DType::F16, DType::F32}) {
      // mode 0: 9-row call on the row kernels; 1: GEMM; 2: one row at a time (op-by-op);
      // 3: one row at a time (fused). Then 3 one-row steps. Logits after row 8 and each step.
      auto run_mode = [&](int mode) {
        ThreadPool pool(2);
        T3Gpt2Options o;
        o.max_ctx = 32;
        o.max_batch = 9;
        o.kv_type = kv;
        o.row_prefill_max = mode == 1 ? 0 : 64;
        T3Gpt2 m(c, w, pool, o);
        m.set_fused_decode(mode == 3);
        std::vector<float> out;
        const float* l = nullptr;
        if (mode <= 1) {
          l = m.forward(rows(0, 9)).ptr<float>();
        } else {
          for (int64_t r = 0; r < 9; ++r) l = m.forward(rows(r, 1)).ptr<float>();
        }
        out.insert(out.end(), l, l + c.speech_vocab);
        for (int64_t r = 9; r < 12; ++r) {
          const float* s = m.forward(rows(r, 1)).ptr<float>();
          out.insert(out.end(), s, s + c.speech_vocab);
        }
        return out;
      };
      const std::vector<float> by_rows = run_mode(0), gemm = run_mode(1);
      double scale = 0;
      for (float v : by_rows) {
        ASSERT_TRUE(std::isfinite(v));
        scale = std::max(scale, double(std::fabs(v)));
      }
      ASSERT_GT(scale, 0.0);
      for (int mode : {2, 3}) {
        const std::vector<float> one = run_mode(mode);
        double worst = 0;
        for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::fabs(one[i] - by_rows[i])));
        EXPECT_LE(worst, 1e-5 * scale) << dtype_name(mt) << " kv " << dtype_name(kv) << " mode " << mode;
      }
      double worst = 0;
      for (size_t i = 0; i < gemm.size(); ++i) worst = std::max(worst, double(std::fabs(gemm[i] - by_rows[i])));
      std::printf("%s kv %s: row-kernel vs GEMM prefill, max |diff| %.2e of max |logit| %.2e\n", dtype_name(mt),
                  dtype_name(kv), worst, scale);
      EXPECT_LE(worst, 5e-2 * scale) << dtype_name(mt) << " kv " << dtype_name(kv);
    }
  }
}

// The arena is sized by an ArenaPlan of forward()'s allocations: a prefill of max_batch
// rows that fills the cache to max_ctx (the largest activations, GEMM and attention
// scratch at once) stays inside it, and the plan leaves no more room than the ops' own
// scratch estimates keep: matmul_scratch_bytes answers for the widest ISA the CPU has,
// + 128 bytes (a generic-only CPU's one-row matvec takes a little less: 320 spare bytes on
// aarch64, hence 512), so under a forced narrower ISA only "fits, within half" is checked.
TEST(T3Decode, ArenaFitsMaxSizes) {
  const bool native = active_isa() == detected_isa();
  const T3Config c = tiny_config();
  for (DType mt : {DType::F32, DType::Q8_0}) {
    Store st;
    T3Gpt2Weights w;
    fill_weights(c, mt, st, w);
    for (int64_t row_max : {int64_t(-1), int64_t(0)})
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        T3Gpt2Options o;
        o.max_ctx = 32;
        o.max_batch = 16;
        o.row_prefill_max = row_max;
        T3Gpt2 m(c, w, pool, o);
        std::vector<float> e(size_t(16 * c.n_embd), 0.25f);
        Tensor rows = make_tensor(DType::F32, {16, c.n_embd}, e.data(), e.size() * 4);
        m.forward(rows);
        m.forward(rows);  // 16 + 16 = max_ctx keys
        m.reset();
        m.set_fused_decode(false);
        m.forward(slice(rows, 0, 0, 1));  // one row op by op
        const std::string what = std::string(dtype_name(mt)) + " row_prefill_max " + std::to_string(row_max) +
                                 " threads " + std::to_string(threads);
        EXPECT_LE(m.arena_high_water(), m.arena_bytes()) << what;
        EXPECT_LE(m.arena_bytes() - m.arena_high_water(), native ? size_t(512) : m.arena_bytes() / 2) << what;
      }
  }
}
