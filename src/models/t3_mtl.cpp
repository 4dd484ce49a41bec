#include "models/t3_mtl.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/arena.h"
#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "models/sampler.h"
#include "models/t3_cond_encoder.h"
#include "models/t3_llama.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace cbx {

MtlSamplerParams mtl_sampler_params(const T3MtlSampling& s) {
  MtlSamplerParams sp;
  sp.cfg_weight = s.cfg_weight;
  sp.temperature = s.temperature;
  sp.min_p = s.min_p;
  sp.top_p = s.top_p;
  sp.repetition_penalty = s.repetition_penalty;
  sp.greedy = s.greedy;
  sp.seed = s.seed;
  return sp;
}

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct T3Mtl::Impl {
  ModelConfig cfg;
  ThreadPool& pool;
  T3LlamaWeights lw;
  T3CondEncWeights cw;
  Tensor text_emb, speech_emb, text_pos,
      speech_pos;  // [Vt, d], [Vs, d], [max_text+2, d], [max_speech+4, d]
  std::unique_ptr<T3Llama> llama;
  std::unique_ptr<T3CondEncoder> cond_enc;
  int64_t max_new = 0, max_text = 0, max_prompt = 0, max_cond = 0;
  Arena arena;
  Tensor prompt;                 // [max(2 * max_tokens, max_cond + max_prompt), d]: both sequences; the voice
                                 // prompt's embeddings sit in its last rows while the cond tokens are made
  Tensor prompt_pe;              // [max(max_prompt, max_text + 2), d] speech/text positional rows
  Tensor ids;                    // I32 [max(max_prompt, max_text + 2)]
  Tensor tok;                    // [2, d] the fed-back token, one row per sequence
  Tensor tok_pe;                 // [1, d]
  Tensor tok_id, pos_id;         // I32 [1]
  std::vector<int32_t> history;  // BOS + generated
  std::vector<int32_t> out;
  std::vector<int32_t> txt;  // SOT text EOT
  T3MtlStepFn on_step;

  Impl(const GgufFile& f, const ModelConfig& c, ThreadPool& p, const T3MtlLoadParams& lp);
  // Rows [0, n_cond) of dst = cond tokens; returns n_cond.
  int64_t encode_cond(const T3MtlCond& cond, Tensor dst_rows);
  void embed_rows(const Tensor& table, const int32_t* id, int64_t n, const Tensor& pos_table, int64_t pos0, Tensor dst,
                  bool zero_tokens);
  // Checks the conditioning prompt tokens; returns their count.
  int64_t check_prompt(const T3MtlCond& cond) const;
  // Checks the inputs, then runs generate's prefill of B rows (1 or 2); returns the logits.
  // prefix_kv (B = 2 only): the conditioning prefix's keys/values (T3Llama::save_prefix),
  // loaded instead of computed.
  Tensor prefill(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, int64_t B, int64_t* prompt_len,
                 const void* prefix_kv = nullptr);
};

T3Mtl::Impl::Impl(const GgufFile& f, const ModelConfig& c, ThreadPool& p, const T3MtlLoadParams& lp) : cfg(c), pool(p) {
  const T3Config& t = cfg.t3;
  CBX_CHECK(cfg.variant == Variant::Mtl, "%s: T3 Multilingual needs an mtl model, got variant '%s'", f.path().c_str(),
            variant_name(cfg.variant));
  CBX_CHECK(t.learned_pos_emb, "%s: the Multilingual T3 needs learned text/speech position embeddings",
            f.path().c_str());
  bind_t3_llama(f, t, lw);
  bind_t3_cond_enc(f, t, cw);
  const int64_t d = t.n_embd;
  using K = T3WeightKind;
  bind_t3_tensor(f, "t3.text_emb.weight", text_emb, {t.text_vocab, d}, K::Matrix, true);
  bind_t3_tensor(f, "t3.speech_emb.weight", speech_emb, {t.speech_vocab, d}, K::Matrix, true);
  bind_t3_tensor(f, "t3.text_pos_emb.emb.weight", text_pos, {int64_t(t.max_text_tokens) + 2, d}, K::Matrix, true);
  bind_t3_tensor(f, "t3.speech_pos_emb.emb.weight", speech_pos, {int64_t(t.max_speech_tokens) + 4, d}, K::Matrix, true);
  CBX_CHECK(t.start_speech_token >= 0 && t.start_speech_token < t.speech_vocab && t.stop_speech_token >= 0 &&
                t.stop_speech_token < t.speech_vocab && t.start_text_token >= 0 && t.start_text_token < t.text_vocab &&
                t.stop_text_token >= 0 && t.stop_text_token < t.text_vocab,
            "%s: start/stop tokens outside the vocabularies", f.path().c_str());

  max_new = lp.max_new_tokens >= 0 ? lp.max_new_tokens : cfg.pipeline.max_new_tokens;
  max_text = lp.max_text_tokens;
  max_prompt = std::max<int64_t>(t.cond_prompt_len, 1);
  CBX_CHECK(max_text > 0 && max_text <= t.max_text_tokens,
            "t3 mtl: max_text_tokens %lld outside 1..%d (text position table)", (long long)max_text, t.max_text_tokens);
  // Token k is fed back at speech position k + 1 (the last one is never fed).
  CBX_CHECK(max_new >= 1 && max_new <= int64_t(t.max_speech_tokens) + 3,
            "t3 mtl: max_new_tokens %lld outside 1..%d (speech position table)", (long long)max_new,
            t.max_speech_tokens + 3);
  CBX_CHECK(max_prompt <= int64_t(t.max_speech_tokens) + 4, "t3 mtl: prompt length %lld exceeds the speech positions",
            (long long)max_prompt);
  cond_enc = std::make_unique<T3CondEncoder>(t, cw, pool, max_prompt);
  max_cond = cond_enc->n_tokens(max_prompt);
  const int64_t max_tokens = max_cond + max_text + 2 + 2;  // cond, SOT text EOT, BOS BOS
  T3LlamaOptions o;
  o.max_tokens = max_tokens;
  o.max_ctx = max_tokens + max_new;
  o.n_rows = 2;
  o.kv_type = lp.kv_type;
  o.pack_planar = lp.pack_planar;
  o.on_packed = lp.on_packed;
  llama = std::make_unique<T3Llama>(t, lw, pool, o);

  const int64_t n_pe = std::max(max_prompt, max_text + 2);
  const int64_t n_rows = std::max(2 * max_tokens, max_cond + max_prompt);
  // Every buffer is taken here, once: the same calls size the arena on a plan, then allocate.
  auto buffers = [&](auto& a) {
    prompt = a.alloc(DType::F32, {n_rows, d}, "t3 mtl prompt");
    prompt_pe = a.alloc(DType::F32, {n_pe, d}, "t3 mtl positional rows");
    ids = a.alloc(DType::I32, {n_pe}, "t3 mtl ids");
    tok = a.alloc(DType::F32, {2, d}, "t3 mtl token embedding");
    tok_pe = a.alloc(DType::F32, {1, d}, "t3 mtl token position");
    tok_id = a.alloc(DType::I32, {1}, "t3 mtl token id");
    pos_id = a.alloc(DType::I32, {1}, "t3 mtl position id");
  };
  ArenaPlan plan;
  buffers(plan);
  arena.reserve(plan.bytes());
  buffers(arena);
  history.reserve(size_t(max_new) + 1);
  out.reserve(size_t(max_new));
  txt.reserve(size_t(max_text) + 2);
}

// dst [n, d] = table[id] (zeros when zero_tokens) + pos_table[pos0 .. pos0+n-1].
void T3Mtl::Impl::embed_rows(const Tensor& table, const int32_t* id, int64_t n, const Tensor& pos_table, int64_t pos0,
                             Tensor dst, bool zero_tokens) {
  Tensor idt = slice(ids, 0, 0, n);
  Tensor pe = slice(prompt_pe, 0, 0, n);
  for (int64_t i = 0; i < n; ++i) idt.ptr<int32_t>()[i] = int32_t(pos0 + i);
  get_rows(pos_table, idt, pe);
  if (zero_tokens) {
    copy_tensor(pool, pe, dst);
    return;
  }
  std::memcpy(idt.data, id, size_t(n) * 4);
  get_rows(table, idt, dst);
  add(pool, dst, pe, dst);
}

int64_t T3Mtl::Impl::check_prompt(const T3MtlCond& cond) const {
  const T3Config& t = cfg.t3;
  const int64_t P = int64_t(cond.cond_prompt_tokens.size());
  CBX_CHECK(P <= max_prompt, "t3 mtl: %lld conditioning prompt tokens (at most %lld)", (long long)P,
            (long long)max_prompt);
  for (int64_t i = 0; i < P; ++i) {
    const int32_t v = cond.cond_prompt_tokens[size_t(i)];
    CBX_CHECK(v >= 0 && v < t.speech_vocab, "t3 mtl: conditioning prompt token %d at %lld outside 0..%d", v,
              (long long)i, t.speech_vocab - 1);
  }
  return P;
}

int64_t T3Mtl::Impl::encode_cond(const T3MtlCond& cond, Tensor dst_rows) {
  const int64_t P = check_prompt(cond);
  const int64_t n = cond_enc->n_tokens(P);
  Tensor rows = slice(dst_rows, 0, 0, n);
  // The prompt embeddings go in the rows after the cond tokens (free until the text is written).
  Tensor pemb;
  if (P > 0) {
    pemb = slice(prompt, 0, prompt.shape[0] - P, P);
    embed_rows(speech_emb, cond.cond_prompt_tokens.data(), P, speech_pos, 0, pemb, false);
  }
  cond_enc->forward(cond.speaker_emb.data(), int64_t(cond.speaker_emb.size()), pemb, cond.exaggeration, rows);
  return n;
}

Tensor T3Mtl::Impl::prefill(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, int64_t B,
                            int64_t* prompt_len, const void* prefix_kv) {
  Impl& m = *this;
  const T3Config& t = m.cfg.t3;
  CBX_CHECK(int64_t(cond.speaker_emb.size()) == t.speaker_embed_size,
            "t3 mtl: speaker embedding has %zu values, expected %d", cond.speaker_emb.size(), t.speaker_embed_size);
  const int64_t Lt = int64_t(text_tokens.size());
  CBX_CHECK(Lt <= m.max_text, "t3 mtl: %lld text tokens (at most %lld)", (long long)Lt, (long long)m.max_text);
  for (int64_t i = 0; i < Lt; ++i) {
    const int32_t v = text_tokens[size_t(i)];
    CBX_CHECK(v >= 0 && v < t.text_vocab, "t3 mtl: text token %d at %lld outside 0..%d", v, (long long)i,
              t.text_vocab - 1);
  }
  // Sequence 0 = cond, 1 = uncond. They share the conditioning prefix, which is
  // run once (sequence 0) and copied to sequence 1's cache. Rows of m.prompt: [0, n_cond) the
  // prefix, then sequence 0's L2 = Lt + 4 remaining tokens, then sequence 1's (sequence-major,
  // as the second forward call takes them).
  CBX_CHECK(!prefix_kv || B == 2, "t3 mtl: a cached conditioning prefix needs the CFG pair (cfg_weight > 0)");
  const int64_t n_cond = prefix_kv ? m.cond_enc->n_tokens(m.check_prompt(cond)) : m.encode_cond(cond, m.prompt);
  const int64_t L2 = Lt + 2 + 2, T = n_cond + L2;
  *prompt_len = T;
  {
    std::vector<int32_t>& txt = m.txt;  // SOT text EOT
    txt.clear();
    txt.push_back(t.start_text_token);
    txt.insert(txt.end(), text_tokens.begin(), text_tokens.end());
    txt.push_back(t.stop_text_token);
    for (int64_t b = 0; b < B; ++b) {
      Tensor tail = slice(m.prompt, 0, n_cond + b * L2, L2);
      // The uncond sequence's text token embeddings are zero (positions kept), t3.py:113-119.
      m.embed_rows(m.text_emb, txt.data(), Lt + 2, m.text_pos, 0, slice(tail, 0, 0, Lt + 2), b == 1);
      const int32_t bos = t.start_speech_token;
      Tensor b0 = slice(tail, 0, Lt + 2, 1), b1 = slice(tail, 0, Lt + 3, 1);
      m.embed_rows(m.speech_emb, &bos, 1, m.speech_pos, 0, b0, false);
      copy_tensor(m.pool, b0, b1);  // the doubled BOS (t3.py:306-313)
    }
  }
  m.llama->reset();
  if (B == 1) return m.llama->forward(slice(m.prompt, 0, 0, T), 1);
  if (prefix_kv) {
    m.llama->load_prefix(n_cond, prefix_kv, 2);
  } else {
    m.llama->forward(slice(m.prompt, 0, 0, n_cond), 1);
    m.llama->copy_sequence(0, 1);
  }
  return m.llama->forward(slice(m.prompt, 0, n_cond, 2 * L2), 2);
}

T3Mtl::T3Mtl(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const T3MtlLoadParams& p)
    : impl_(std::make_unique<Impl>(f, c, pool, p)) {}

T3Mtl::~T3Mtl() = default;

void T3Mtl::set_step_callback(T3MtlStepFn fn) { impl_->on_step = std::move(fn); }
void T3Mtl::set_fused_decode(bool on) { impl_->llama->set_fused_decode(on); }
size_t T3Mtl::packed_weight_bytes() const { return impl_->llama->packed_weight_bytes(); }
int64_t T3Mtl::max_new_tokens() const { return impl_->max_new; }
const ModelConfig& T3Mtl::config() const { return impl_->cfg; }

Tensor T3Mtl::prefill(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, float cfg_weight,
                      int64_t* prompt_len) {
  int64_t T = 0;
  Tensor lg = impl_->prefill(cond, text_tokens, cfg_weight > 0.f ? 2 : 1, &T);
  if (prompt_len) *prompt_len = T;
  return lg;
}
Tensor T3Mtl::prefill_cached(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, float cfg_weight,
                             const void* prefix_kv, int64_t* prompt_len) {
  CBX_CHECK(prefix_kv, "t3 mtl: prefill_cached without a prefix");
  int64_t T = 0;
  Tensor lg = impl_->prefill(cond, text_tokens, cfg_weight > 0.f ? 2 : 1, &T, prefix_kv);
  if (prompt_len) *prompt_len = T;
  return lg;
}
int64_t T3Mtl::cond_len(const T3MtlCond& cond) const { return impl_->cond_enc->n_tokens(impl_->check_prompt(cond)); }
int64_t T3Mtl::max_cond_len() const { return impl_->max_cond; }
T3Llama& T3Mtl::backbone() { return *impl_->llama; }
const Tensor& T3Mtl::speech_emb_table() const { return impl_->speech_emb; }
const Tensor& T3Mtl::speech_pos_table() const { return impl_->speech_pos; }
int64_t T3Mtl::max_prefill_tokens() const { return impl_->llama->max_tokens(); }

T3MtlSampling T3Mtl::default_sampling() const {
  const PipelineConfig& p = impl_->cfg.pipeline;
  T3MtlSampling s;
  s.cfg_weight = p.cfg_weight;
  s.temperature = p.temperature;
  s.min_p = p.min_p;
  s.top_p = p.top_p;
  s.repetition_penalty = p.repetition_penalty;
  return s;
}

std::vector<float> T3Mtl::cond_embeddings(const T3MtlCond& cond) {
  Impl& m = *impl_;
  CBX_CHECK(int64_t(cond.speaker_emb.size()) == m.cfg.t3.speaker_embed_size,
            "t3 mtl: speaker embedding has %zu values, expected %d", cond.speaker_emb.size(),
            m.cfg.t3.speaker_embed_size);
  const int64_t n = m.encode_cond(cond, m.prompt);
  const int64_t d = m.cfg.t3.n_embd;
  std::vector<float> out(size_t(n * d));
  std::memcpy(out.data(), m.prompt.data, out.size() * 4);
  return out;
}

std::vector<int32_t> T3Mtl::generate(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens,
                                     const T3MtlSampling& s, T3MtlStats* stats,
                                     const std::function<bool()>& should_abort, int64_t force_n_tokens,
                                     const std::function<void(int32_t)>& on_token) {
  Impl& m = *impl_;
  const T3Config& t = m.cfg.t3;
  const int64_t d = t.n_embd, V = t.speech_vocab;
  CBX_CHECK(force_n_tokens <= m.max_new, "t3 mtl: %lld forced tokens exceed max_new_tokens %lld",
            (long long)force_n_tokens, (long long)m.max_new);
  const int64_t limit = force_n_tokens > 0 ? force_n_tokens : m.max_new;
  const MtlSamplerParams sp = mtl_sampler_params(s);
  MtlSampler sampler(int32_t(V), sp);
  // Upstream zeroes the uncond row's text embeddings only when cfg_weight > 0; otherwise both rows
  // are identical and cond + w (cond - uncond) = cond: one row gives the same logits.
  const int64_t B = s.cfg_weight > 0.f ? 2 : 1;
  T3MtlStats st;
  st.n_rows = B;
  st.weight_bytes_per_step = double(t3_llama_decode_weight_bytes(m.lw));

  double t0 = now_ms();
  Tensor logits = m.prefill(cond, text_tokens, B, &st.prompt_len);
  m.history.assign(1, t.start_speech_token);
  m.out.clear();
  st.prefill_ms = now_ms() - t0;

  t0 = now_ms();
  double kv_sum = 0;
  for (int64_t i = 0; i < limit; ++i) {
    const float* c = logits.ptr<float>();
    const float* u = B == 2 ? c + V : nullptr;
    const bool any = sampler.process(c, u, m.history.data(), int64_t(m.history.size()));
    const int32_t tok = any ? sampler.pick() : -1;
    if (m.on_step) {
      T3MtlStep step;
      step.step = i;
      step.cond = c;
      step.uncond = u;
      step.guided = sampler.guided();
      step.processed = sampler.processed();
      step.token = tok;
      m.on_step(step);
    }
    CBX_CHECK(tok >= 0, "t3 mtl: every processed logit is -inf at step %lld (non-finite logits?)", (long long)i);
    m.out.push_back(tok);
    m.history.push_back(tok);
    if (on_token) on_token(tok);
    if (tok == t.stop_speech_token && force_n_tokens <= 0) break;
    if (i + 1 == limit) {
      st.hit_limit = force_n_tokens <= 0;
      break;
    }
    if (should_abort && should_abort()) {
      st.aborted = true;
      break;
    }
    // Token i is fed at speech position i + 1 (the doubled BOS holds position 0).
    m.tok_id.ptr<int32_t>()[0] = tok;
    m.pos_id.ptr<int32_t>()[0] = int32_t(i + 1);
    Tensor r0 = slice(m.tok, 0, 0, 1);
    get_rows(m.speech_emb, m.tok_id, r0);
    get_rows(m.speech_pos, m.pos_id, m.tok_pe);
    add(m.pool, r0, m.tok_pe, r0);
    if (B == 2) std::memcpy(m.tok.row(1), m.tok.row(0), size_t(d) * 4);
    logits = m.llama->forward(slice(m.tok, 0, 0, B), B);
    kv_sum += double(m.llama->kv_step_bytes(B));  // the keys/values this step read
    ++st.n_decode;
  }
  st.decode_ms = now_ms() - t0;
  st.n_steps = int64_t(m.out.size());
  st.kv_bytes_per_step = st.n_decode > 0 ? kv_sum / double(st.n_decode) : 0.0;
  if (stats) *stats = st;
  return m.out;
}

}  // namespace cbx
