#include "models/t3_gpt2.h"

#include <algorithm>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

void T3Gpt2Weights::for_each_tensor(const T3Config& c, const Visitor& fn) {
  const int64_t d = c.n_embd, ff = c.n_ff;
  using K = T3WeightKind;
  fn("t3.tfmr.wpe.weight", wpe, {c.n_ctx, d}, K::Matrix, true);
  layers.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "t3.tfmr.h." + std::to_string(i);
    T3Gpt2Layer& L = layers[size_t(i)];
    fn(p + ".ln_1.weight", L.ln_1_w, {d}, K::Vector, true);
    fn(p + ".ln_1.bias", L.ln_1_b, {d}, K::Vector, true);
    fn(p + ".attn.c_attn.weight", L.c_attn_w, {3 * d, d}, K::Matrix, true);
    fn(p + ".attn.c_attn.bias", L.c_attn_b, {3 * d}, K::Vector, true);
    fn(p + ".attn.c_proj.weight", L.c_proj_w, {d, d}, K::Matrix, true);
    fn(p + ".attn.c_proj.bias", L.c_proj_b, {d}, K::Vector, true);
    fn(p + ".ln_2.weight", L.ln_2_w, {d}, K::Vector, true);
    fn(p + ".ln_2.bias", L.ln_2_b, {d}, K::Vector, true);
    fn(p + ".mlp.c_fc.weight", L.fc_w, {ff, d}, K::Matrix, true);
    fn(p + ".mlp.c_fc.bias", L.fc_b, {ff}, K::Vector, true);
    fn(p + ".mlp.c_proj.weight", L.proj_w, {d, ff}, K::Matrix, true);
    fn(p + ".mlp.c_proj.bias", L.proj_b, {d}, K::Vector, true);
  }
  fn("t3.tfmr.ln_f.weight", ln_f_w, {d}, K::Vector, true);
  fn("t3.tfmr.ln_f.bias", ln_f_b, {d}, K::Vector, true);
  fn("t3.text_emb.weight", text_emb, {c.text_vocab, d}, K::Matrix, true);
  fn("t3.speech_emb.weight", speech_emb, {c.speech_vocab, d}, K::Matrix, true);
  fn("t3.speech_head.weight", speech_head_w, {c.speech_vocab, d}, K::Matrix, true);
  fn("t3.speech_head.bias", speech_head_b, {c.speech_vocab}, K::Vector, c.speech_head_bias);
  fn("t3.cond_enc.spkr_enc.weight", spkr_enc_w, {d, c.speaker_embed_size}, K::Matrix, true);
  fn("t3.cond_enc.spkr_enc.bias", spkr_enc_b, {d}, K::Vector, true);
}

void bind_t3_tensor(const GgufFile& f, const std::string& name, Tensor& slot, const std::vector<int64_t>& shape,
                    T3WeightKind kind, bool required) {
  const GgufTensorInfo* ti = f.find_tensor(name);
  if (!ti) {
    CBX_CHECK(!required, "%s: missing tensor '%s'", f.path().c_str(), name.c_str());
    slot = Tensor{};
    return;
  }
  bool ok = ti->ndim == int(shape.size());
  for (int i = 0; ok && i < ti->ndim; ++i) ok = ti->shape[i] == shape[size_t(i)];
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    want += "]";
    Tensor got = f.tensor(*ti);
    fail("%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(), got.shape_str().c_str(),
         want.c_str());
  }
  const TypeTraits& tr = type_traits(ti->dtype);
  if (kind == T3WeightKind::Vector)
    CBX_CHECK(ti->dtype == DType::F32, "%s: tensor '%s' must be f32, got %s", f.path().c_str(), name.c_str(), tr.name);
  else
    CBX_CHECK(tr.is_float && tr.to_float, "%s: tensor '%s' has dtype %s, not a weight type", f.path().c_str(),
              name.c_str(), tr.name);
  slot = f.tensor(*ti);
}

void bind_t3_gpt2(const GgufFile& f, const T3Config& c, T3Gpt2Weights& w) {
  CBX_CHECK(c.arch == "gpt2", "%s: T3 arch is '%s', the GPT-2 backbone needs 'gpt2'", f.path().c_str(), c.arch.c_str());
  CBX_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.head_dim > 0 &&
                int64_t(c.n_head) * c.head_dim == c.n_embd && c.n_ff > 0 && c.n_ctx > 0,
            "%s: inconsistent T3 hyper-parameters (n_layer %d, n_embd %d, n_head %d, head_dim %d, "
            "n_ff %d, n_ctx %d)",
            f.path().c_str(), c.n_layer, c.n_embd, c.n_head, c.head_dim, c.n_ff, c.n_ctx);
  CBX_CHECK(c.n_kv_head == c.n_head, "%s: GPT-2 T3 needs n_kv_head == n_head (%d vs %d)", f.path().c_str(), c.n_kv_head,
            c.n_head);
  w.for_each_tensor(c, [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, T3WeightKind kind,
                           bool required) { bind_t3_tensor(f, name, slot, shape, kind, required); });
}

size_t t3_gpt2_decode_weight_bytes(const T3Config& c, const T3Gpt2Weights& w) {
  size_t total = 0;
  auto add = [&](const Tensor& t) {
    if (!t.empty()) total += dtype_row_bytes(t.dtype, t.cols()) * size_t(t.rows());
  };
  for (const T3Gpt2Layer& L : w.layers)
    for (const Tensor* t : {&L.ln_1_w, &L.ln_1_b, &L.c_attn_w, &L.c_attn_b, &L.c_proj_w, &L.c_proj_b, &L.ln_2_w,
                            &L.ln_2_b, &L.fc_w, &L.fc_b, &L.proj_w, &L.proj_b})
      add(*t);
  for (const Tensor* t : {&w.ln_f_w, &w.ln_f_b, &w.speech_head_w, &w.speech_head_b}) add(*t);
  return total;
}

T3Gpt2::T3Gpt2(const T3Config& c, const T3Gpt2Weights& w, ThreadPool& pool, const T3Gpt2Options& o)
    : c_(c), w_(w), pool_(pool), kv_type_(o.kv_type) {
  CBX_CHECK(kv_type_ == DType::F16 || kv_type_ == DType::F32, "t3: KV cache type must be f16 or f32, got %s",
            dtype_name(kv_type_));
  CBX_CHECK(int(w.layers.size()) == c.n_layer && !w.wpe.empty(), "t3: weights are not bound");
  max_ctx_ = o.max_ctx > 0 ? o.max_ctx : c.n_ctx;
  CBX_CHECK(max_ctx_ <= c.n_ctx, "t3: max_ctx %lld exceeds the %d learned positions", (long long)max_ctx_, c.n_ctx);
  max_batch_ = o.max_batch > 0 ? std::min(o.max_batch, max_ctx_) : max_ctx_;
  const int64_t d = c.n_embd, H = c.n_head, D = c.head_dim, ff = c.n_ff, V = c.speech_vocab;

  // KV cache.
  const size_t es = type_traits(kv_type_).block_bytes;
  const size_t one = size_t(H * max_ctx_ * D) * es;
  kv_bytes_ = one * 2 * size_t(c.n_layer);
  kv_buf_ = HugeBuffer(kv_bytes_, o.kv_huge_pages);
  for (int l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(make_tensor(kv_type_, {H, max_ctx_, D}, kv_buf_.data() + size_t(2 * l) * one, one));
    v_cache_.push_back(make_tensor(kv_type_, {H, max_ctx_, D}, kv_buf_.data() + size_t(2 * l + 1) * one, one));
  }

  const int nt = pool.size();

  // Fused decode: row projections (their planar copies, if any, in one huge-page buffer in the
  // order a step reads them: streamed every step, 4 KB pages cost TLB misses and prefetcher
  // restarts) and per-thread scratch.
  const RowLinearOptions ro{o.pack_planar};
  auto pack_size = [&](const Tensor& t) { return (RowLinear::pack_bytes(t, ro) + 63) / 64 * 64; };
  size_t packed_total = pack_size(w.speech_head_w);
  for (const T3Gpt2Layer& L : w.layers)
    for (const Tensor* t : {&L.c_attn_w, &L.c_proj_w, &L.fc_w, &L.proj_w}) packed_total += pack_size(*t);
  packed_buf_ = HugeBuffer(packed_total);
  size_t packed_at = 0;
  auto bind_rows = [&](const Tensor& t, const Tensor& b, const std::string& name) {
    uint8_t* at = packed_buf_.data() ? packed_buf_.data() + packed_at : nullptr;
    packed_at += pack_size(t);
    RowLinear r(t, b, name.c_str(), ro, at);
    if (o.on_packed && r.packed_bytes() > 0) o.on_packed(r.packed_bytes());
    return r;
  };
  size_t act_row = 0;
  rows_.reserve(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const T3Gpt2Layer& L = w.layers[size_t(l)];
    const std::string p = "t3 layer " + std::to_string(l);
    LayerRows r;
    r.qkv = bind_rows(L.c_attn_w, L.c_attn_b, p + " c_attn");
    r.attn_proj = bind_rows(L.c_proj_w, L.c_proj_b, p + " c_proj");
    r.fc = bind_rows(L.fc_w, L.fc_b, p + " c_fc");
    r.proj = bind_rows(L.proj_w, L.proj_b, p + " mlp.c_proj");
    for (const RowLinear* x : {&r.qkv, &r.attn_proj, &r.fc, &r.proj}) act_row = std::max(act_row, x->act_bytes());
    rows_.push_back(r);
  }
  head_ = bind_rows(w.speech_head_w, w.speech_head_b, "t3 speech_head");
  CBX_ASSERT(packed_at == packed_total);
  act_row = std::max(act_row, head_.act_bytes());
  act_stride_ = (act_row + 63) / 64 * 64;
  for (int i = 0; i < 4 * c.n_layer + 1; ++i) splits_.emplace_back(nt);
  std::vector<const Tensor*> layer_mats;
  for (const T3Gpt2Layer& L : w.layers)
    for (const Tensor* t : {&L.c_attn_w, &L.c_proj_w, &L.fc_w, &L.proj_w}) layer_mats.push_back(t);
  row_prefill_max_ = row_prefill_max_rows(layer_mats, o.row_prefill_max, max_batch_);

  // The arena: the buffers keep() takes (run on the plan, then on the arena), then forward()'s
  // allocations for T = max_batch rows in its order, then the largest op scratch it takes: the
  // GEMMs (max_batch rows unless those take the row kernels; one row op by op), attention over
  // the whole cache.
  auto keep = [&](auto& a) {
    logits_ = a.alloc(DType::F32, {V}, "t3 logits");
    thread_h_ = a.alloc(DType::F32, {nt, d}, "t3 decode norm rows");
    thread_tmp_ = a.alloc(DType::F32, {nt, d}, "t3 decode residual partials");
    thread_act_ = static_cast<uint8_t*>(a.alloc_bytes(size_t(nt) * act_stride_ + 64, 64, "t3 decode activations"));
    if (row_prefill_max_ > 1)
      rows_act_ = static_cast<uint8_t*>(
          a.alloc_bytes(size_t(row_prefill_max_) * act_stride_, 64, "t3 row prefill activations"));
  };
  ArenaPlan plan;
  keep(plan);
  const int64_t T = max_batch_;
  plan.alloc(DType::I32, {T});
  for (int i = 0; i < 5; ++i) plan.alloc(DType::F32, {T, d});
  plan.alloc(DType::F32, {T, 3 * d});
  plan.alloc(DType::F32, {T, ff});
  plan.alloc(DType::F32, {1, d});
  const int64_t n_gemm = T > row_prefill_max_ ? T : 1;
  for (const T3Gpt2Layer& L : w.layers) {
    plan.scratch(matmul_scratch_bytes(L.c_attn_w.dtype, n_gemm, 3 * d, d, nt));
    plan.scratch(matmul_scratch_bytes(L.c_proj_w.dtype, n_gemm, d, d, nt));
    plan.scratch(matmul_scratch_bytes(L.fc_w.dtype, n_gemm, ff, d, nt));
    plan.scratch(matmul_scratch_bytes(L.proj_w.dtype, n_gemm, d, ff, nt));
  }
  plan.scratch(matmul_scratch_bytes(w.speech_head_w.dtype, 1, V, d, nt));
  plan.scratch(attention_scratch_bytes(H, max_ctx_, D));
  arena_.reserve(plan.bytes());
  keep(arena_);
  call_mark_ = arena_.mark();
}

size_t T3Gpt2::kv_rows_bytes(int64_t rows) const {
  return size_t(c_.n_layer) * 2 * size_t(c_.n_head) * size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
}

void T3Gpt2::save_kv_rows(int64_t rows, void* dst) const {
  CBX_CHECK(rows >= 0 && rows <= n_past_, "t3: cannot save %lld cache rows, %lld are filled", (long long)rows,
            (long long)n_past_);
  const size_t run = size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
  auto* out = static_cast<uint8_t*>(dst);
  for (int l = 0; l < c_.n_layer; ++l)
    for (const Tensor* t : {&k_cache_[size_t(l)], &v_cache_[size_t(l)]})
      for (int64_t h = 0; h < c_.n_head; ++h, out += run)
        std::memcpy(out, static_cast<const uint8_t*>(t->data) + h * t->stride[0], run);
  kv_unchanged_ = rows;
  kv_source_ = dst;
}

void T3Gpt2::load_kv_rows(int64_t rows, const void* src) {
  CBX_CHECK(rows >= 0 && rows <= max_ctx_, "t3: cannot load %lld cache rows into %lld", (long long)rows,
            (long long)max_ctx_);
  const size_t run = size_t(rows) * dtype_row_bytes(kv_type_, c_.head_dim);
  const auto* in = static_cast<const uint8_t*>(src);
  for (int l = 0; l < c_.n_layer; ++l)
    for (const Tensor* t : {&k_cache_[size_t(l)], &v_cache_[size_t(l)]})
      for (int64_t h = 0; h < c_.n_head; ++h, in += run)
        std::memcpy(static_cast<uint8_t*>(t->data) + h * t->stride[0], in, run);
  n_past_ = rows;
  kv_unchanged_ = rows;
  kv_source_ = src;
}

void T3Gpt2::reuse_kv_rows(int64_t rows) {
  CBX_CHECK(rows >= 0 && rows <= kv_unchanged_, "t3: cannot reuse %lld cache rows, %lld are unchanged since saved",
            (long long)rows, (long long)kv_unchanged_);
  n_past_ = rows;
}

void T3Gpt2::store_kv(int layer, const Tensor& qkv, int64_t T) {
  const int64_t d = c_.n_embd, H = c_.n_head, D = c_.head_dim;
  const Tensor& kc = k_cache_[size_t(layer)];
  const Tensor& vc = v_cache_[size_t(layer)];
  auto job = [&](int64_t item) {  // item = (t, kv, h)
    const int64_t h = item % H, kv = (item / H) % 2, t = item / (2 * H);
    const float* src = static_cast<const float*>(qkv.row(t)) + (1 + kv) * d + h * D;
    const Tensor& dst_t = kv ? vc : kc;
    uint8_t* dst = static_cast<uint8_t*>(dst_t.data) + h * dst_t.stride[0] + (n_past_ + t) * dst_t.stride[1];
    row_store(src, dst, kv_type_, D);
  };
  const int64_t items = T * 2 * H;
  if (T < 4 || pool_.size() <= 1) {
    for (int64_t i = 0; i < items; ++i) job(i);
    return;
  }
  pool_.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(items, ith, nth, &b, &e);
    for (int64_t i = b; i < e; ++i) job(i);
  });
}

size_t T3Gpt2::packed_weight_bytes() const {
  size_t n = head_.packed_bytes();
  for (const LayerRows& r : rows_)
    n += r.qkv.packed_bytes() + r.attn_proj.packed_bytes() + r.fc.packed_bytes() + r.proj.packed_bytes();
  return n;
}

const RowLinear& T3Gpt2::layer_rows(int l, int which) const {
  CBX_CHECK(l >= 0 && l < c_.n_layer && which >= 0 && which < 4, "t3: no row kernels %d of layer %d", which, l);
  const LayerRows& r = rows_[size_t(l)];
  return which == 0 ? r.qkv : which == 1 ? r.attn_proj : which == 2 ? r.fc : r.proj;
}

void T3Gpt2::decode_fused(Tensor& x, Tensor& qkv, Tensor& att, Tensor& f1) {
  const int64_t d = c_.n_embd, H = c_.n_head, D = c_.head_dim;
  const int64_t pos = n_past_, Tk = n_past_ + 1;
  float* xr = x.ptr<float>();
  float* qkvr = qkv.ptr<float>();
  float* attr = att.ptr<float>();
  float* f1r = f1.ptr<float>();
  const int64_t hsd[3] = {H, 1, D};
  const int64_t q_st[3] = {D * 4, 3 * d * 4, 4};
  const int64_t o_st[3] = {D * 4, d * 4, 4};
  const Tensor q = make_view(qkv, 3, hsd, q_st, 0);
  Tensor o = make_view(att, 3, hsd, o_st, 0);
  AttentionParams ap;
  ap.causal = true;
  ap.q_offset = pos;
  const int64_t kv_shape[3] = {H, Tk, D};
  // Nothing may throw inside the run (a worker cannot pass an exception on): validate the
  // views and the attention call here, on an empty head range; every layer's cache has
  // the same shape and strides.
  {
    const Tensor k = make_view(k_cache_[0], 3, kv_shape, k_cache_[0].stride, 0);
    const Tensor v = make_view(v_cache_[0], 3, kv_shape, v_cache_[0].stride, 0);
    attention_part(0, 1, q, k, v, Tensor{}, o, ap, 0, 0);
  }

  // Per phase: the heads, then the rows of c_proj, c_fc and mlp.c_proj; at the end the head's.
  const int nt = pool_.size();
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerRows& R = rows_[size_t(l)];
    splits_[size_t(4 * l)].reset(H, nt, 1);
    splits_[size_t(4 * l + 1)].reset(R.attn_proj.rows(), nt, 16);
    splits_[size_t(4 * l + 2)].reset(R.fc.rows(), nt, 16);
    splits_[size_t(4 * l + 3)].reset(R.proj.rows(), nt, 16);
  }
  splits_[size_t(4 * c_.n_layer)].reset(head_.rows(), nt, 16);

  pool_.run([&](int ith, int nth) {
    float* h = thread_h_.ptr<float>() + ith * d;
    float* tmp = thread_tmp_.ptr<float>() + ith * d;
    uint8_t* abuf = thread_act_ + size_t(ith) * act_stride_;
    // Row pieces: 64 rows from the own block's front, ~1/64 of the rows (whole 16-row groups,
    // whole cache lines of y) stolen from another block's back.
    auto claim_rows = [&](int phase, const RowLinear& r, auto&& fn) {
      splits_[size_t(phase)].run(ith, 64, std::max<int64_t>(16, (r.rows() + 1023) / 1024 * 16), fn);
    };
    for (int l = 0; l < c_.n_layer; ++l) {
      const T3Gpt2Layer& L = w_.layers[size_t(l)];
      const LayerRows& R = rows_[size_t(l)];
      const Tensor& kc = k_cache_[size_t(l)];
      const Tensor& vc = v_cache_[size_t(l)];
      const Tensor k = make_view(kc, 3, kv_shape, kc.stride, 0);
      const Tensor v = make_view(vc, 3, kv_shape, vc.stride, 0);
      // ln_1, then per claimed head: its q, k, v rows, its K/V into the cache, its attention.
      row_layer_norm(xr, h, d, L.ln_1_w, L.ln_1_b, c_.norm_eps);
      const void* a = R.qkv.act(h, abuf);
      splits_[size_t(4 * l)].run(ith, 1, 1, [&](int64_t h0, int64_t h1) {
        for (int part = 0; part < 3; ++part)
          R.qkv.run(part * d + h0 * D, part * d + h1 * D, a, qkvr, RowEpilogue::Store);
        for (int64_t hh = h0; hh < h1; ++hh) {
          row_store(qkvr + d + hh * D, static_cast<uint8_t*>(kc.data) + hh * kc.stride[0] + pos * kc.stride[1],
                    kv_type_, D);
          row_store(qkvr + 2 * d + hh * D, static_cast<uint8_t*>(vc.data) + hh * vc.stride[0] + pos * vc.stride[1],
                    kv_type_, D);
        }
        attention_part(0, 1, q, k, v, Tensor{}, o, ap, h0, h1);
      });
      pool_.barrier();
      // x += c_proj(att)
      const void* aa = R.attn_proj.act(attr, abuf);
      claim_rows(4 * l + 1, R.attn_proj,
                 [&](int64_t m0, int64_t m1) { R.attn_proj.run(m0, m1, aa, xr, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
      // f1 = gelu(c_fc(ln_2(x)))
      row_layer_norm(xr, h, d, L.ln_2_w, L.ln_2_b, c_.norm_eps);
      const void* af = R.fc.act(h, abuf);
      claim_rows(4 * l + 2, R.fc, [&](int64_t m0, int64_t m1) { R.fc.run(m0, m1, af, f1r, RowEpilogue::GeluTanh); });
      pool_.barrier();
      // x += mlp.c_proj(f1)
      const void* ap2 = R.proj.act(f1r, abuf);
      claim_rows(4 * l + 3, R.proj,
                 [&](int64_t m0, int64_t m1) { R.proj.run(m0, m1, ap2, xr, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
    }
    row_layer_norm(xr, h, d, w_.ln_f_w, w_.ln_f_b, c_.norm_eps);
    const void* ah = head_.act(h, abuf);
    claim_rows(4 * c_.n_layer, head_,
               [&](int64_t m0, int64_t m1) { head_.run(m0, m1, ah, logits_.ptr<float>(), RowEpilogue::Store); });
  });
}

void T3Gpt2::rows_linear(const RowLinear& r, const Tensor& x, Tensor& y) {
  const int64_t n = x.shape[0], k = r.cols();
  CBX_ASSERT(n <= row_prefill_max_ && x.is_contiguous() && y.is_contiguous() && x.shape[1] == k &&
             y.shape[1] == r.rows());
  // Each thread converts its share of the activation rows (the rows are independent), then the
  // weight rows are shared out with the pool's WorkSplit (a thread that finishes its block first
  // takes 16-row pieces from the other's back instead of waiting at the end of the run).
  const float* xp = x.ptr<float>();
  const size_t ab = r.act_bytes();
  const void* a = ab ? static_cast<const void*>(rows_act_) : static_cast<const void*>(xp);
  const size_t as = ab ? ab : size_t(k) * 4;
  float* yp = y.ptr<float>();
  WorkSplit& ws = pool_.work_split();
  ws.reset(r.rows(), pool_.size(), 16);
  pool_.run([&](int ith, int nth) {
    if (ab) {
      int64_t r0, r1;
      ThreadPool::split(n, ith, nth, &r0, &r1);
      size_t stride = 0;
      if (r1 > r0) r.act_rows(xp + r0 * k, k, r1 - r0, rows_act_ + size_t(r0) * ab, &stride);
      if (nth > 1) pool_.barrier();
    }
    ws.run(ith, 64, 16,
           [&](int64_t m0, int64_t m1) { r.run_rows(m0, m1, a, as, n, yp, r.rows(), RowEpilogue::Store); });
  });
}

const Tensor& T3Gpt2::forward(const Tensor& embeds) {
  const int64_t d = c_.n_embd, H = c_.n_head, D = c_.head_dim, ff = c_.n_ff;
  CBX_CHECK(embeds.dtype == DType::F32 && embeds.ndim == 2 && embeds.shape[1] == d && embeds.shape[0] > 0,
            "t3 forward: embeds must be f32 [T, %lld], got %s %s", (long long)d, dtype_name(embeds.dtype),
            embeds.shape_str().c_str());
  const int64_t T = embeds.shape[0];
  CBX_CHECK(T <= max_batch_, "t3 forward: %lld rows exceed the reserved batch of %lld", (long long)T,
            (long long)max_batch_);
  CBX_CHECK(n_past_ + T <= max_ctx_, "t3 forward: %lld cached + %lld new positions exceed the KV cache of %lld",
            (long long)n_past_, (long long)T, (long long)max_ctx_);
  arena_.rewind(call_mark_);
  Arena* scratch = &arena_;
  kv_unchanged_ = std::min(kv_unchanged_, n_past_);  // this call writes rows n_past_ .. n_past_ + T - 1

  Tensor pos = arena_.alloc(DType::I32, {T}, "t3 positions");
  for (int64_t t = 0; t < T; ++t) pos.ptr<int32_t>()[t] = int32_t(n_past_ + t);
  Tensor x = arena_.alloc(DType::F32, {T, d}, "t3 x");
  Tensor pe = arena_.alloc(DType::F32, {T, d}, "t3 wpe rows");
  Tensor h = arena_.alloc(DType::F32, {T, d}, "t3 norm");
  Tensor att = arena_.alloc(DType::F32, {T, d}, "t3 attention");
  Tensor tmp = arena_.alloc(DType::F32, {T, d}, "t3 projection");
  Tensor qkv = arena_.alloc(DType::F32, {T, 3 * d}, "t3 qkv");
  Tensor f1 = arena_.alloc(DType::F32, {T, ff}, "t3 ffn");
  Tensor hf = arena_.alloc(DType::F32, {1, d}, "t3 ln_f");

  get_rows(w_.wpe, pos, pe);
  add(pool_, embeds, pe, x);
  if (T == 1 && !capture_ && fused_) {
    decode_fused(x, qkv, att, f1);
    n_past_ += 1;
    return logits_;
  }
  emit("inp", -1, x);

  // Views of qkv / att as [H, T, D] (heads are 64-wide column blocks of a row).
  const int64_t hsd[3] = {H, T, D};
  const int64_t q_st[3] = {D * 4, 3 * d * 4, 4};
  const int64_t o_st[3] = {D * 4, d * 4, 4};
  Tensor q = make_view(qkv, 3, hsd, q_st, 0);
  Tensor o = make_view(att, 3, hsd, o_st, 0);
  const int64_t Tk = n_past_ + T;
  AttentionParams ap;
  ap.causal = true;
  ap.q_offset = n_past_;

  // Projections: the GEMM, or for a few rows of quantized weights the decode's row kernels.
  const bool by_rows = T > 1 && T <= row_prefill_max_;
  auto linear = [&](const RowLinear& r, const Tensor& wt, const Tensor& b, const Tensor& in, Tensor& out) {
    if (by_rows)
      rows_linear(r, in, out);
    else
      matmul_bias(pool_, wt, b, in, out, scratch);
  };
  for (int l = 0; l < c_.n_layer; ++l) {
    const T3Gpt2Layer& L = w_.layers[size_t(l)];
    const LayerRows& R = rows_[size_t(l)];
    layer_norm(pool_, x, L.ln_1_w, L.ln_1_b, c_.norm_eps, h);
    emit("attn_norm", l, h);
    linear(R.qkv, L.c_attn_w, L.c_attn_b, h, qkv);
    emit("qkv", l, qkv);
    store_kv(l, qkv, T);
    const Tensor& kc = k_cache_[size_t(l)];
    const Tensor& vc = v_cache_[size_t(l)];
    const int64_t kv_shape[3] = {H, Tk, D};
    Tensor k = make_view(kc, 3, kv_shape, kc.stride, 0);
    Tensor v = make_view(vc, 3, kv_shape, vc.stride, 0);
    attention(pool_, q, k, v, Tensor{}, o, ap, scratch);
    emit("attn", l, att);
    linear(R.attn_proj, L.c_proj_w, L.c_proj_b, att, tmp);
    add(pool_, x, tmp, x);
    emit("attn_out", l, x);
    layer_norm(pool_, x, L.ln_2_w, L.ln_2_b, c_.norm_eps, h);
    emit("ffn_norm", l, h);
    linear(R.fc, L.fc_w, L.fc_b, h, f1);
    gelu_tanh(pool_, f1, f1);
    emit("ffn_act", l, f1);
    linear(R.proj, L.proj_w, L.proj_b, f1, tmp);
    add(pool_, x, tmp, x);
    emit("l_out", l, x);
  }
  n_past_ += T;

  Tensor last = slice(x, 0, T - 1, 1);
  layer_norm(pool_, last, w_.ln_f_w, w_.ln_f_b, c_.norm_eps, hf);
  emit("ln_f", -1, hf);
  Tensor lg = reshape(logits_, {1, c_.speech_vocab});
  if (w_.speech_head_b.empty())
    matmul(pool_, w_.speech_head_w, hf, lg, scratch);
  else
    matmul_bias(pool_, w_.speech_head_w, w_.speech_head_b, hf, lg, scratch);
  emit("logits", -1, lg);
  return logits_;
}

}  // namespace cbx
