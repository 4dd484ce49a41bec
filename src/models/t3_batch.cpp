#include "models/t3_batch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "core/arena_plan.h"
#include "core/error.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/row_linear.h"

namespace cbx {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Voice prefixes kept with no row using them (the most recent ones), so that a server's voice
// is not copied again for every request.
constexpr size_t kIdlePrefixes = 2;
}  // namespace

T3Batch::T3Batch(T3Turbo& turbo, ThreadPool& pool, int max_batch)
    : turbo_(turbo), gpt_(turbo.backbone()), c_(turbo.config().t3), pool_(pool), max_batch_(max_batch) {
  CBX_CHECK(max_batch >= 1 && max_batch <= 64, "t3 batch: max_batch %d outside 1 .. 64", max_batch);
  const int64_t d = c_.n_embd, H = c_.n_head, D = c_.head_dim, ff = c_.n_ff, V = c_.speech_vocab;
  // A row's own positions: text + BOS (<= the backbone's prefill rows less the speaker row),
  // the prefill token and max_new decoded ones.
  slot_rows_ = gpt_.max_batch() - 1 + 1 + turbo.max_new();
  head_bytes_ = size_t(slot_rows_) * dtype_row_bytes(gpt_.kv_type(), D);
  head_bytes_ = (head_bytes_ + 63) / 64 * 64;
  slot_bytes_ = size_t(max_batch) * size_t(c_.n_layer) * 2 * size_t(H) * head_bytes_;
  slots_.reset(new uint8_t[slot_bytes_]);  // not touched here: pages become resident as rows are written
  rows_.resize(size_t(max_batch));
  for (Row& r : rows_) r.tokens.reserve(size_t(turbo.max_new()) + 2);

  const int nt = pool_.size();
  act_stride_ = gpt_.act_stride();
  const int64_t B = max_batch;
  // Every buffer is taken here, once: the same calls size the arena on a plan, then allocate.
  auto buffers = [&](auto& a) {
    ids_ = a.alloc(DType::I32, {B}, "t3 batch token ids");
    pos_ = a.alloc(DType::I32, {B}, "t3 batch positions");
    emb_ = a.alloc(DType::F32, {B, d}, "t3 batch token embeddings");
    pe_ = a.alloc(DType::F32, {B, d}, "t3 batch wpe rows");
    x_ = a.alloc(DType::F32, {B, d}, "t3 batch x");
    qkv_ = a.alloc(DType::F32, {B, 3 * d}, "t3 batch qkv");
    att_ = a.alloc(DType::F32, {B, d}, "t3 batch attention");
    f1_ = a.alloc(DType::F32, {B, ff}, "t3 batch ffn");
    logits_ = a.alloc(DType::F32, {B, V}, "t3 batch logits");
    thread_h_ = a.alloc(DType::F32, {nt, B * d}, "t3 batch norm rows");
    thread_tmp_ = a.alloc(DType::F32, {nt, B * d}, "t3 batch residual partials");
    thread_act_ = static_cast<uint8_t*>(a.alloc_bytes(size_t(nt * B) * act_stride_ + 64, 64, "t3 batch act"));
  };
  ArenaPlan plan;
  buffers(plan);
  arena_.reserve(plan.bytes());
  buffers(arena_);
  for (int i = 0; i < 4 * c_.n_layer + 1; ++i) splits_.emplace_back(nt);
  step_rows_.reserve(size_t(max_batch));
  kv_views_.resize(size_t(max_batch) * size_t(c_.n_layer) * 4);
  prefixes_.reserve(size_t(max_batch) + kIdlePrefixes + 1);
}

uint8_t* T3Batch::slot_head(int s, int l, int kv, int64_t h) const {
  const size_t i = ((size_t(s) * size_t(c_.n_layer) + size_t(l)) * 2 + size_t(kv)) * size_t(c_.n_head) + size_t(h);
  return slots_.get() + i * head_bytes_;
}

void T3Batch::check_row(int row) const {
  CBX_CHECK(row >= 0 && row < max_batch_ && rows_[size_t(row)].active, "t3 batch: row %d is not active", row);
}
bool T3Batch::active(int row) const { return row >= 0 && row < max_batch_ && rows_[size_t(row)].active; }
bool T3Batch::finished(int row) const { return active(row) && rows_[size_t(row)].finished; }
const std::vector<int32_t>& T3Batch::tokens(int row) const {
  check_row(row);
  return rows_[size_t(row)].tokens;
}
int T3Batch::n_active() const {
  int n = 0;
  for (const Row& r : rows_) n += r.active;
  return n;
}
int T3Batch::n_decoding() const {
  int n = 0;
  for (const Row& r : rows_) n += r.active && !r.finished;
  return n;
}
size_t T3Batch::n_prefixes() const { return prefixes_.size(); }

std::shared_ptr<const T3Batch::Prefix> T3Batch::prefix_for(const float* speaker_emb, int64_t n_speaker,
                                                           const int32_t* prompt_tokens, int64_t n_prompt) {
  auto same = [&](const Prefix& p) {
    return int64_t(p.speaker.size()) == n_speaker && int64_t(p.tokens.size()) == n_prompt &&
           std::memcmp(p.speaker.data(), speaker_emb, size_t(n_speaker) * 4) == 0 &&
           (n_prompt == 0 || std::memcmp(p.tokens.data(), prompt_tokens, size_t(n_prompt) * 4) == 0);
  };
  for (size_t i = 0; i < prefixes_.size(); ++i)
    if (same(*prefixes_[i])) {
      std::shared_ptr<const Prefix> p = prefixes_[i];
      prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(i));
      prefixes_.push_back(p);  // most recently used last
      return p;
    }
  // The prefill just kept this voice's prefix in the T3Turbo: copy it once for every row of it.
  const T3Turbo::KeptPrefix kp = turbo_.kept_prefix();
  CBX_CHECK(kp.rows == 1 + n_prompt && kp.n_speaker == n_speaker && kp.n_prompt == n_prompt &&
                std::memcmp(kp.speaker, speaker_emb, size_t(n_speaker) * 4) == 0 &&
                (n_prompt == 0 || std::memcmp(kp.tokens, prompt_tokens, size_t(n_prompt) * 4) == 0),
            "t3 batch: the T3 did not keep the voice prefix (the batch needs T3TurboOptions::prefix_cache and no "
            "capture)");
  auto p = std::make_shared<Prefix>();
  p->speaker.assign(speaker_emb, speaker_emb + n_speaker);
  p->tokens.assign(prompt_tokens, prompt_tokens + n_prompt);
  p->rows = kp.rows;
  p->kv.reset(new uint8_t[kp.kv_bytes]);
  std::memcpy(p->kv.get(), kp.kv, kp.kv_bytes);
  // Drop the oldest prefixes no row uses beyond kIdlePrefixes.
  size_t idle = 0;
  for (const auto& q : prefixes_) idle += q.use_count() == 1;
  for (size_t i = 0; i < prefixes_.size() && idle >= kIdlePrefixes;) {
    if (prefixes_[i].use_count() == 1) {
      prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(i));
      --idle;
    } else {
      ++i;
    }
  }
  prefixes_.push_back(p);
  return p;
}

int T3Batch::start(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
                   const int32_t* prompt_tokens, int64_t n_prompt, const SamplerParams& sp, int64_t max_new) {
  if (max_new < 0) max_new = turbo_.max_new();
  CBX_CHECK(max_new <= turbo_.max_new(), "t3 batch: %lld new tokens requested, %lld reserved", (long long)max_new,
            (long long)turbo_.max_new());
  int s = 0;
  while (s < max_batch_ && rows_[size_t(s)].active) ++s;
  CBX_CHECK(s < max_batch_, "t3 batch: all %d rows are in use", max_batch_);
  Row& r = rows_[size_t(s)];
  const double t0 = now_ms();
  auto sampler = std::make_unique<TurboSampler>(c_.speech_vocab, sp);
  Tensor embeds = turbo_.build_prompt(text_ids, n_text, speaker_emb, n_speaker, prompt_tokens, n_prompt);
  const int64_t L = embeds.shape[0], P = 1 + n_prompt;
  bool reused = false;
  const Tensor& logits = turbo_.prefill(embeds, speaker_emb, n_speaker, prompt_tokens, n_prompt, &reused);
  const int32_t bos = c_.start_speech_token;
  // As T3Turbo::generate: the prefill token without the all -inf check or the EOS stop.
  const bool any = sampler->process(logits.ptr<float>(), &bos, 1);
  const int32_t tok = any ? sampler->pick() : -1;
  CBX_CHECK(tok >= 0, "t3 turbo: every processed logit of the prefill is -inf");
  std::shared_ptr<const Prefix> prefix = prefix_for(speaker_emb, n_speaker, prompt_tokens, n_prompt);

  // The text + BOS rows' keys/values, backbone cache rows [P, L) -> slot rows [0, L - P).
  const size_t rb = dtype_row_bytes(gpt_.kv_type(), c_.head_dim);
  for (int l = 0; l < c_.n_layer; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const Tensor& cache = kv ? gpt_.v_cache(l) : gpt_.k_cache(l);
      for (int64_t h = 0; h < c_.n_head; ++h)
        std::memcpy(slot_head(s, l, kv, h),
                    static_cast<const uint8_t*>(cache.data) + h * cache.stride[0] + P * cache.stride[1],
                    size_t(L - P) * rb);
    }
  r.active = true;
  r.finished = max_new == 0;
  r.prefix = std::move(prefix);
  r.sampler = std::move(sampler);
  r.tokens.clear();
  r.tokens.push_back(tok);
  r.pos = L;
  r.max_new = max_new;
  r.n_decode = 0;
  r.prompt_len = L;
  r.stopped_eos = r.stopped_all_inf = false;
  r.prefix_reused = reused;
  r.prefill_ms = now_ms() - t0;
  r.decode_ms = 0;
  return s;
}

void T3Batch::release(int row) {
  check_row(row);
  Row& r = rows_[size_t(row)];
  r.active = r.finished = false;
  r.prefix.reset();
  r.sampler.reset();
}

T3TurboResult T3Batch::result(int row) const {
  check_row(row);
  const Row& r = rows_[size_t(row)];
  CBX_CHECK(r.finished, "t3 batch: row %d has not finished", row);
  T3TurboResult o;
  o.tokens = r.tokens;
  if (!o.tokens.empty() && o.tokens.back() == c_.stop_speech_token) o.tokens.pop_back();
  o.speech_tokens = turbo_.postprocess(o.tokens);
  o.stopped_eos = r.stopped_eos;
  o.stopped_all_inf = r.stopped_all_inf;
  o.prompt_len = r.prompt_len;
  o.prefix_reused = r.prefix_reused;
  o.n_decode = r.n_decode;
  o.prefill_ms = r.prefill_ms;
  o.decode_ms = r.decode_ms;
  return o;
}

int T3Batch::step() {
  step_rows_.clear();
  for (int s = 0; s < max_batch_; ++s)
    if (rows_[size_t(s)].active && !rows_[size_t(s)].finished) step_rows_.push_back(s);
  const int n = int(step_rows_.size());
  if (n == 0) return 0;
  const double t0 = now_ms();
  decode(step_rows_.data(), n);
  const float* lg = logits_.ptr<float>();
  // T3Turbo::generate's loop body, per row. Rows are independent (each its own sampler and
  // tokens): with several rows the pool's threads take them round robin instead of one thread
  // sampling them all; an error is rethrown here, the first row's.
  std::exception_ptr err[64];
  auto sample_row = [&](int b) {
    try {
      advance_row(b, lg + int64_t(b) * c_.speech_vocab);
    } catch (...) {
      err[b] = std::current_exception();
    }
  };
  if (n > 1 && pool_.size() > 1)
    pool_.run([&](int ith, int nth) {
      for (int b = ith; b < n; b += nth) sample_row(b);
    });
  else
    for (int b = 0; b < n; ++b) sample_row(b);
  for (int b = 0; b < n; ++b)
    if (err[b]) std::rethrow_exception(err[b]);
  const double dt = now_ms() - t0;
  for (int b = 0; b < n; ++b) rows_[size_t(step_rows_[size_t(b)])].decode_ms += dt;
  return n;
}

void T3Batch::advance_row(int b, const float* logits) {
  Row& r = rows_[size_t(step_rows_[size_t(b)])];
  ++r.pos;
  ++r.n_decode;
  const int32_t tok = r.sampler->sample(logits, r.tokens.data(), int64_t(r.tokens.size()));
  if (tok < 0) {
    r.stopped_all_inf = r.finished = true;
  } else {
    r.tokens.push_back(tok);
    if (tok == c_.stop_speech_token) r.stopped_eos = r.finished = true;
  }
  if (r.n_decode >= r.max_new) r.finished = true;
}

// One decode step of rows rows[0 .. n): T3Gpt2::decode_fused for n activation rows. Every
// per-row computation is the one-row step's (same kernels, same order); the weight rows are
// read once for all n rows.
void T3Batch::decode(const int* rows, int n) {
  const T3Gpt2Weights& w = turbo_.weights();
  const int64_t d = c_.n_embd, H = c_.n_head, D = c_.head_dim, ff = c_.n_ff, V = c_.speech_vocab;
  const DType kvt = gpt_.kv_type();
  const size_t rb = dtype_row_bytes(kvt, D);
  for (int b = 0; b < n; ++b) {
    const Row& r = rows_[size_t(rows[b])];
    ids_.ptr<int32_t>()[b] = r.tokens.back();
    pos_.ptr<int32_t>()[b] = int32_t(r.pos);
    CBX_CHECK(r.pos < gpt_.max_ctx(), "t3 batch: row %d at position %lld, the cache holds %lld", rows[b],
              (long long)r.pos, (long long)gpt_.max_ctx());
  }
  Tensor ids = slice(ids_, 0, 0, n), pos = slice(pos_, 0, 0, n);
  Tensor emb = slice(emb_, 0, 0, n), pe = slice(pe_, 0, 0, n), x = slice(x_, 0, 0, n);
  get_rows(w.speech_emb, ids, emb);
  get_rows(w.wpe, pos, pe);
  add(pool_, emb, pe, x);

  float* xr = x_.ptr<float>();
  float* qkvr = qkv_.ptr<float>();
  float* attr = att_.ptr<float>();
  float* f1r = f1_.ptr<float>();
  float* lr = logits_.ptr<float>();
  const int64_t hsd[3] = {H, 1, D};
  const int64_t q_st[3] = {D * 4, 3 * d * 4, 4};
  const int64_t o_st[3] = {D * 4, d * 4, 4};
  const int64_t kv_st[3] = {int64_t(head_bytes_), int64_t(rb), int64_t(type_traits(kvt).block_bytes)};
  // Per row: its q / out views, its prefix and own key counts (the prefix buffer is
  // [layer][K, V][H][P][D]: head stride P rows).
  struct View {
    Tensor q, o;
    int64_t P = 0, own = 0, pos = 0;
    const uint8_t* prefix = nullptr;
  };
  View views[64];
  for (int b = 0; b < n; ++b) {
    const Row& r = rows_[size_t(rows[b])];
    View& v = views[b];
    v.q = make_view(qkv_, 3, hsd, q_st, size_t(b) * size_t(3 * d) * 4);
    v.o = make_view(att_, 3, hsd, o_st, size_t(b) * size_t(d) * 4);
    v.P = r.prefix->rows;
    v.own = r.pos - v.P + 1;
    v.pos = r.pos;
    v.prefix = r.prefix->kv.get();
  }
  // Per row and layer: K and V views of its prefix and of its own rows, made (and checked) here.
  const size_t es = type_traits(kvt).block_bytes;
  const Tensor slots = make_tensor(kvt, {int64_t(slot_bytes_ / es)}, slots_.get(), slot_bytes_);
  for (int b = 0; b < n; ++b) {
    const View& v = views[b];
    const size_t pbytes = gpt_.kv_rows_bytes(v.P);
    const Tensor pre = make_tensor(kvt, {int64_t(pbytes / es)}, const_cast<uint8_t*>(v.prefix), pbytes);
    const int64_t pshape[3] = {H, v.P, D}, pst[3] = {int64_t(size_t(v.P) * rb), int64_t(rb), int64_t(es)};
    const int64_t oshape[3] = {H, v.own, D};
    for (int l = 0; l < c_.n_layer; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        Tensor* t = &kv_views_[(size_t(b) * size_t(c_.n_layer) + size_t(l)) * 4 + size_t(kv) * 2];
        t[0] = make_view(pre, 3, pshape, pst, int64_t((size_t(l) * 2 + size_t(kv)) * size_t(H) * size_t(v.P) * rb));
        t[1] = make_view(slots, 3, oshape, kv_st, slot_head(rows[b], l, kv, 0) - slots_.get());
      }
  }
  // [b][l][K prefix, K own, V prefix, V own]
  auto kvv = [&](int b, int l, int i) -> const Tensor& {
    return kv_views_[(size_t(b) * size_t(c_.n_layer) + size_t(l)) * 4 + size_t(i)];
  };
  AttentionParams ap;
  ap.causal = true;
  // Rows grouped by voice prefix (the same Prefix: one buffer, one length): a group's rows go
  // through attention together, each shared prefix row read once per head for all of them.
  // Group g is rows order[gs[g] .. gs[g + 1]).
  int order[64], gs[65], ng = 0;
  {
    bool taken[64] = {};
    int at = 0;
    for (int b = 0; b < n; ++b) {
      if (taken[b]) continue;
      gs[ng++] = at;
      for (int c = b; c < n; ++c)
        if (!taken[c] && views[c].prefix == views[b].prefix) taken[c] = true, order[at++] = c;
    }
    gs[ng] = at;
  }
  // One group's queries at layer l (q / out views, own K / V, causal end per row).
  auto group_queries = [&](int g, int l, AttnSplitQuery* qa) {
    for (int i = gs[g]; i < gs[g + 1]; ++i) {
      const int b = order[i];
      qa[i - gs[g]] = AttnSplitQuery{&views[b].q, &kvv(b, l, 1), &kvv(b, l, 3), &views[b].o, views[b].pos};
    }
  };
  // Nothing may throw inside the run: check every group's attention call here on an empty head
  // range (every layer's views have the same shapes and strides).
  for (int g = 0; g < ng; ++g) {
    AttnSplitQuery qa[64];
    group_queries(g, 0, qa);
    const int b0 = order[gs[g]];
    attention_part_split_multi(0, 1, kvv(b0, 0, 0), kvv(b0, 0, 2), qa, gs[g + 1] - gs[g], ap, 0, 0);
  }

  const int nt = pool_.size();
  for (int l = 0; l < c_.n_layer; ++l) {
    splits_[size_t(4 * l)].reset(H, nt, 1);
    for (int k = 1; k < 4; ++k) splits_[size_t(4 * l + k)].reset(gpt_.layer_rows(l, k).rows(), nt, 16);
  }
  splits_[size_t(4 * c_.n_layer)].reset(gpt_.head_rows().rows(), nt, 16);

  pool_.run([&](int ith, int nth) {
    (void)nth;
    float* h = thread_h_.ptr<float>() + int64_t(ith) * max_batch_ * d;
    float* tmp = thread_tmp_.ptr<float>() + int64_t(ith) * max_batch_ * d;
    uint8_t* abuf = thread_act_ + size_t(ith) * size_t(max_batch_) * act_stride_;
    auto claim_rows = [&](int phase, const RowLinear& r, auto&& fn) {
      splits_[size_t(phase)].run(ith, 64, std::max<int64_t>(16, (r.rows() + 1023) / 1024 * 16), fn);
    };
    size_t as = 0;
    for (int l = 0; l < c_.n_layer; ++l) {
      const T3Gpt2Layer& L = w.layers[size_t(l)];
      const RowLinear& Rqkv = gpt_.layer_rows(l, 0);
      const RowLinear& Rap = gpt_.layer_rows(l, 1);
      const RowLinear& Rfc = gpt_.layer_rows(l, 2);
      const RowLinear& Rpj = gpt_.layer_rows(l, 3);
      for (int b = 0; b < n; ++b) row_layer_norm(xr + b * d, h + b * d, d, L.ln_1_w, L.ln_1_b, c_.norm_eps);
      const void* a = Rqkv.act_rows(h, d, n, abuf, &as);
      // Per claimed head range: q, k, v of every row, their K/V into the slots, then the
      // attention head by head over the rows (a shared prefix head stays in cache).
      splits_[size_t(4 * l)].run(ith, 1, 1, [&](int64_t h0, int64_t h1) {
        for (int part = 0; part < 3; ++part)
          Rqkv.run_rows(part * d + h0 * D, part * d + h1 * D, a, as, n, qkvr, 3 * d, RowEpilogue::Store);
        for (int b = 0; b < n; ++b) {
          const int64_t at = views[b].own - 1;
          for (int64_t hh = h0; hh < h1; ++hh) {
            row_store(qkvr + b * 3 * d + d + hh * D, slot_head(rows[b], l, 0, hh) + size_t(at) * rb, kvt, D);
            row_store(qkvr + b * 3 * d + 2 * d + hh * D, slot_head(rows[b], l, 1, hh) + size_t(at) * rb, kvt, D);
          }
        }
        AttnSplitQuery qa[64];
        for (int g = 0; g < ng; ++g) group_queries(g, l, qa + gs[g]);
        for (int64_t hh = h0; hh < h1; ++hh)
          for (int g = 0; g < ng; ++g) {
            const int b0 = order[gs[g]];
            attention_part_split_multi(0, 1, kvv(b0, l, 0), kvv(b0, l, 2), qa + gs[g], gs[g + 1] - gs[g], ap, hh,
                                       hh + 1);
          }
      });
      pool_.barrier();
      // x += c_proj(att)
      a = Rap.act_rows(attr, d, n, abuf, &as);
      claim_rows(4 * l + 1, Rap,
                 [&](int64_t m0, int64_t m1) { Rap.run_rows(m0, m1, a, as, n, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
      // f1 = gelu(c_fc(ln_2(x)))
      for (int b = 0; b < n; ++b) row_layer_norm(xr + b * d, h + b * d, d, L.ln_2_w, L.ln_2_b, c_.norm_eps);
      a = Rfc.act_rows(h, d, n, abuf, &as);
      claim_rows(4 * l + 2, Rfc,
                 [&](int64_t m0, int64_t m1) { Rfc.run_rows(m0, m1, a, as, n, f1r, ff, RowEpilogue::GeluTanh); });
      pool_.barrier();
      // x += mlp.c_proj(f1)
      a = Rpj.act_rows(f1r, ff, n, abuf, &as);
      claim_rows(4 * l + 3, Rpj,
                 [&](int64_t m0, int64_t m1) { Rpj.run_rows(m0, m1, a, as, n, xr, d, RowEpilogue::AddTo, tmp); });
      pool_.barrier();
    }
    for (int b = 0; b < n; ++b) row_layer_norm(xr + b * d, h + b * d, d, w.ln_f_w, w.ln_f_b, c_.norm_eps);
    const RowLinear& head = gpt_.head_rows();
    const void* ah = head.act_rows(h, d, n, abuf, &as);
    claim_rows(4 * c_.n_layer, head,
               [&](int64_t m0, int64_t m1) { head.run_rows(m0, m1, ah, as, n, lr, V, RowEpilogue::Store); });
  });
}

}  // namespace cbx
