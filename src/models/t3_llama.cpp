#include "models/t3_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/huge_buffer.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

void T3LlamaWeights::for_each_tensor(const T3Config& c, const Visitor& fn) {
  const int64_t d = c.n_embd, ff = c.n_ff, q = int64_t(c.n_head) * c.head_dim, kv = int64_t(c.n_kv_head) * c.head_dim;
  using K = T3WeightKind;
  layers.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "t3.tfmr.layers." + std::to_string(i);
    T3LlamaLayer& L = layers[size_t(i)];
    fn(p + ".self_attn.q_proj.weight", L.wq, {q, d}, K::Matrix, true);
    fn(p + ".self_attn.k_proj.weight", L.wk, {kv, d}, K::Matrix, true);
    fn(p + ".self_attn.v_proj.weight", L.wv, {kv, d}, K::Matrix, true);
    fn(p + ".self_attn.o_proj.weight", L.wo, {d, q}, K::Matrix, true);
    fn(p + ".mlp.gate_proj.weight", L.w_gate, {ff, d}, K::Matrix, true);
    fn(p + ".mlp.up_proj.weight", L.w_up, {ff, d}, K::Matrix, true);
    fn(p + ".mlp.down_proj.weight", L.w_down, {d, ff}, K::Matrix, true);
    fn(p + ".input_layernorm.weight", L.attn_norm, {d}, K::Vector, true);
    fn(p + ".post_attention_layernorm.weight", L.ffn_norm, {d}, K::Vector, true);
  }
  fn("t3.tfmr.norm.weight", norm, {d}, K::Vector, true);
  fn("t3.speech_head.weight", speech_head_w, {c.speech_vocab, d}, K::Matrix, true);
}

void bind_t3_llama(const GgufFile& f, const T3Config& c, T3LlamaWeights& w) {
  CBX_CHECK(c.arch == "llama", "%s: T3 arch is '%s', the Llama backbone needs 'llama'", f.path().c_str(),
            c.arch.c_str());
  CBX_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_kv_head > 0 && c.head_dim > 0 && c.head_dim % 2 == 0 &&
                c.n_head % c.n_kv_head == 0 && c.n_ff > 0 && c.speech_vocab > 0,
            "%s: inconsistent Llama T3 hyper-parameters (n_layer %d, n_embd %d, n_head %d, n_kv_head %d, "
            "head_dim %d, n_ff %d, speech_vocab %d)",
            f.path().c_str(), c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.n_ff, c.speech_vocab);
  CBX_CHECK(c.rope_theta > 0, "%s: Llama T3 needs chatterbox.t3.rope.theta > 0, got %g", f.path().c_str(),
            double(c.rope_theta));
  CBX_CHECK(!c.speech_head_bias, "%s: the Llama T3 speech head has no bias", f.path().c_str());
  w.for_each_tensor(c, [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, T3WeightKind kind,
                           bool required) { bind_t3_tensor(f, name, slot, shape, kind, required); });
}

size_t t3_llama_decode_weight_bytes(const T3LlamaWeights& w) {
  size_t total = 0;
  auto add = [&](const Tensor& t) {
    if (!t.empty()) total += dtype_row_bytes(t.dtype, t.cols()) * size_t(t.rows());
  };
  for (const T3LlamaLayer& L : w.layers)
    for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.attn_norm, &L.ffn_norm})
      add(*t);
  add(w.norm);
  add(w.speech_head_w);
  return total;
}

T3Llama::T3Llama(const T3Config& c, const T3LlamaWeights& w, ThreadPool& pool, const T3LlamaOptions& o)
    : c_(c), w_(w), pool_(pool), kv_type_(o.kv_type) {
  CBX_CHECK(kv_type_ == DType::F16 || kv_type_ == DType::F32, "t3 llama: KV cache type must be f16 or f32, got %s",
            dtype_name(kv_type_));
  CBX_CHECK(int(w.layers.size()) == c.n_layer && !w.norm.empty(), "t3 llama: weights are not bound");
  CBX_CHECK(o.max_ctx > 0 && o.n_rows > 0 && o.max_tokens >= 0,
            "t3 llama: bad options (max_ctx %lld, n_rows %lld, max_tokens %lld)", (long long)o.max_ctx,
            (long long)o.n_rows, (long long)o.max_tokens);
  CBX_CHECK(c.n_ctx <= 0 || o.max_ctx <= c.n_ctx, "t3 llama: max_ctx %lld exceeds max_position_embeddings %d",
            (long long)o.max_ctx, c.n_ctx);
  max_ctx_ = o.max_ctx;
  max_tokens_ = o.max_tokens > 0 ? std::min(o.max_tokens, max_ctx_) : max_ctx_;
  n_rows_ = o.n_rows;
  const int64_t d = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, ff = c.n_ff, V = c.speech_vocab;

  inv_freq_.resize(size_t(D / 2));
  rope_inv_freq_llama3(D, c.rope_theta, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                       float(c.rope_orig_max_pos), inv_freq_.data());
  inv_freq_t_ = make_tensor(DType::F32, {D / 2}, inv_freq_.data(), inv_freq_.size() * 4);

  const size_t es = type_traits(kv_type_).block_bytes;
  // Per layer one K and one V tensor [n_rows * Hkv, max_ctx, D]: sequence b owns heads
  // b*Hkv .. b*Hkv+Hkv-1, so a decode step attends for all sequences in one call.
  const size_t one = size_t(n_rows_ * Hkv * max_ctx_ * D) * es;
  kv_bytes_ = one * 2 * size_t(c.n_layer);
  auto caches = [&](auto& a) {
    k_cache_.clear();
    v_cache_.clear();
    for (int l = 0; l < c.n_layer; ++l) {
      k_cache_.push_back(a.alloc(kv_type_, {n_rows_ * Hkv, max_ctx_, D}, "t3 llama K cache"));
      v_cache_.push_back(a.alloc(kv_type_, {n_rows_ * Hkv, max_ctx_, D}, "t3 llama V cache"));
    }
  };
  ArenaPlan kv_plan;
  caches(kv_plan);
  kv_arena_.reserve(kv_plan.bytes(), /*huge_pages=*/false);
  caches(kv_arena_);

  const int nt = pool.size();

  // Fused decode: row projections (their planar copies in one huge-page buffer, in the order a
  // step reads them) and per-thread scratch.
  const RowLinearOptions ro{o.pack_planar};
  auto pack_size = [&](const Tensor& t) { return (RowLinear::pack_bytes(t, ro) + 63) / 64 * 64; };
  size_t packed_total = pack_size(w.speech_head_w);
  for (const T3LlamaLayer& L : w.layers)
    for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) packed_total += pack_size(*t);
  packed_buf_ = HugeBuffer(packed_total);
  size_t packed_at = 0;
  auto bind_rows = [&](const Tensor& t, const std::string& name) {
    uint8_t* at = packed_buf_.data() ? packed_buf_.data() + packed_at : nullptr;
    packed_at += pack_size(t);
    RowLinear r(t, Tensor{}, name.c_str(), ro, at);
    if (o.on_packed && r.packed_bytes() > 0) o.on_packed(r.packed_bytes());
    return r;
  };
  size_t act_row = 0;
  rows_.reserve(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const T3LlamaLayer& L = w.layers[size_t(l)];
    const std::string p = "t3 llama layer " + std::to_string(l);
    LayerRows r;
    r.q = bind_rows(L.wq, p + " q_proj");
    r.k = bind_rows(L.wk, p + " k_proj");
    r.v = bind_rows(L.wv, p + " v_proj");
    r.o = bind_rows(L.wo, p + " o_proj");
    r.gate = bind_rows(L.w_gate, p + " gate_proj");
    r.up = bind_rows(L.w_up, p + " up_proj");
    r.down = bind_rows(L.w_down, p + " down_proj");
    for (const RowLinear* x : {&r.q, &r.k, &r.v, &r.o, &r.gate, &r.up, &r.down})
      act_row = std::max(act_row, x->act_bytes());
    rows_.push_back(r);
  }
  head_ = bind_rows(w.speech_head_w, "t3 llama speech_head");
  for (int i = 0; i < 3 * c.n_layer + 1; ++i) splits_.emplace_back(nt);
  CBX_ASSERT(packed_at == packed_total);
  act_row = std::max(act_row, head_.act_bytes());
  act_stride_ = (act_row + 63) / 64 * 64;

  // The arena: the buffers keep() takes (run on the plan, then on the arena), then forward()'s
  // allocations for n_rows * max_tokens rows in its order, then the largest op scratch it takes
  // (the GEMMs at those rows, the head at n_rows, a prefill's attention over the whole cache).
  const int64_t R = n_rows_ * max_tokens_;
  auto keep = [&](auto& a) {
    logits_ = a.alloc(DType::F32, {n_rows_, V}, "t3 llama logits");
    thread_h_ = a.alloc(DType::F32, {nt * n_rows_, d}, "t3 llama decode norm rows").template ptr<float>();
    thread_tmp_ = a.alloc(DType::F32, {nt * n_rows_, d}, "t3 llama decode residual partials").template ptr<float>();
    // Two blocks per thread: gate and up may take differently converted activations, both
    // needed while the thread's row pieces run.
    thread_act_ = static_cast<uint8_t*>(
        a.alloc_bytes(size_t(2 * nt * n_rows_) * act_stride_ + 64, 64, "t3 llama decode activations"));
    rope_cs_ = a.alloc(DType::F32, {D}, "t3 llama decode rope angles").template ptr<float>();
  };
  ArenaPlan plan;
  keep(plan);
  plan.alloc(DType::I32, {R});
  for (int i = 0; i < 3; ++i) plan.alloc(DType::F32, {R, d});
  for (int i = 0; i < 2; ++i) plan.alloc(DType::F32, {R, H * D});
  for (int i = 0; i < 2; ++i) plan.alloc(DType::F32, {R, Hkv * D});
  for (int i = 0; i < 2; ++i) plan.alloc(DType::F32, {R, ff});
  plan.alloc(DType::F32, {n_rows_, d});
  for (const T3LlamaLayer& L : w.layers) {
    plan.scratch(matmul_scratch_bytes(L.wq.dtype, R, H * D, d, nt));
    plan.scratch(matmul_scratch_bytes(L.wk.dtype, R, Hkv * D, d, nt));
    plan.scratch(matmul_scratch_bytes(L.wv.dtype, R, Hkv * D, d, nt));
    plan.scratch(matmul_scratch_bytes(L.wo.dtype, R, d, H * D, nt));
    plan.scratch(matmul_scratch_bytes(L.w_gate.dtype, R, ff, d, nt));
    plan.scratch(matmul_scratch_bytes(L.w_up.dtype, R, ff, d, nt));
    plan.scratch(matmul_scratch_bytes(L.w_down.dtype, R, d, ff, nt));
  }
  plan.scratch(matmul_scratch_bytes(w.speech_head_w.dtype, n_rows_, V, d, nt));
  if (max_tokens_ > 1) plan.scratch(attention_scratch_bytes(Hkv, max_ctx_, D));  // one sequence at a time
  arena_.reserve(plan.bytes());
  keep(arena_);
  call_mark_ = arena_.mark();
}

size_t T3Llama::packed_weight_bytes() const {
  size_t n = head_.packed_bytes();
  for (const LayerRows& r : rows_)
    for (const RowLinear* x : {&r.q, &r.k, &r.v, &r.o, &r.gate, &r.up, &r.down}) n += x->packed_bytes();
  return n;
}

const RowLinear& T3Llama::layer_rows(int l, int k) const {
  const LayerRows& r = rows_[size_t(l)];
  const RowLinear* all[7] = {&r.q, &r.k, &r.v, &r.o, &r.gate, &r.up, &r.down};
  return *all[k];
}

size_t T3Llama::kv_step_bytes(int64_t B) const {
  const size_t es = type_traits(kv_type_).block_bytes;
  return size_t(2 * c_.n_layer) * size_t(B) * size_t(c_.n_kv_head) * size_t(n_past_) * size_t(c_.head_dim) * es;
}

void T3Llama::copy_sequence(int64_t src, int64_t dst) {
  CBX_CHECK(src >= 0 && src < n_rows_ && dst >= 0 && dst < n_rows_ && src != dst,
            "t3 llama: copy_sequence(%lld, %lld) with %lld sequences", (long long)src, (long long)dst,
            (long long)n_rows_);
  const int64_t Hkv = c_.n_kv_head;
  const size_t bytes = size_t(n_past_) * size_t(c_.head_dim) * type_traits(kv_type_).block_bytes;
  const int64_t items = int64_t(c_.n_layer) * 2 * Hkv;
  auto job = [&](int64_t item) {  // item = (layer * 2 + kv) * Hkv + h
    const int64_t h = item % Hkv, kv = (item / Hkv) % 2, l = item / (2 * Hkv);
    const Tensor& t = (kv ? v_cache_ : k_cache_)[size_t(l)];
    uint8_t* base = static_cast<uint8_t*>(t.data);
    std::memcpy(base + (dst * Hkv + h) * t.stride[0], base + (src * Hkv + h) * t.stride[0], bytes);
  };
  pool_.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(items, ith, nth, &b, &e);
    for (int64_t i = b; i < e; ++i) job(i);
  });
}

size_t T3Llama::prefix_bytes(int64_t rows) const {
  return size_t(2 * c_.n_layer) * size_t(c_.n_kv_head) * size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
}

void T3Llama::save_prefix(int64_t rows, void* dst) const {
  CBX_CHECK(rows >= 0 && rows <= n_past_, "t3 llama: save_prefix of %lld positions, %lld cached", (long long)rows,
            (long long)n_past_);
  const size_t bytes = size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int l = 0; l < c_.n_layer; ++l)
    for (const Tensor* t : {&k_cache_[size_t(l)], &v_cache_[size_t(l)]})
      for (int64_t h = 0; h < c_.n_kv_head; ++h, out += bytes)
        std::memcpy(out, static_cast<const uint8_t*>(t->data) + h * t->stride[0], bytes);
}

void T3Llama::load_prefix(int64_t rows, const void* src, int64_t n_seq) {
  CBX_CHECK(rows >= 0 && rows <= max_tokens_ && n_seq >= 1 && n_seq <= n_rows_,
            "t3 llama: load_prefix of %lld positions into %lld sequences (at most %lld positions, %lld sequences)",
            (long long)rows, (long long)n_seq, (long long)max_tokens_, (long long)n_rows_);
  back_kv(rows);
  const int64_t Hkv = c_.n_kv_head;
  const size_t bytes = size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  for (int l = 0; l < c_.n_layer; ++l)
    for (const Tensor* t : {&k_cache_[size_t(l)], &v_cache_[size_t(l)]})
      for (int64_t h = 0; h < Hkv; ++h, in += bytes)
        for (int64_t b = 0; b < n_seq; ++b)
          std::memcpy(static_cast<uint8_t*>(t->data) + (b * Hkv + h) * t->stride[0], in, bytes);
  n_past_ = rows;
}

void T3Llama::back_kv(int64_t upto) {
  if (upto <= kv_backed_ || !kv_populate_) return;
  const int64_t end = std::min(max_ctx_, upto + kKvBackAhead);
  for (int l = 0; l < c_.n_layer; ++l)
    for (const Tensor* t : {&k_cache_[size_t(l)], &v_cache_[size_t(l)]})
      for (int64_t h = 0; h < t->shape[0]; ++h) {
        uint8_t* slab = static_cast<uint8_t*>(t->data) + h * t->stride[0];
        if (!populate_pages(slab + kv_backed_ * t->stride[1], size_t((end - kv_backed_) * t->stride[1]))) {
          kv_populate_ = false;
          return;
        }
      }
  kv_backed_ = end;
}

// k, v: [B*T, Hkv*D] (RoPE applied to k) -> cache rows n_past .. n_past+T-1 of each sequence.
void T3Llama::store_kv(int layer, const Tensor& k, const Tensor& v, int64_t B, int64_t T) {
  const int64_t Hkv = c_.n_kv_head, D = c_.head_dim;
  auto job = [&](int64_t item) {  // item = ((b * T + t) * 2 + kv) * Hkv + h
    const int64_t h = item % Hkv, kv = (item / Hkv) % 2, r = item / (2 * Hkv), b = r / T, t = r % T;
    const float* src = static_cast<const float*>((kv ? v : k).row(r)) + h * D;
    const Tensor& dst_t = (kv ? v_cache_ : k_cache_)[size_t(layer)];
    uint8_t* dst =
        static_cast<uint8_t*>(dst_t.data) + (b * Hkv + h) * dst_t.stride[0] + (n_past_ + t) * dst_t.stride[1];
    row_store(src, dst, kv_type_, D);
  };
  const int64_t items = B * T * 2 * Hkv;
  if (B * T < 4 || pool_.size() <= 1) {
    for (int64_t i = 0; i < items; ++i) job(i);
    return;
  }
  pool_.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(items, ith, nth, &b, &e);
    for (int64_t i = b; i < e; ++i) job(i);
  });
}

void T3Llama::decode_fused(int64_t B, Tensor& x, Tensor& q, Tensor& k, Tensor& v, Tensor& att, Tensor& g, Tensor& u) {
  const int64_t d = c_.n_embd, H = c_.n_head, Hkv = c_.n_kv_head, D = c_.head_dim, ff = c_.n_ff, V = c_.speech_vocab;
  const int64_t group = H / Hkv, half = D / 2, pos = n_past_, Tk = n_past_ + 1;
  const float eps = c_.norm_eps;
  // The step's RoPE angles, formed as ops/norm rope does (f32 position x f32 inv_freq).
  float* cs = rope_cs_;
  float* sn = rope_cs_ + half;
  const float p = float(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float a = p * inv_freq_[size_t(i)];
    cs[i] = std::cos(a);
    sn[i] = std::sin(a);
  }
  float* xr = x.ptr<float>();
  float* qr = q.ptr<float>();
  float* kr = k.ptr<float>();
  float* vr = v.ptr<float>();
  float* ar = att.ptr<float>();
  float* gr = g.ptr<float>();
  float* ur = u.ptr<float>();
  float* lr = logits_.ptr<float>();
  // Sequence b's query head h is head b*H + h of [B*H, 1, D] views of q and att; it reads
  // cache head (b*H + h) / group = b*Hkv + h / group (as the op-by-op decode call).
  const int64_t hs[3] = {B * H, 1, D}, st[3] = {D * 4, H * D * 4, 4}, kv_shape[3] = {B * Hkv, Tk, D};
  const Tensor qv = make_view(q, 3, hs, st, 0);
  Tensor ov = make_view(att, 3, hs, st, 0);
  AttentionParams ap;
  ap.causal = true;
  ap.q_offset = pos;
  // Nothing may throw inside the run: validate the views and the attention call here, on an
  // empty head range (every layer's cache has the same shape and strides).
  {
    const Tensor kb = make_view(k_cache_[0], 3, kv_shape, k_cache_[0].stride, 0);
    const Tensor vb = make_view(v_cache_[0], 3, kv_shape, v_cache_[0].stride, 0);
    attention_part(0, 1, qv, kb, vb, Tensor{}, ov, ap, 0, 0);
  }
  auto store = [&](const float* src, const Tensor& dst_t, int64_t head) {
    row_store(src, static_cast<uint8_t*>(dst_t.data) + head * dst_t.stride[0] + pos * dst_t.stride[1], kv_type_, D);
  };

  const int nt = pool_.size();
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerRows& R = rows_[size_t(l)];
    splits_[size_t(3 * l)].reset(R.o.rows(), nt, 16);
    splits_[size_t(3 * l + 1)].reset(R.gate.rows(), nt, 16);
    splits_[size_t(3 * l + 2)].reset(R.down.rows(), nt, 16);
  }
  splits_[size_t(3 * c_.n_layer)].reset(head_.rows(), nt, 16);

  pool_.run([&](int ith, int nth) {
    float* h = thread_h_ + size_t(ith) * size_t(n_rows_ * d);
    float* tmp = thread_tmp_ + size_t(ith) * size_t(n_rows_ * d);
    uint8_t* abuf = thread_act_ + size_t(ith) * size_t(n_rows_) * act_stride_;
    // Row pieces as in T3Gpt2::decode_fused: 64 rows from the own block's front, ~1/64 of the
    // rows (whole 16-row groups) stolen from another block's back.
    auto claim_rows = [&](int phase, const RowLinear& r, auto&& fn) {
      splits_[size_t(phase)].run(ith, 64, std::max<int64_t>(16, (r.rows() + 1023) / 1024 * 16), fn);
    };
    int64_t g0, g1;
    ThreadPool::split(Hkv, ith, nth, &g0, &g1);
    size_t as = 0;
    const void* a = nullptr;
    for (int l = 0; l < c_.n_layer; ++l) {
      const T3LlamaLayer& L = w_.layers[size_t(l)];
      const LayerRows& R = rows_[size_t(l)];
      const Tensor& kc = k_cache_[size_t(l)];
      const Tensor& vc = v_cache_[size_t(l)];
      // input_layernorm, then q/k/v of this thread's KV heads (and their query heads).
      for (int64_t b = 0; b < B; ++b) row_rms_norm(xr + b * d, h + b * d, d, L.attn_norm, eps);
      a = R.q.act_rows(h, d, B, abuf, &as);
      R.q.run_rows(g0 * group * D, g1 * group * D, a, as, B, qr, H * D, RowEpilogue::Store);
      if (!R.k.same_act(R.q)) a = R.k.act_rows(h, d, B, abuf, &as);
      R.k.run_rows(g0 * D, g1 * D, a, as, B, kr, Hkv * D, RowEpilogue::Store);
      if (!R.v.same_act(R.k)) a = R.v.act_rows(h, d, B, abuf, &as);
      R.v.run_rows(g0 * D, g1 * D, a, as, B, vr, Hkv * D, RowEpilogue::Store);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t hh = g0 * group; hh < g1 * group; ++hh) row_rope(qr + b * H * D + hh * D, half, cs, sn);
        for (int64_t hk = g0; hk < g1; ++hk) {
          float* kh = kr + b * Hkv * D + hk * D;
          row_rope(kh, half, cs, sn);
          store(kh, kc, b * Hkv + hk);
          store(vr + b * Hkv * D + hk * D, vc, b * Hkv + hk);
        }
      }
      if (g1 > g0) {
        const Tensor kb = make_view(kc, 3, kv_shape, kc.stride, 0);
        const Tensor vb = make_view(vc, 3, kv_shape, vc.stride, 0);
        for (int64_t b = 0; b < B; ++b)
          attention_part(0, 1, qv, kb, vb, Tensor{}, ov, ap, b * H + g0 * group, b * H + g1 * group);
      }
      pool_.barrier();
      // x += o_proj(att)
      a = R.o.act_rows(ar, H * D, B, abuf, &as);
      claim_rows(3 * l, R.o,
                 [&](int64_t m0, int64_t m1) { R.o.run_rows(m0, m1, a, as, B, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
      // g = silu(gate_proj(h)) * up_proj(h), h = post_attention_layernorm(x)
      for (int64_t b = 0; b < B; ++b) row_rms_norm(xr + b * d, h + b * d, d, L.ffn_norm, eps);
      const void* ag = R.gate.act_rows(h, d, B, abuf, &as);
      const size_t ags = as;
      const void* au = ag;
      size_t aus = ags;
      if (!R.up.same_act(R.gate))
        au = R.up.act_rows(h, d, B, thread_act_ + size_t(nth + ith) * size_t(n_rows_) * act_stride_, &aus);
      claim_rows(3 * l + 1, R.gate, [&](int64_t m0, int64_t m1) {
        R.gate.run_rows(m0, m1, ag, ags, B, gr, ff, RowEpilogue::Store);
        R.up.run_rows(m0, m1, au, aus, B, ur, ff, RowEpilogue::Store);
        for (int64_t b = 0; b < B; ++b) row_silu_mul(gr + b * ff + m0, ur + b * ff + m0, m1 - m0);
      });
      pool_.barrier();
      // x += down_proj(g)
      a = R.down.act_rows(gr, ff, B, abuf, &as);
      claim_rows(3 * l + 2, R.down,
                 [&](int64_t m0, int64_t m1) { R.down.run_rows(m0, m1, a, as, B, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
    }
    for (int64_t b = 0; b < B; ++b) row_rms_norm(xr + b * d, h + b * d, d, w_.norm, eps);
    a = head_.act_rows(h, d, B, abuf, &as);
    claim_rows(3 * c_.n_layer, head_,
               [&](int64_t m0, int64_t m1) { head_.run_rows(m0, m1, a, as, B, lr, V, RowEpilogue::Store); });
  });
}

Tensor T3Llama::forward(const Tensor& embeds, int64_t B) {
  const int64_t d = c_.n_embd, H = c_.n_head, Hkv = c_.n_kv_head, D = c_.head_dim, ff = c_.n_ff;
  CBX_CHECK(B >= 1 && B <= n_rows_, "t3 llama forward: %lld sequences (1..%lld)", (long long)B, (long long)n_rows_);
  CBX_CHECK(embeds.dtype == DType::F32 && embeds.ndim == 2 && embeds.shape[1] == d && embeds.shape[0] > 0 &&
                embeds.shape[0] % B == 0,
            "t3 llama forward: embeds must be f32 [B*T, %lld] with B = %lld, got %s %s", (long long)d, (long long)B,
            dtype_name(embeds.dtype), embeds.shape_str().c_str());
  const int64_t R = embeds.shape[0], T = R / B;
  CBX_CHECK(T <= max_tokens_, "t3 llama forward: %lld tokens exceed the reserved %lld per call", (long long)T,
            (long long)max_tokens_);
  CBX_CHECK(n_past_ + T <= max_ctx_, "t3 llama forward: %lld cached + %lld new positions exceed the KV cache of %lld",
            (long long)n_past_, (long long)T, (long long)max_ctx_);
  back_kv(n_past_ + T);
  arena_.rewind(call_mark_);
  Arena* scratch = &arena_;

  Tensor pos = arena_.alloc(DType::I32, {R}, "t3 llama positions");
  for (int64_t r = 0; r < R; ++r) pos.ptr<int32_t>()[r] = int32_t(n_past_ + r % T);
  Tensor x = arena_.alloc(DType::F32, {R, d}, "t3 llama x");
  Tensor h = arena_.alloc(DType::F32, {R, d}, "t3 llama norm");
  Tensor tmp = arena_.alloc(DType::F32, {R, d}, "t3 llama projection");
  Tensor q = arena_.alloc(DType::F32, {R, H * D}, "t3 llama q");
  Tensor att = arena_.alloc(DType::F32, {R, H * D}, "t3 llama attention");
  Tensor k = arena_.alloc(DType::F32, {R, Hkv * D}, "t3 llama k");
  Tensor v = arena_.alloc(DType::F32, {R, Hkv * D}, "t3 llama v");
  Tensor g = arena_.alloc(DType::F32, {R, ff}, "t3 llama gate");
  Tensor u = arena_.alloc(DType::F32, {R, ff}, "t3 llama up");
  Tensor hn = arena_.alloc(DType::F32, {B, d}, "t3 llama final norm");

  copy_tensor(pool_, embeds, x);
  if (T == 1 && fused_ && !capture_) {
    decode_fused(B, x, q, k, v, att, g, u);
    n_past_ += 1;
    return slice(logits_, 0, 0, B);
  }
  emit("inp", -1, x);
  // RoPE views [R, heads, D] of q and k (rows contiguous).
  const int64_t q3[3] = {R, H, D}, k3[3] = {R, Hkv, D};
  const int64_t q3s[3] = {H * D * 4, D * 4, 4}, k3s[3] = {Hkv * D * 4, D * 4, 4};
  Tensor qr = make_view(q, 3, q3, q3s, 0);
  Tensor kr = make_view(k, 3, k3, k3s, 0);
  const int64_t Tk = n_past_ + T;
  AttentionParams ap;
  ap.causal = true;
  ap.q_offset = n_past_;

  for (int l = 0; l < c_.n_layer; ++l) {
    const T3LlamaLayer& L = w_.layers[size_t(l)];
    rms_norm(pool_, x, L.attn_norm, c_.norm_eps, h);
    emit("attn_norm", l, h);
    matmul(pool_, L.wq, h, q, scratch);
    matmul(pool_, L.wk, h, k, scratch);
    matmul(pool_, L.wv, h, v, scratch);
    rope_inv_freq(pool_, qr, pos, inv_freq_t_, qr);
    rope_inv_freq(pool_, kr, pos, inv_freq_t_, kr);
    emit("q", l, q);
    store_kv(l, k, v, B, T);
    const Tensor& kc = k_cache_[size_t(l)];
    const Tensor& vc = v_cache_[size_t(l)];
    if (T == 1) {
      // Decode: the B sequences are B*H query heads over B*Hkv cache heads (GQA maps query
      // head b*H + h to cache head b*Hkv + h / (H / Hkv)): one call.
      const int64_t hs[3] = {B * H, 1, D}, st[3] = {D * 4, H * D * 4, 4}, kv_shape[3] = {B * Hkv, Tk, D};
      Tensor qb = make_view(q, 3, hs, st, 0), ob = make_view(att, 3, hs, st, 0);
      Tensor kb = make_view(kc, 3, kv_shape, kc.stride, 0), vb = make_view(vc, 3, kv_shape, vc.stride, 0);
      attention(pool_, qb, kb, vb, Tensor{}, ob, ap, scratch);
    } else {
      for (int64_t b = 0; b < B; ++b) {
        // Sequence b's queries / outputs as [H, T, D] views of rows b*T .. b*T+T-1.
        const int64_t hs[3] = {H, T, D}, st[3] = {D * 4, H * D * 4, 4}, kv_shape[3] = {Hkv, Tk, D};
        Tensor qb = make_view(q, 3, hs, st, b * T * H * D * 4);
        Tensor ob = make_view(att, 3, hs, st, b * T * H * D * 4);
        Tensor kb = make_view(kc, 3, kv_shape, kc.stride, b * Hkv * kc.stride[0]);
        Tensor vb = make_view(vc, 3, kv_shape, vc.stride, b * Hkv * vc.stride[0]);
        attention(pool_, qb, kb, vb, Tensor{}, ob, ap, scratch);
      }
    }
    emit("attn", l, att);
    matmul(pool_, L.wo, att, tmp, scratch);
    add(pool_, x, tmp, x);
    emit("attn_out", l, x);
    rms_norm(pool_, x, L.ffn_norm, c_.norm_eps, h);
    emit("ffn_norm", l, h);
    matmul(pool_, L.w_gate, h, g, scratch);
    matmul(pool_, L.w_up, h, u, scratch);
    silu(pool_, g, g);
    mul(pool_, g, u, g);
    emit("ffn_act", l, g);
    matmul(pool_, L.w_down, g, tmp, scratch);
    add(pool_, x, tmp, x);
    emit("l_out", l, x);
  }
  n_past_ += T;

  // The last token of each sequence: rows T-1, 2T-1, ...
  const int64_t ls[2] = {B, d}, lst[2] = {T * d * 4, 4};
  Tensor last = make_view(x, 2, ls, lst, (T - 1) * d * 4);
  rms_norm(pool_, last, w_.norm, c_.norm_eps, hn);
  emit("norm", -1, hn);
  Tensor lg = slice(logits_, 0, 0, B);
  matmul(pool_, w_.speech_head_w, hn, lg, scratch);
  emit("logits", -1, lg);
  return lg;
}

}  // namespace cbx
