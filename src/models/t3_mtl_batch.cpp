#include "models/t3_mtl_batch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "models/t3_llama.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/row_linear.h"

namespace cbx {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

T3MtlBatch::T3MtlBatch(T3Mtl& t3, ThreadPool& pool, int max_batch)
    : t3_(t3), llama_(t3.backbone()), c_(t3.config().t3), pool_(pool), max_batch_(max_batch) {
  CBX_CHECK(max_batch >= 1 && max_batch <= 64, "t3 mtl batch: max_batch %d outside 1 .. 64", max_batch);
  const int64_t d = c_.n_embd, H = c_.n_head, Hkv = c_.n_kv_head, D = c_.head_dim, ff = c_.n_ff, V = c_.speech_vocab;
  n_layer_ = c_.n_layer;
  n_kv_head_ = Hkv;
  max_ctx_ = llama_.max_ctx();
  // The backbone holds the longest conditioning, the longest text and max_new positions.
  slot_rows_ = max_ctx_ - t3.max_cond_len();
  head_bytes_ = size_t(slot_rows_) * dtype_row_bytes(llama_.kv_type(), D);
  head_bytes_ = (head_bytes_ + 63) / 64 * 64;
  slot_bytes_ = size_t(2 * max_batch) * row_slot_bytes();
  slots_.reset(new uint8_t[slot_bytes_]);  // not touched here: pages become resident as rows are written
  reqs_.resize(size_t(max_batch));
  for (Req& r : reqs_) {
    r.history.reserve(size_t(t3.max_new_tokens()) + 1);
    r.out.reserve(size_t(t3.max_new_tokens()));
  }

  const int nt = pool_.size();
  const int64_t B = max_batch, R = 2 * B;
  act_stride_ = llama_.act_stride();
  // Every buffer is taken here, once: the same calls size the arena on a plan, then allocate.
  auto buffers = [&](auto& a) {
    ids_ = a.alloc(DType::I32, {B}, "t3 mtl batch token ids");
    pos_ids_ = a.alloc(DType::I32, {B}, "t3 mtl batch speech positions");
    emb_ = a.alloc(DType::F32, {B, d}, "t3 mtl batch token embeddings");
    pe_ = a.alloc(DType::F32, {B, d}, "t3 mtl batch position rows");
    x_ = a.alloc(DType::F32, {R, d}, "t3 mtl batch x");
    q_ = a.alloc(DType::F32, {R, H * D}, "t3 mtl batch q");
    att_ = a.alloc(DType::F32, {R, H * D}, "t3 mtl batch attention");
    k_ = a.alloc(DType::F32, {R, Hkv * D}, "t3 mtl batch k");
    v_ = a.alloc(DType::F32, {R, Hkv * D}, "t3 mtl batch v");
    g_ = a.alloc(DType::F32, {R, ff}, "t3 mtl batch gate");
    u_ = a.alloc(DType::F32, {R, ff}, "t3 mtl batch up");
    logits_ = a.alloc(DType::F32, {R, V}, "t3 mtl batch logits");
    rope_ = a.alloc(DType::F32, {R, D}, "t3 mtl batch rope angles");
    thread_h_ = a.alloc(DType::F32, {nt * R, d}, "t3 mtl batch norm rows").template ptr<float>();
    thread_tmp_ = a.alloc(DType::F32, {nt * R, d}, "t3 mtl batch residual partials").template ptr<float>();
    thread_act_ =
        static_cast<uint8_t*>(a.alloc_bytes(size_t(2 * nt * R) * act_stride_ + 64, 64, "t3 mtl batch activations"));
  };
  ArenaPlan plan;
  buffers(plan);
  arena_.reserve(plan.bytes());
  buffers(arena_);
  for (int i = 0; i < 3 * n_layer_ + 1; ++i) splits_.emplace_back(nt);
  step_reqs_.reserve(size_t(B));
  row_req_.reserve(size_t(R));
  row_seq_.reserve(size_t(R));
  row_pos_.reserve(size_t(R));
  kv_views_.resize(size_t(R) * size_t(n_layer_) * 4);
  prefixes_.reserve(size_t(max_batch) + kIdlePrefixes + 1);
}

uint8_t* T3MtlBatch::slot_head(int s, int l, int kv, int64_t h) const {
  const size_t i = ((size_t(s) * size_t(n_layer_) + size_t(l)) * 2 + size_t(kv)) * size_t(n_kv_head_) + size_t(h);
  return slots_.get() + i * head_bytes_;
}

void T3MtlBatch::check_req(int req) const {
  CBX_CHECK(req >= 0 && req < max_batch_ && reqs_[size_t(req)].active, "t3 mtl batch: request %d is not active", req);
}
bool T3MtlBatch::active(int req) const { return req >= 0 && req < max_batch_ && reqs_[size_t(req)].active; }
bool T3MtlBatch::finished(int req) const { return active(req) && reqs_[size_t(req)].finished; }
const std::vector<int32_t>& T3MtlBatch::tokens(int req) const {
  check_req(req);
  return reqs_[size_t(req)].out;
}
bool T3MtlBatch::all_inf(int req) const {
  check_req(req);
  return reqs_[size_t(req)].all_inf;
}
int T3MtlBatch::n_active() const {
  int n = 0;
  for (const Req& r : reqs_) n += r.active;
  return n;
}
int T3MtlBatch::n_decoding() const {
  int n = 0;
  for (const Req& r : reqs_) n += r.active && !r.finished;
  return n;
}

bool T3MtlBatch::prefix_reused(int req) const {
  check_req(req);
  return reqs_[size_t(req)].prefix_reused;
}
size_t T3MtlBatch::n_idle_prefixes() const {
  size_t n = 0;
  for (const auto& p : prefixes_) n += p.use_count() == 1;
  return n;
}
size_t T3MtlBatch::prefix_bytes() const {
  size_t n = 0;
  for (const auto& p : prefixes_) n += p->kv.size();
  return n;
}

namespace {
bool same_cond(const std::vector<float>& speaker, const std::vector<int32_t>& prompt, float exaggeration,
               const T3MtlCond& c) {
  return speaker.size() == c.speaker_emb.size() && prompt.size() == c.cond_prompt_tokens.size() &&
         std::memcmp(&exaggeration, &c.exaggeration, 4) == 0 &&
         std::memcmp(speaker.data(), c.speaker_emb.data(), speaker.size() * 4) == 0 &&
         (prompt.empty() || std::memcmp(prompt.data(), c.cond_prompt_tokens.data(), prompt.size() * 4) == 0);
}
}  // namespace

std::shared_ptr<const T3MtlBatch::Prefix> T3MtlBatch::find_prefix(const T3MtlCond& cond, int64_t n_rows) {
  for (size_t i = 0; i < prefixes_.size(); ++i) {
    const Prefix& p = *prefixes_[i];
    if (p.n_rows != n_rows || !same_cond(p.speaker, p.prompt, p.exaggeration, cond)) continue;
    std::shared_ptr<const Prefix> q = prefixes_[i];
    prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(i));
    prefixes_.push_back(q);  // most recently used last
    return q;
  }
  return nullptr;
}

std::shared_ptr<const T3MtlBatch::Prefix> T3MtlBatch::keep_prefix(const T3MtlCond& cond, int64_t n_rows, int64_t rows) {
  auto p = std::make_shared<Prefix>();
  p->kv.resize(llama_.prefix_bytes(rows));
  llama_.save_prefix(rows, p->kv.data());
  // A single-row prefill computes the prefix together with the text: share a held copy only
  // when this one has the same bytes.
  for (size_t i = 0; i < prefixes_.size(); ++i) {
    const Prefix& q = *prefixes_[i];
    if (q.n_rows == n_rows && q.rows == rows && q.kv == p->kv && same_cond(q.speaker, q.prompt, q.exaggeration, cond)) {
      std::shared_ptr<const Prefix> r = prefixes_[i];
      prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(i));
      prefixes_.push_back(r);
      return r;
    }
  }
  p->speaker = cond.speaker_emb;
  p->prompt = cond.cond_prompt_tokens;
  p->exaggeration = cond.exaggeration;
  p->n_rows = n_rows;
  p->rows = rows;
  prefixes_.push_back(p);
  trim_idle_prefixes();
  return p;
}

void T3MtlBatch::trim_idle_prefixes() {
  // Drop the oldest prefixes no request uses beyond kIdlePrefixes (the list is oldest first).
  size_t idle = n_idle_prefixes();
  for (size_t i = 0; i < prefixes_.size() && idle > kIdlePrefixes;) {
    if (prefixes_[i].use_count() == 1) {
      prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(i));
      --idle;
    } else {
      ++i;
    }
  }
}

int T3MtlBatch::start(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, const T3MtlSampling& s,
                      int64_t max_new, bool ignore_eos) {
  if (max_new < 0) max_new = t3_.max_new_tokens();
  CBX_CHECK(max_new >= 1 && max_new <= t3_.max_new_tokens(),
            "t3 mtl batch: %lld new tokens requested, 1 .. %lld reserved", (long long)max_new,
            (long long)t3_.max_new_tokens());
  int q = 0;
  while (q < max_batch_ && reqs_[size_t(q)].active) ++q;
  CBX_CHECK(q < max_batch_, "t3 mtl batch: all %d requests are in use", max_batch_);
  Req& r = reqs_[size_t(q)];
  const double t0 = now_ms();
  // generate's sampler, prefill and step 0.
  const MtlSamplerParams sp = mtl_sampler_params(s);
  auto sampler = std::make_unique<MtlSampler>(int32_t(c_.speech_vocab), sp);
  const int64_t B = s.cfg_weight > 0.f ? 2 : 1;
  int64_t T = 0;
  std::shared_ptr<const Prefix> prefix = find_prefix(cond, B);
  const bool reused = prefix != nullptr && B == 2;
  const Tensor logits = reused ? t3_.prefill_cached(cond, text_tokens, s.cfg_weight, prefix->kv.data(), &T)
                               : t3_.prefill(cond, text_tokens, s.cfg_weight, &T);
  const float* c = logits.ptr<float>();
  const float* u = B == 2 ? c + c_.speech_vocab : nullptr;
  const int32_t bos = c_.start_speech_token;
  const bool any = sampler->process(c, u, &bos, 1);
  const int32_t tok = any ? sampler->pick() : -1;
  CBX_CHECK(tok >= 0, "t3 mtl: every processed logit is -inf at step 0 (non-finite logits?)");

  const int64_t P = t3_.cond_len(cond);
  CBX_CHECK(T > P && T - P <= slot_rows_, "t3 mtl batch: prompt of %lld positions, prefix %lld, slot %lld",
            (long long)T, (long long)P, (long long)slot_rows_);
  if (!reused) prefix = keep_prefix(cond, B, P);
  CBX_CHECK(prefix->rows == P, "t3 mtl batch: held prefix of %lld positions, the conditioning has %lld",
            (long long)prefix->rows, (long long)P);

  // The rows' text + BOS keys/values, backbone positions [P, T) of sequence b -> request slot
  // 2q + b (the prefix positions [0, P) are the shared copy's).
  const size_t rb = dtype_row_bytes(llama_.kv_type(), c_.head_dim);
  for (int64_t b = 0; b < B; ++b)
    for (int l = 0; l < n_layer_; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        const Tensor& cache = kv ? llama_.v_cache(l) : llama_.k_cache(l);
        for (int64_t h = 0; h < n_kv_head_; ++h)
          std::memcpy(slot_head(2 * q + int(b), l, kv, h),
                      static_cast<const uint8_t*>(cache.data) + (b * n_kv_head_ + h) * cache.stride[0] + P * rb,
                      size_t(T - P) * rb);
      }
  r.active = true;
  r.prefix = std::move(prefix);
  r.prefix_reused = reused;
  r.ignore_eos = ignore_eos;
  r.n_rows = B;
  r.sampler = std::move(sampler);
  r.history.assign(1, bos);
  r.history.push_back(tok);
  r.out.assign(1, tok);
  r.limit = max_new;
  r.prompt_len = T;
  r.kv_sum = 0;
  r.st = T3MtlStats{};
  r.st.n_rows = B;
  r.st.prompt_len = T;
  r.st.weight_bytes_per_step = double(t3_llama_decode_weight_bytes(llama_.weights()));
  r.finished = r.all_inf = false;
  if (tok == c_.stop_speech_token && !ignore_eos) r.finished = true;
  if (max_new == 1) {
    r.finished = true;
    r.st.hit_limit = !ignore_eos;
  }
  r.st.prefill_ms = now_ms() - t0;
  return q;
}

void T3MtlBatch::release(int req) {
  check_req(req);
  Req& r = reqs_[size_t(req)];
  r.active = r.finished = false;
  r.sampler.reset();
  r.prefix.reset();
  trim_idle_prefixes();
}

T3MtlStats T3MtlBatch::stats(int req) const {
  check_req(req);
  const Req& r = reqs_[size_t(req)];
  T3MtlStats st = r.st;
  st.n_steps = int64_t(r.out.size());
  st.kv_bytes_per_step = st.n_decode > 0 ? r.kv_sum / double(st.n_decode) : 0.0;
  return st;
}

int T3MtlBatch::step() {
  step_reqs_.clear();
  row_req_.clear();
  row_seq_.clear();
  row_pos_.clear();
  for (int q = 0; q < max_batch_; ++q) {
    const Req& r = reqs_[size_t(q)];
    if (!r.active || r.finished) continue;
    step_reqs_.push_back(q);
    for (int64_t b = 0; b < r.n_rows; ++b) {
      row_req_.push_back(q);
      row_seq_.push_back(int(b));
      // Token i (the last one) is fed at KV position prompt_len + i.
      row_pos_.push_back(r.prompt_len + int64_t(r.out.size()) - 1);
    }
  }
  const int n = int(step_reqs_.size());
  if (n == 0) return 0;
  const double t0 = now_ms();
  decode(int(row_req_.size()));
  const int64_t V = c_.speech_vocab;
  const size_t es = type_traits(llama_.kv_type()).block_bytes;
  // generate's loop body after the forward, per request.
  int row = 0;
  for (int i = 0; i < n; ++i) {
    Req& r = reqs_[size_t(step_reqs_[size_t(i)])];
    const int64_t n_past = r.prompt_len + int64_t(r.out.size());  // after the forward, as generate counts
    r.kv_sum += double(size_t(2 * n_layer_) * size_t(r.n_rows) * size_t(n_kv_head_) * size_t(n_past) *
                       size_t(c_.head_dim) * es);
    ++r.st.n_decode;
    const float* c = logits_.ptr<float>() + int64_t(row) * V;
    const float* u = r.n_rows == 2 ? c + V : nullptr;
    row += int(r.n_rows);
    const bool any = r.sampler->process(c, u, r.history.data(), int64_t(r.history.size()));
    const int32_t tok = any ? r.sampler->pick() : -1;
    if (tok < 0) {
      // generate throws here; a batch cannot, so the request ends with what it has.
      r.finished = r.all_inf = true;
      continue;
    }
    r.out.push_back(tok);
    r.history.push_back(tok);
    if (tok == c_.stop_speech_token && !r.ignore_eos) {
      r.finished = true;
    } else if (int64_t(r.out.size()) == r.limit) {
      r.finished = true;
      r.st.hit_limit = !r.ignore_eos;
    }
  }
  const double dt = now_ms() - t0;
  for (int i = 0; i < n; ++i) reqs_[size_t(step_reqs_[size_t(i)])].st.decode_ms += dt;
  return n;
}

// One decode step of activation rows [0, nr): T3Llama::decode_fused with a position and KV
// slot per row. Every per-row computation is the fused decode's (same kernels, same order);
// the weight rows are read once for all rows.
void T3MtlBatch::decode(int nr) {
  const T3LlamaWeights& w = llama_.weights();
  const int64_t d = c_.n_embd, H = c_.n_head, Hkv = c_.n_kv_head, D = c_.head_dim, ff = c_.n_ff, V = c_.speech_vocab;
  const int64_t group = H / Hkv, half = D / 2;
  const float eps = c_.norm_eps;
  const DType kvt = llama_.kv_type();
  const size_t rb = dtype_row_bytes(kvt, D), es = type_traits(kvt).block_bytes;
  // Inputs: the fed-back token of each request (generate: speech_emb[tok] + speech_pos[k + 1],
  // the same row for both of its sequences).
  const int n = int(step_reqs_.size());
  for (int i = 0; i < n; ++i) {
    const Req& r = reqs_[size_t(step_reqs_[size_t(i)])];
    CBX_CHECK(r.prompt_len + int64_t(r.out.size()) <= max_ctx_, "t3 mtl batch: request %d past the %lld positions",
              step_reqs_[size_t(i)], (long long)max_ctx_);
    ids_.ptr<int32_t>()[i] = r.out.back();
    pos_ids_.ptr<int32_t>()[i] = int32_t(r.out.size());
  }
  {
    Tensor ids = slice(ids_, 0, 0, n), pos = slice(pos_ids_, 0, 0, n);
    Tensor emb = slice(emb_, 0, 0, n), pe = slice(pe_, 0, 0, n);
    get_rows(t3_.speech_emb_table(), ids, emb);
    get_rows(t3_.speech_pos_table(), pos, pe);
    add(pool_, emb, pe, emb);
    int row = 0;
    for (int i = 0; i < n; ++i)
      for (int64_t b = 0; b < reqs_[size_t(step_reqs_[size_t(i)])].n_rows; ++b)
        std::memcpy(x_.ptr<float>() + int64_t(row++) * d, emb.row(i), size_t(d) * 4);
  }
  // Per row: RoPE angles as the fused decode forms them (f32 position x f32 inv_freq).
  const std::vector<float>& inv_freq = llama_.inv_freq();
  for (int b = 0; b < nr; ++b) {
    float* cs = rope_.ptr<float>() + int64_t(b) * D;
    const float p = float(row_pos_[size_t(b)]);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq[size_t(i)];
      cs[i] = std::cos(a);
      cs[half + i] = std::sin(a);
    }
  }
  // Per row: q / out views [H, 1, D], its prefix (the shared copy, [layer][K, V][H_kv][P][D])
  // and K / V views per layer of the prefix [H_kv, P, D] and of its slot [H_kv, pos + 1 - P, D].
  struct View {
    Tensor q, o;
    const Prefix* prefix = nullptr;
  };
  View views[128];  // 2 * max_batch rows
  const int64_t hsd[3] = {H, 1, D}, hst[3] = {D * 4, H * D * 4, 4};
  const Tensor slots = make_tensor(kvt, {int64_t(slot_bytes_ / es)}, slots_.get(), slot_bytes_);
  const int64_t kv_st[3] = {int64_t(head_bytes_), int64_t(rb), int64_t(es)};
  for (int b = 0; b < nr; ++b) {
    View& v = views[b];
    v.q = make_view(q_, 3, hsd, hst, size_t(b) * size_t(H * D) * 4);
    v.o = make_view(att_, 3, hsd, hst, size_t(b) * size_t(H * D) * 4);
    v.prefix = reqs_[size_t(row_req_[size_t(b)])].prefix.get();
    const int64_t P = v.prefix->rows, own = row_pos_[size_t(b)] + 1 - P;
    CBX_CHECK(own >= 1 && own <= slot_rows_, "t3 mtl batch: row %d at position %lld, prefix %lld, slot %lld", b,
              (long long)row_pos_[size_t(b)], (long long)P, (long long)slot_rows_);
    const int s = 2 * row_req_[size_t(b)] + row_seq_[size_t(b)];
    const Tensor pre = make_tensor(kvt, {int64_t(v.prefix->kv.size() / es)}, const_cast<uint8_t*>(v.prefix->kv.data()),
                                   v.prefix->kv.size());
    const int64_t pshape[3] = {Hkv, P, D}, pst[3] = {int64_t(size_t(P) * rb), int64_t(rb), int64_t(es)};
    const int64_t oshape[3] = {Hkv, own, D};
    for (int l = 0; l < n_layer_; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        Tensor* t = &kv_views_[(size_t(b) * size_t(n_layer_) + size_t(l)) * 4 + size_t(kv) * 2];
        t[0] = make_view(pre, 3, pshape, pst, int64_t((size_t(l) * 2 + size_t(kv)) * size_t(Hkv) * size_t(P) * rb));
        t[1] = make_view(slots, 3, oshape, kv_st, slot_head(s, l, kv, 0) - slots_.get());
      }
  }
  // [b][l][K prefix, K own, V prefix, V own]
  auto kvv = [&](int b, int l, int i) -> const Tensor& {
    return kv_views_[(size_t(b) * size_t(n_layer_) + size_t(l)) * 4 + size_t(i)];
  };
  AttentionParams ap;
  ap.causal = true;
  // Rows grouped by prefix (one buffer, one length), at most kAttnSplitMaxQueries a group: a
  // group's rows go through attention together, each prefix row read once per head for all of
  // them. Group g is rows order[gs[g] .. gs[g + 1]).
  int order[128], gs[129], ng = 0;
  {
    bool taken[128] = {};
    int at = 0;
    for (int b = 0; b < nr; ++b) {
      if (taken[b]) continue;
      gs[ng++] = at;
      int in_group = 0;
      for (int c = b; c < nr; ++c) {
        if (taken[c] || views[c].prefix != views[b].prefix) continue;
        if (in_group == kAttnSplitMaxQueries) {
          gs[ng++] = at;
          in_group = 0;
        }
        taken[c] = true;
        order[at++] = c;
        ++in_group;
      }
    }
    gs[ng] = at;
  }
  // One group's queries at layer l (q / out views, own K / V, causal end per row).
  auto group_queries = [&](int g, int l, AttnSplitQuery* qa) {
    for (int i = gs[g]; i < gs[g + 1]; ++i) {
      const int b = order[i];
      qa[i - gs[g]] = AttnSplitQuery{&views[b].q, &kvv(b, l, 1), &kvv(b, l, 3), &views[b].o, row_pos_[size_t(b)]};
    }
  };
  // Nothing may throw inside the run: check every group's attention call here on an empty head
  // range (every layer's views have the same shapes and strides).
  for (int g = 0; g < ng; ++g) {
    AttnSplitQuery qa[kAttnSplitMaxQueries];
    group_queries(g, 0, qa);
    const int b0 = order[gs[g]];
    attention_part_split_multi(0, 1, kvv(b0, 0, 0), kvv(b0, 0, 2), qa, gs[g + 1] - gs[g], ap, 0, 0);
  }

  const int nt = pool_.size();
  for (int l = 0; l < n_layer_; ++l) {
    splits_[size_t(3 * l)].reset(llama_.layer_rows(l, 3).rows(), nt, 16);
    splits_[size_t(3 * l + 1)].reset(llama_.layer_rows(l, 4).rows(), nt, 16);
    splits_[size_t(3 * l + 2)].reset(llama_.layer_rows(l, 6).rows(), nt, 16);
  }
  splits_[size_t(3 * n_layer_)].reset(llama_.head_rows().rows(), nt, 16);
  const int64_t R = 2 * max_batch_;
  float* xr = x_.ptr<float>();
  float* qr = q_.ptr<float>();
  float* kr = k_.ptr<float>();
  float* vr = v_.ptr<float>();
  float* ar = att_.ptr<float>();
  float* gr = g_.ptr<float>();
  float* ur = u_.ptr<float>();
  float* lr = logits_.ptr<float>();
  const float* rope = rope_.ptr<float>();

  pool_.run([&](int ith, int nth) {
    float* h = thread_h_ + size_t(ith) * size_t(R * d);
    float* tmp = thread_tmp_ + size_t(ith) * size_t(R * d);
    uint8_t* abuf = thread_act_ + size_t(ith) * size_t(R) * act_stride_;
    auto claim_rows = [&](int phase, const RowLinear& r, auto&& fn) {
      splits_[size_t(phase)].run(ith, 64, std::max<int64_t>(16, (r.rows() + 1023) / 1024 * 16), fn);
    };
    int64_t g0, g1;
    ThreadPool::split(Hkv, ith, nth, &g0, &g1);
    size_t as = 0;
    const void* a = nullptr;
    for (int l = 0; l < n_layer_; ++l) {
      const T3LlamaLayer& L = w.layers[size_t(l)];
      const RowLinear& Rq = llama_.layer_rows(l, 0);
      const RowLinear& Rk = llama_.layer_rows(l, 1);
      const RowLinear& Rv = llama_.layer_rows(l, 2);
      const RowLinear& Ro = llama_.layer_rows(l, 3);
      const RowLinear& Rg = llama_.layer_rows(l, 4);
      const RowLinear& Ru = llama_.layer_rows(l, 5);
      const RowLinear& Rd = llama_.layer_rows(l, 6);
      // input_layernorm, then q/k/v of this thread's KV heads (and their query heads), RoPE,
      // K/V into each row's slot, attention of those heads per row.
      for (int b = 0; b < nr; ++b) row_rms_norm(xr + b * d, h + b * d, d, L.attn_norm, eps);
      a = Rq.act_rows(h, d, nr, abuf, &as);
      Rq.run_rows(g0 * group * D, g1 * group * D, a, as, nr, qr, H * D, RowEpilogue::Store);
      if (!Rk.same_act(Rq)) a = Rk.act_rows(h, d, nr, abuf, &as);
      Rk.run_rows(g0 * D, g1 * D, a, as, nr, kr, Hkv * D, RowEpilogue::Store);
      if (!Rv.same_act(Rk)) a = Rv.act_rows(h, d, nr, abuf, &as);
      Rv.run_rows(g0 * D, g1 * D, a, as, nr, vr, Hkv * D, RowEpilogue::Store);
      for (int b = 0; b < nr; ++b) {
        const float* cs = rope + b * D;
        const float* sn = cs + half;
        const int s = 2 * row_req_[size_t(b)] + row_seq_[size_t(b)];
        const size_t at = size_t(row_pos_[size_t(b)] - views[b].prefix->rows) * rb;
        for (int64_t hh = g0 * group; hh < g1 * group; ++hh) row_rope(qr + b * H * D + hh * D, half, cs, sn);
        for (int64_t hk = g0; hk < g1; ++hk) {
          float* kh = kr + b * Hkv * D + hk * D;
          row_rope(kh, half, cs, sn);
          row_store(kh, slot_head(s, l, 0, hk) + at, kvt, D);
          row_store(vr + b * Hkv * D + hk * D, slot_head(s, l, 1, hk) + at, kvt, D);
        }
      }
      if (g1 > g0)
        for (int g = 0; g < ng; ++g) {
          AttnSplitQuery qa[kAttnSplitMaxQueries];
          group_queries(g, l, qa);
          const int b0 = order[gs[g]];
          attention_part_split_multi(0, 1, kvv(b0, l, 0), kvv(b0, l, 2), qa, gs[g + 1] - gs[g], ap, g0 * group,
                                     g1 * group);
        }
      pool_.barrier();
      // x += o_proj(att)
      a = Ro.act_rows(ar, H * D, nr, abuf, &as);
      claim_rows(3 * l, Ro,
                 [&](int64_t m0, int64_t m1) { Ro.run_rows(m0, m1, a, as, nr, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
      // g = silu(gate_proj(h)) * up_proj(h), h = post_attention_layernorm(x)
      for (int b = 0; b < nr; ++b) row_rms_norm(xr + b * d, h + b * d, d, L.ffn_norm, eps);
      const void* ag = Rg.act_rows(h, d, nr, abuf, &as);
      const size_t ags = as;
      const void* au = ag;
      size_t aus = ags;
      if (!Ru.same_act(Rg)) au = Ru.act_rows(h, d, nr, thread_act_ + size_t(nth + ith) * size_t(R) * act_stride_, &aus);
      claim_rows(3 * l + 1, Rg, [&](int64_t m0, int64_t m1) {
        Rg.run_rows(m0, m1, ag, ags, nr, gr, ff, RowEpilogue::Store);
        Ru.run_rows(m0, m1, au, aus, nr, ur, ff, RowEpilogue::Store);
        for (int b = 0; b < nr; ++b) row_silu_mul(gr + b * ff + m0, ur + b * ff + m0, m1 - m0);
      });
      pool_.barrier();
      // x += down_proj(g)
      a = Rd.act_rows(gr, ff, nr, abuf, &as);
      claim_rows(3 * l + 2, Rd,
                 [&](int64_t m0, int64_t m1) { Rd.run_rows(m0, m1, a, as, nr, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
    }
    for (int b = 0; b < nr; ++b) row_rms_norm(xr + b * d, h + b * d, d, w.norm, eps);
    const RowLinear& head = llama_.head_rows();
    a = head.act_rows(h, d, nr, abuf, &as);
    claim_rows(3 * n_layer_, head,
               [&](int64_t m0, int64_t m1) { head.run_rows(m0, m1, a, as, nr, lr, V, RowEpilogue::Store); });
  });
}

}  // namespace cbx
