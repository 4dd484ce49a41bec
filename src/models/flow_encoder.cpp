#include "models/flow_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "ops/attention.h"
#include "ops/attention_bf16.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

namespace {

constexpr float kLeakySlope = 0.01f;  // F.leaky_relu default (pre-lookahead layer)
void conformer_specs(const FlowConfig& c, const std::string& p, FlowConformerLayer& L,
                     const FlowEncoderWeights::Visitor& fn) {
  using K = FlowWeightKind;
  const int64_t d = c.d_model, ff = c.n_ff;
  const std::string a = p + ".self_attn.";
  fn(p + ".norm_mha.weight", L.norm_mha_w, {d}, K::Vector);
  fn(p + ".norm_mha.bias", L.norm_mha_b, {d}, K::Vector);
  fn(a + "linear_q.weight", L.q_w, {d, d}, K::Matrix);
  fn(a + "linear_q.bias", L.q_b, {d}, K::Vector);
  fn(a + "linear_k.weight", L.k_w, {d, d}, K::Matrix);
  fn(a + "linear_k.bias", L.k_b, {d}, K::Vector);
  fn(a + "linear_v.weight", L.v_w, {d, d}, K::Matrix);
  fn(a + "linear_v.bias", L.v_b, {d}, K::Vector);
  fn(a + "linear_out.weight", L.out_w, {d, d}, K::Matrix);
  fn(a + "linear_out.bias", L.out_b, {d}, K::Vector);
  fn(a + "linear_pos.weight", L.pos_w, {d, d}, K::Matrix);
  fn(a + "pos_bias_u", L.pos_bias_u, {c.n_head, c.head_dim}, K::Vector);
  fn(a + "pos_bias_v", L.pos_bias_v, {c.n_head, c.head_dim}, K::Vector);
  fn(p + ".norm_ff.weight", L.norm_ff_w, {d}, K::Vector);
  fn(p + ".norm_ff.bias", L.norm_ff_b, {d}, K::Vector);
  fn(p + ".feed_forward.w_1.weight", L.w1_w, {ff, d}, K::Matrix);
  fn(p + ".feed_forward.w_1.bias", L.w1_b, {ff}, K::Vector);
  fn(p + ".feed_forward.w_2.weight", L.w2_w, {d, ff}, K::Matrix);
  fn(p + ".feed_forward.w_2.bias", L.w2_b, {d}, K::Vector);
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A contiguous [r, c] F32 tensor at the start of `storage`.
Tensor rows_of(const Tensor& storage, int64_t r, int64_t c) {
  return make_tensor(DType::F32, {r, c}, storage.data, storage.nbytes());
}

}  // namespace

void FlowEncoderWeights::for_each_tensor(const FlowConfig& c, const Visitor& fn) {
  using K = FlowWeightKind;
  const int64_t d = c.d_model, M = c.mel_dim;
  fn("flow.input_embedding.weight", input_embedding, {c.vocab, d}, K::Embedding);
  fn("flow.spk_embed_affine_layer.weight", spk_affine_w, {M, c.spk_embed_dim}, K::Matrix);
  fn("flow.spk_embed_affine_layer.bias", spk_affine_b, {M}, K::Vector);
  fn("flow.encoder.embed.out.0.weight", embed_w, {d, d}, K::Matrix);
  fn("flow.encoder.embed.out.0.bias", embed_b, {d}, K::Vector);
  fn("flow.encoder.embed.out.1.weight", embed_ln_w, {d}, K::Vector);
  fn("flow.encoder.embed.out.1.bias", embed_ln_b, {d}, K::Vector);
  fn("flow.encoder.pre_lookahead_layer.conv1.weight", pre_conv1_w, {d, d, c.pre_lookahead_len + 1}, K::Conv);
  fn("flow.encoder.pre_lookahead_layer.conv1.bias", pre_conv1_b, {d}, K::Vector);
  fn("flow.encoder.pre_lookahead_layer.conv2.weight", pre_conv2_w, {d, d, 3}, K::Conv);
  fn("flow.encoder.pre_lookahead_layer.conv2.bias", pre_conv2_b, {d}, K::Vector);
  encoders.resize(size_t(c.n_encoders));
  for (int i = 0; i < c.n_encoders; ++i)
    conformer_specs(c, "flow.encoder.encoders." + std::to_string(i), encoders[size_t(i)], fn);
  fn("flow.encoder.up_layer.conv.weight", up_conv_w, {d, d, c.up_kernel}, K::Conv);
  fn("flow.encoder.up_layer.conv.bias", up_conv_b, {d}, K::Vector);
  fn("flow.encoder.up_embed.out.0.weight", up_embed_w, {d, d}, K::Matrix);
  fn("flow.encoder.up_embed.out.0.bias", up_embed_b, {d}, K::Vector);
  fn("flow.encoder.up_embed.out.1.weight", up_embed_ln_w, {d}, K::Vector);
  fn("flow.encoder.up_embed.out.1.bias", up_embed_ln_b, {d}, K::Vector);
  up_encoders.resize(size_t(c.n_up_encoders));
  for (int i = 0; i < c.n_up_encoders; ++i)
    conformer_specs(c, "flow.encoder.up_encoders." + std::to_string(i), up_encoders[size_t(i)], fn);
  fn("flow.encoder.after_norm.weight", after_norm_w, {d}, K::Vector);
  fn("flow.encoder.after_norm.bias", after_norm_b, {d}, K::Vector);
  fn("flow.encoder_proj.weight", proj_w, {M, d}, K::Matrix);
  fn("flow.encoder_proj.bias", proj_b, {M}, K::Vector);
}

void bind_flow_encoder(const GgufFile& f, const FlowConfig& c, FlowEncoderWeights& w) {
  CBX_CHECK(c.d_model > 0 && c.n_head > 0 && c.head_dim > 0 && int64_t(c.n_head) * c.head_dim == c.d_model &&
                c.n_ff > 0 && c.vocab > 0 && c.mel_dim > 0 && c.spk_embed_dim > 0 && c.n_encoders >= 0 &&
                c.n_up_encoders >= 0 && c.pre_lookahead_len >= 0,
            "%s: inconsistent flow hyper-parameters (d_model %d, n_head %d, head_dim %d, n_ff %d, vocab %d, "
            "mel_dim %d, spk_embed_dim %d)",
            f.path().c_str(), c.d_model, c.n_head, c.head_dim, c.n_ff, c.vocab, c.mel_dim, c.spk_embed_dim);
  CBX_CHECK(c.up_stride >= 1 && c.up_kernel == 2 * c.up_stride + 1,
            "%s: flow up_kernel %d must be 2 * up_stride + 1 (up_stride %d) as in Upsample1D", f.path().c_str(),
            c.up_kernel, c.up_stride);
  w.for_each_tensor(c,
                    [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, FlowWeightKind kind) {
                      const GgufTensorInfo* ti = f.find_tensor(name);
                      CBX_CHECK(ti, "%s: missing tensor '%s'", f.path().c_str(), name.c_str());
                      bool ok = ti->ndim == int(shape.size());
                      for (int i = 0; ok && i < ti->ndim; ++i) ok = ti->shape[i] == shape[size_t(i)];
                      if (!ok) {
                        Tensor got = f.tensor(*ti);
                        fail("%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(),
                             got.shape_str().c_str(), shape_string(shape).c_str());
                      }
                      const TypeTraits& tr = type_traits(ti->dtype);
                      if (kind == FlowWeightKind::Vector || kind == FlowWeightKind::Conv)
                        CBX_CHECK(ti->dtype == DType::F32, "%s: tensor '%s' must be f32, got %s", f.path().c_str(),
                                  name.c_str(), tr.name);
                      else
                        CBX_CHECK(tr.is_float && tr.to_float, "%s: tensor '%s' has dtype %s, not a weight type",
                                  f.path().c_str(), name.c_str(), tr.name);
                      slot = f.tensor(*ti);
                    });
}

// Per-call buffers, each sized for T = 2 L rows of the current call.
struct FlowEncoder::Bufs {
  Tensor ids;                           // [L] token ids
  Tensor x, xn, q, k, v, qv, att, tmp;  // [T, d]
  Tensor p;                             // [2T-1, d]
  Tensor bd;                            // T * (2T-1) floats (one head; not with the in-kernel term)
  Tensor hid;                           // [T, n_ff]
  Tensor ct0, ct1, ct2;                 // d * T floats (channels-first)
  Tensor proj, xvec;                    // [T, M], [1, S]
};

template <class A>
FlowEncoder::Bufs FlowEncoder::alloc_bufs(A& a, int64_t L) const {
  const int64_t d = c_.d_model, T = c_.up_stride * L;
  Bufs b;
  b.ids = a.alloc(DType::I32, {L}, "flow token ids");
  b.x = a.alloc(DType::F32, {T, d}, "flow x");
  b.xn = a.alloc(DType::F32, {T, d}, "flow norm");
  b.q = a.alloc(DType::F32, {T, d}, "flow q");
  b.k = a.alloc(DType::F32, {T, d}, "flow k");
  b.v = a.alloc(DType::F32, {T, d}, "flow v");
  b.qv = a.alloc(DType::F32, {T, d}, "flow q + pos_bias_v");
  b.att = a.alloc(DType::F32, {T, d}, "flow attention");
  b.tmp = a.alloc(DType::F32, {T, d}, "flow projection");
  b.p = a.alloc(DType::F32, {2 * T - 1, d}, "flow linear_pos");
  if (!relpos_) b.bd = a.alloc(DType::F32, {T * (2 * T - 1)}, "flow position scores");
  b.hid = a.alloc(DType::F32, {T, c_.n_ff}, "flow ffn");
  b.ct0 = a.alloc(DType::F32, {d * T}, "flow channels-first 0");
  b.ct1 = a.alloc(DType::F32, {d * T}, "flow channels-first 1");
  b.ct2 = a.alloc(DType::F32, {d * T}, "flow channels-first 2");
  b.proj = a.alloc(DType::F32, {T, c_.mel_dim}, "flow encoder_proj");
  b.xvec = a.alloc(DType::F32, {1, c_.spk_embed_dim}, "flow x-vector");
  return b;
}

FlowEncoder::FlowEncoder(const FlowConfig& c, const FlowEncoderWeights& w, ThreadPool& pool,
                         const FlowEncoderOptions& o)
    : c_(c), w_(w), pool_(pool), max_tokens_(o.max_tokens) {
  CBX_CHECK(max_tokens_ > 0, "flow encoder: max_tokens must be > 0, got %lld", (long long)max_tokens_);
  CBX_CHECK(int(w.encoders.size()) == c.n_encoders && int(w.up_encoders.size()) == c.n_up_encoders &&
                !w.input_embedding.empty() && !w.proj_w.empty(),
            "flow encoder: weights are not bound");
  const int64_t d = c.d_model, D = c.head_dim;
  const int64_t L = max_tokens_, T = c.up_stride * L, P = 2 * T - 1;
  bool lossy = gemm_weight_is_lossy(w.embed_w.dtype) || gemm_weight_is_lossy(w.proj_w.dtype);
  if (!w.encoders.empty()) lossy |= gemm_weight_is_lossy(w.encoders[0].q_w.dtype);
  gemm_ = resolve_gemm_precision(o.gemm, lossy);
  // At the BF16 precision the position scores and the attention run in bf16 as well (the fused
  // kernel with the scores as its additive bias) where that kernel runs here; where the vdpbf16ps
  // kernel computes the position term itself, all heads run in one call (no [T, 2T-1] scores).
  const AttentionKernel attn = attention_kernel(gemm_, D, /*relpos=*/true);
  attn_bf16_ = attn != AttentionKernel::F32;
  relpos_ = attn == AttentionKernel::Bf16Relpos;

  // Conformer matrices packed once (bf16 panels when gemm_ is BF16 on AMX).
  for (const auto* layers : {&w.encoders, &w.up_encoders})
    for (const FlowConformerLayer& Ly : *layers) {
      PackedLayer pl;
      pl.q = pack_weight(pool, {&Ly.q_w}, gemm_, "flow linear_q");
      pl.k = pack_weight(pool, {&Ly.k_w}, gemm_, "flow linear_k");
      pl.v = pack_weight(pool, {&Ly.v_w}, gemm_, "flow linear_v");
      pl.out = pack_weight(pool, {&Ly.out_w}, gemm_, "flow linear_out");
      pl.pos = pack_weight(pool, {&Ly.pos_w}, gemm_, "flow linear_pos");
      pl.w1 = pack_weight(pool, {&Ly.w1_w}, gemm_, "flow feed_forward.w_1");
      pl.w2 = pack_weight(pool, {&Ly.w2_w}, gemm_, "flow feed_forward.w_2");
      packed_.emplace_back(&Ly, std::move(pl));
    }
  if (gemm_ == GemmPrecision::BF16)
    for (const auto& [cw, cb] : {std::pair{&w.pre_conv1_w, &w.pre_conv1_b}, std::pair{&w.pre_conv2_w, &w.pre_conv2_b},
                                 std::pair{&w.up_conv_w, &w.up_conv_b}})
      conv_packs_.add(pool, *cw, *cb);
  plan_arenas(o);

  // Relative-position table (EspnetRelPositionalEncoding): row r holds position q = Tmax-1-r,
  // [sin(q w_i), cos(q w_i)] interleaved, w_i = exp(2i * -(ln 10000 / d)), formed in f32 as
  // torch does (|q| * w rounded to f32, the sign applied after).
  const float step = float(-(std::log(10000.0) / double(d)));
  std::vector<float> freq(size_t(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) freq[size_t(i)] = float(std::exp(double(float(2 * i) * step)));
  for (int64_t r = 0; r < P; ++r) {
    const int64_t q = T - 1 - r;
    const float aq = float(q < 0 ? -q : q), sgn = q < 0 ? -1.f : 1.f;
    float* row = pos_.ptr<float>() + r * d;
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = double(sgn * (aq * freq[size_t(i)]));
      row[2 * i] = float(std::sin(a));
      row[2 * i + 1] = float(std::cos(a));
    }
  }
  call_mark_ = arena_.mark();
  work_base_ = o.work ? 0 : call_mark_;
}

void FlowEncoder::plan_arenas(const FlowEncoderOptions& o) {
  GemmPrecisionScope scope(gemm_);  // the convs take the paths forward's scope gives them
  const int64_t d = c_.d_model, D = c_.head_dim, M = c_.mel_dim, L = max_tokens_, T = c_.up_stride * L;
  const int nt = pool_.size();
  auto persistent = [&](auto& a) {
    pos_ = a.alloc(DType::F32, {2 * T - 1, d}, "flow relative-position table");
    mu_buf_ = a.alloc(DType::F32, {M * T}, "flow mu");
    cond_buf_ = a.alloc(DType::F32, {M * T}, "flow cond");
    spks_buf_ = a.alloc(DType::F32, {M}, "flow spks");
  };
  ArenaPlan keep;
  persistent(keep);
  ArenaPlan call = o.work ? ArenaPlan() : keep;
  alloc_bufs(call, L);
  // Every op's scratch, taken after all the activations and rewound.
  auto mm = [&](const Tensor& wt, int64_t n) {
    call.scratch(matmul_scratch_bytes(wt.dtype, n, wt.shape[0], wt.shape[1], nt));
  };
  mm(w_.spk_affine_w, 1);
  mm(w_.embed_w, L);
  mm(w_.up_embed_w, T);
  mm(w_.proj_w, T);
  auto conv = [&](const Tensor& cw, int64_t t_in, int64_t pad_left, int64_t pad_right) {
    Conv1dParams p;
    p.pad_left = pad_left;
    p.pad_right = pad_right;
    p.packed = conv_packs_.find(cw);
    call.scratch(conv1d_scratch_bytes(cw, t_in, p, nt));
  };
  conv(w_.pre_conv1_w, L, 0, c_.pre_lookahead_len);
  conv(w_.pre_conv2_w, L, 2, 0);
  conv(w_.up_conv_w, T, c_.up_kernel - 1, 0);
  for (const auto& [ly, pl] : packed_) {
    for (int64_t n : {L, T}) {  // encoders run on L rows, up_encoders on T: plan both
      for (const PackedWeight* pw : {&pl.q, &pl.k, &pl.v, &pl.out, &pl.w1, &pl.w2})
        call.scratch(matmul_packed_scratch_bytes(*pw, n, nt));
      call.scratch(matmul_packed_scratch_bytes(pl.pos, 2 * n - 1, nt));
      call.scratch(matmul_mlp_scratch_bytes(pl.w1, pl.w2, n, nt));
      if (relpos_) {
        call.scratch(attention_bf16_relpos_scratch_bytes(1, c_.n_head, n, D, nt));
        continue;
      }
      call.scratch(matmul_scratch_bytes(DType::F32, n, 2 * n - 1, D, nt));  // (q + v) p^T per head
      call.scratch(attn_bf16_ ? attention_bf16_scratch_bytes(1, 1, n, D, nt) : attention_scratch_bytes(1, n, D));
    }
  }
  work_ = reserve_stage_arenas(arena_, o.work, keep, call);
  persistent(arena_);
}

const FlowEncoder::PackedLayer& FlowEncoder::packed_for(const FlowConformerLayer& W) const {
  for (const auto& [w, p] : packed_)
    if (w == &W) return p;
  fail("flow encoder: conformer layer weights %p were not packed at construction", static_cast<const void*>(&W));
}

Tensor FlowEncoder::pos_table(int64_t n) const {
  const int64_t Tmax = (pos_.shape[0] + 1) / 2;
  return slice(pos_, 0, Tmax - n, 2 * n - 1);
}

void FlowEncoder::embed(const Tensor& w, const Tensor& bias, const Tensor& ln_w, const Tensor& ln_b, Tensor& x,
                        Tensor& tmp) {
  matmul_bias(pool_, w, bias, x, tmp, work_);
  layer_norm(pool_, tmp, ln_w, ln_b, c_.ln_eps, x);
  scale(pool_, x, x, float(std::sqrt(double(c_.d_model))));
}

void FlowEncoder::conformer_layer(const FlowConformerLayer& W, Tensor& x, const Tensor& pos, const Bufs& b,
                                  const std::string& name) {
  const int64_t n = x.shape[0], d = c_.d_model, H = c_.n_head, D = c_.head_dim, P = 2 * n - 1;
  Tensor xn = rows_of(b.xn, n, d), q = rows_of(b.q, n, d), k = rows_of(b.k, n, d), v = rows_of(b.v, n, d);
  Tensor qv = rows_of(b.qv, n, d), att = rows_of(b.att, n, d);
  Tensor p = rows_of(b.p, P, d), hid = rows_of(b.hid, n, c_.n_ff);
  Arena* sc = work_;

  layer_norm(pool_, x, W.norm_mha_w, W.norm_mha_b, c_.layer_ln_eps, xn);
  const PackedLayer& pk = packed_for(W);
  matmul_packed(pool_, pk.q, xn, q, MatmulEpilogue{&W.q_b}, sc);
  matmul_packed(pool_, pk.k, xn, k, MatmulEpilogue{&W.k_b}, sc);
  matmul_packed(pool_, pk.v, xn, v, MatmulEpilogue{&W.v_b}, sc);
  matmul_packed(pool_, pk.pos, pos, p, {}, sc);
  // Both score terms carry the 1/sqrt(D) here, so the attention op runs with scale 1.
  const float s = 1.f / std::sqrt(float(D));
  add(pool_, q, reshape(W.pos_bias_v, {H * D}), qv);
  scale(pool_, qv, qv, s);
  add(pool_, q, reshape(W.pos_bias_u, {H * D}), q);
  scale(pool_, q, q, s);

  if (relpos_) {  // bd inside the kernel: the same bits as the per-head path below
    const int64_t hs[3] = {H, n, D}, st[3] = {D * 4, d * 4, 4}, ps[3] = {H, P, D};
    Tensor oh = make_view(att, 3, hs, st, 0);
    attention_bf16_relpos(pool_, make_view(q, 3, hs, st, 0), make_view(k, 3, hs, st, 0), make_view(v, 3, hs, st, 0),
                          make_view(qv, 3, hs, st, 0), make_view(p, 3, ps, st, 0), oh, 1.f, *work_);
  } else {
    attention_per_head(q, k, v, qv, p, b, att);
  }
  matmul_packed(pool_, pk.out, att, x, MatmulEpilogue{&W.out_b, MatmulAct::None, &x}, sc);  // x += out(att)
  emit(name + ".attn", x);

  // x += w2(silu(w1(LN(x)))): one MLP call (LayerNorm, bias, SiLU and residual fused).
  matmul_mlp(pool_, pk.w1,
             MatmulEpilogue{&W.w1_b, MatmulAct::Silu, nullptr, &W.norm_ff_w, &W.norm_ff_b, c_.layer_ln_eps}, pk.w2,
             MatmulEpilogue{&W.w2_b, MatmulAct::None, &x}, x, hid, x, sc);
  emit(name + ".out", x);
}

// The position scores and attention one head at a time (the AMX kernel or f32), so the scores
// need [n, 2n-1] floats, not H times that.
void FlowEncoder::attention_per_head(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qv,
                                     const Tensor& p, const Bufs& b, Tensor& att) {
  const int64_t n = q.shape[0], d = c_.d_model, H = c_.n_head, D = c_.head_dim, P = 2 * n - 1;
  Arena* sc = work_;
  // One head at a time, so the position scores need [n, 2n-1] floats, not H times that:
  // bd_raw = (q + v_h) p_h^T: [n, 2n-1]; the rel_shift bd[i, j] = bd_raw[i, n-1-i+j] is the
  // view with row stride 2n-2 starting at n-1, passed to the attention as its additive mask.
  Tensor bd = make_tensor(DType::F32, {n, P}, b.bd.data, b.bd.nbytes());
  const int64_t mshape[2] = {n, n};
  const int64_t mstride[2] = {(n > 1 ? P - 1 : 1) * 4, 4};
  const Tensor mask = make_view(bd, 2, mshape, mstride, (n - 1) * 4);
  const int64_t hs[3] = {1, n, D};
  const int64_t st[3] = {d * 4, d * 4, 4};
  AttentionParams ap;
  ap.scale = 1.f;
  for (int64_t h = 0; h < H; ++h) {
    gemm_f32(pool_, slice(qv, 1, h * D, D), slice(p, 1, h * D, D), bd, sc,
             attn_bf16_ ? GemmPrecision::BF16 : GemmPrecision::F32);
    const int64_t off = h * D * 4;
    Tensor oh = make_view(att, 3, hs, st, off);
    const Tensor qh = make_view(q, 3, hs, st, off), kh = make_view(k, 3, hs, st, off),
                 vh = make_view(v, 3, hs, st, off);
    if (attn_bf16_)
      attention_bf16(pool_, qh, kh, vh, mask, oh, 1.f, *work_);
    else
      attention(pool_, qh, kh, vh, mask, oh, ap, sc);
  }
}

FlowEncoderOutput FlowEncoder::forward(const int32_t* prompt_tokens, int64_t n_prompt, const int32_t* tokens,
                                       int64_t n_tokens, const float* prompt_feat, int64_t n_prompt_frames,
                                       const float* embedding, int64_t n_embedding) {
  GemmPrecisionScope gemm_scope(gemm_);
  const int64_t d = c_.d_model, M = c_.mel_dim, S = c_.spk_embed_dim;
  const int64_t L = n_prompt + n_tokens, T = c_.up_stride * L;
  CBX_CHECK(n_prompt >= 0 && n_tokens >= 0 && L > 0, "flow encoder: no tokens (prompt %lld, generated %lld)",
            (long long)n_prompt, (long long)n_tokens);
  CBX_CHECK(L <= max_tokens_, "flow encoder: %lld prompt + %lld tokens exceed the reserved %lld", (long long)n_prompt,
            (long long)n_tokens, (long long)max_tokens_);
  CBX_CHECK(n_embedding == S && embedding, "flow encoder: speaker embedding has %lld values, expected %lld",
            (long long)n_embedding, (long long)S);
  CBX_CHECK(n_prompt_frames >= 0 && n_prompt_frames <= T && (n_prompt_frames == 0 || prompt_feat),
            "flow encoder: %lld prompt frames do not fit the %lld output frames", (long long)n_prompt_frames,
            (long long)T);
  work_->rewind(work_base_);

  // Tokens, prompt first (flow.py concatenates prompt_token and token).
  Bufs b = alloc_bufs(*work_, L);
  Tensor &ids = b.ids, &proj = b.proj, &xvec = b.xvec;
  for (int64_t i = 0; i < L; ++i) {
    const int32_t t = i < n_prompt ? prompt_tokens[i] : tokens[i - n_prompt];
    CBX_CHECK(t >= 0 && t < c_.vocab, "flow encoder: %s token %lld at %lld is outside [0, %d)",
              i < n_prompt ? "prompt" : "speech", (long long)t, (long long)(i < n_prompt ? i : i - n_prompt), c_.vocab);
    ids.ptr<int32_t>()[i] = t;
  }
  FlowEncoderOutput out;
  out.mu = make_tensor(DType::F32, {M, T}, mu_buf_.data, size_t(M * T) * 4);
  out.cond = make_tensor(DType::F32, {M, T}, cond_buf_.data, size_t(M * T) * 4);
  out.spks = spks_buf_;
  out.n_frames = T;
  out.n_prompt_frames = n_prompt_frames;

  // Speaker: F.normalize (x / max(|x|, 1e-12)) then the affine layer.
  double ss = 0;
  for (int64_t i = 0; i < S; ++i) ss += double(embedding[i]) * embedding[i];
  const double nrm = std::max(std::sqrt(ss), 1e-12);
  for (int64_t i = 0; i < S; ++i) xvec.ptr<float>()[i] = float(embedding[i] / nrm);
  Tensor spks2 = reshape(out.spks, {1, M});
  matmul_bias(pool_, w_.spk_affine_w, w_.spk_affine_b, xvec, spks2, work_);
  emit("flow_encoder.spks", out.spks);

  // Token embedding, embed, pre-lookahead.
  Tensor x = rows_of(b.x, L, d), tmp = rows_of(b.tmp, L, d);
  get_rows(w_.input_embedding, ids, x);
  emit("flow_encoder.embedding", x);
  embed(w_.embed_w, w_.embed_b, w_.embed_ln_w, w_.embed_ln_b, x, tmp);
  emit("flow_encoder.embed", x);
  Tensor pos = pos_table(L);
  emit("flow_encoder.pos_emb", pos);
  {
    Tensor xt = rows_of(b.ct0, d, L), c1 = rows_of(b.ct1, d, L);
    copy_strided(transpose(x, 0, 1), xt);
    Conv1dParams p1;
    p1.pad_right = c_.pre_lookahead_len;
    p1.packed = conv_packs_.find(w_.pre_conv1_w);
    conv1d(pool_, xt, w_.pre_conv1_w, w_.pre_conv1_b, c1, p1, work_);
    leaky_relu(pool_, c1, c1, kLeakySlope);
    Conv1dParams p2;
    p2.pad_left = 2;
    p2.packed = conv_packs_.find(w_.pre_conv2_w);
    conv1d(pool_, c1, w_.pre_conv2_w, w_.pre_conv2_b, xt, p2, work_);
    copy_strided(transpose(xt, 0, 1), tmp);
    add(pool_, x, tmp, x);
  }
  emit("flow_encoder.pre_lookahead", x);
  for (int i = 0; i < c_.n_encoders; ++i)
    conformer_layer(w_.encoders[size_t(i)], x, pos, b, "flow_encoder.layer" + std::to_string(i));

  // Upsample1D: nearest x stride, left pad 2 stride, conv (kernel 2 stride + 1).
  {
    Tensor xt = rows_of(b.ct0, d, L), up = rows_of(b.ct1, d, T), c2 = rows_of(b.ct2, d, T);
    copy_strided(transpose(x, 0, 1), xt);
    upsample_nearest(xt, c_.up_stride, up);
    Conv1dParams pu;
    pu.pad_left = c_.up_kernel - 1;
    pu.packed = conv_packs_.find(w_.up_conv_w);
    conv1d(pool_, up, w_.up_conv_w, w_.up_conv_b, c2, pu, work_);
    x = rows_of(b.x, T, d);
    copy_strided(transpose(c2, 0, 1), x);
  }
  emit("flow_encoder.up_layer", x);
  tmp = rows_of(b.tmp, T, d);
  embed(w_.up_embed_w, w_.up_embed_b, w_.up_embed_ln_w, w_.up_embed_ln_b, x, tmp);
  emit("flow_encoder.up_embed", x);
  pos = pos_table(T);
  emit("flow_encoder.up_pos_emb", pos);
  for (int i = 0; i < c_.n_up_encoders; ++i)
    conformer_layer(w_.up_encoders[size_t(i)], x, pos, b, "flow_encoder.up_layer" + std::to_string(i));
  layer_norm(pool_, x, w_.after_norm_w, w_.after_norm_b, c_.ln_eps, x);
  emit("flow_encoder.after_norm", x);

  // mu = encoder_proj(h)^T; cond = prompt_feat^T in the first Tm frames.
  matmul_bias(pool_, w_.proj_w, w_.proj_b, x, proj, work_);
  copy_strided(transpose(proj, 0, 1), out.mu);
  std::memset(out.cond.data, 0, size_t(M * T) * 4);
  float* cd = out.cond.ptr<float>();
  for (int64_t t = 0; t < n_prompt_frames; ++t)
    for (int64_t m = 0; m < M; ++m) cd[m * T + t] = prompt_feat[t * M + m];
  emit("flow_encoder.mu", out.mu);
  emit("flow_encoder.cond", out.cond);
  return out;
}

}  // namespace cbx
