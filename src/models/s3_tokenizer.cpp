#include "models/s3_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "audio/mel.h"
#include "audio/stft.h"
#include "core/arena.h"
#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

namespace {

constexpr int64_t kHeadDim = 64;                  // precompute_freqs_cis(64, ...) is fixed at 64 dims
constexpr int64_t kMaxMelFrames = 3000;           // longer inputs take upstream's 30 s window path
constexpr int64_t kRopePositions = 2048;          // upstream's table: precompute_freqs_cis(64, 1024 * 2)
constexpr float kFsqScale = 0.9990000128746033f;  // FSQCodebook.encode
// Output length of the stem's k=3, stride 2, pad 1 convolutions: (T - 1) / 2 + 1.
int64_t stem_len(int64_t t) { return t <= 0 ? 0 : (t - 1) / 2 + 1; }

// The FSMN memory's depthwise conv over time: zero pad (K-1)/2 left, the rest right.
Conv1dParams fsmn_params(const S3TokConfig& c) {
  Conv1dParams p;
  p.pad_left = (c.fsmn_kernel - 1) / 2;
  p.pad_right = c.fsmn_kernel - 1 - p.pad_left;
  p.groups = c.n_state;
  return p;
}

struct Block {
  Tensor attn_ln_w, attn_ln_b;                   // [C]
  Tensor q_w, q_b, k_w, v_w, v_b, out_w, out_b;  // [C, C], [C] (key has no bias)
  Tensor fsmn_w;                                 // [C, 1, K] depthwise
  Tensor mlp_ln_w, mlp_ln_b;                     // [C]
  Tensor mlp0_w, mlp0_b;                         // [F, C], [F]
  Tensor mlp2_w, mlp2_b;                         // [C, F], [C]
};

enum class Kind { F32Only, Matrix };

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Tensor bind(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape, Kind kind) {
  const GgufTensorInfo* ti = f.find_tensor(name);
  CBX_CHECK(ti, "%s: missing tensor '%s'", f.path().c_str(), name.c_str());
  Tensor t = f.tensor(*ti);
  bool ok = t.ndim == int(shape.size());
  for (int i = 0; ok && i < t.ndim; ++i) ok = t.shape[i] == shape[size_t(i)];
  CBX_CHECK(ok, "%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(), t.shape_str().c_str(),
            shape_string(shape).c_str());
  const TypeTraits& tr = type_traits(t.dtype);
  if (kind == Kind::F32Only)
    CBX_CHECK(t.dtype == DType::F32, "%s: tensor '%s' must be f32, got %s", f.path().c_str(), name.c_str(), tr.name);
  else
    CBX_CHECK(tr.is_float && tr.to_float, "%s: tensor '%s' has dtype %s, not a weight type", f.path().c_str(),
              name.c_str(), tr.name);
  return t;
}

}  // namespace

struct S3Tokenizer::Impl {
  S3TokConfig c;
  int64_t max_samples = 0;
  int64_t max_frames = 0;  // mel frames of max_samples (before any max_tokens cut)
  int64_t max_tokens = 0;  // tokens of max_samples, capped by the 3000-frame limit
  Tensor conv1_w, conv1_b, conv2_w, conv2_b;
  std::vector<Block> blocks;
  Tensor proj_w, proj_b;  // [D8, C], [D8]
  Stft stft{S3TokenizerMel::kNFft, S3TokenizerMel::kHop, make_window(WindowKind::HannPeriodic, S3TokenizerMel::kNFft),
            true, StftPad::Reflect};
  MelMatrix mel;
  Arena arena;
  Tensor positions;  // I32 [max_tokens]: 0, 1, ...
  Tensor inv_freq;   // F32 [32]
  size_t call_mark = 0;
  int max_threads = 1;  // the largest pool the arena is sized for
  GemmPrecision gemm = GemmPrecision::F32;
  bool lossy_weights = false;
  S3TokCapture capture;

  void emit(const char* name, const Tensor& t) const {
    if (capture) capture(name, t);
  }
  void emit_block(int i, const Tensor& t) const {
    if (capture) capture("s3tok.block" + std::to_string(i) + ".out", t);
  }
  // log-mel [128, T] of wav (global-max floor over all T frames) into `out`.
  void log_mel(const float* wav, int64_t n, Tensor& out);
  // x: [T, C] in place.
  void block(ThreadPool& pool, const Block& W, Tensor& x);
};

S3Tokenizer::S3Tokenizer(const GgufFile& f, const ModelConfig& mc, int64_t max_samples, int max_threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const S3TokConfig& c = mc.s3tok;
  m.c = c;
  const char* path = f.path().c_str();
  CBX_CHECK(c.n_mels == S3TokenizerMel::kMels && c.sample_rate == S3TokenizerMel::kSampleRate &&
                c.n_fft == S3TokenizerMel::kNFft && c.hop == S3TokenizerMel::kHop,
            "%s: s3 tokenizer front-end (n_mels %d, %d Hz, n_fft %d, hop %d) differs from the log-mel "
            "128 at 16 kHz, n_fft 400, hop 160 that S3TokenizerV2 uses",
            path, c.n_mels, c.sample_rate, c.n_fft, c.hop);
  CBX_CHECK(c.n_state > 0 && c.n_head > 0 && int64_t(c.n_head) * kHeadDim == c.n_state,
            "%s: s3 tokenizer width %d must be n_head (%d) x %lld (the RoPE table is fixed at %lld dims)", path,
            c.n_state, c.n_head, (long long)kHeadDim, (long long)kHeadDim);
  CBX_CHECK(c.n_layer >= 0 && c.n_ff > 0 && c.fsmn_kernel > 0,
            "%s: bad s3 tokenizer n_layer %d / n_ff %d / "
            "fsmn_kernel %d",
            path, c.n_layer, c.n_ff, c.fsmn_kernel);
  CBX_CHECK(c.codebook_levels == 3 && c.codebook_dim == 8,
            "%s: s3 tokenizer FSQ has %d levels x %d dims; FSQCodebook has 3 levels x 8 dims (3^8 codes)", path,
            c.codebook_levels, c.codebook_dim);
  CBX_CHECK(max_samples > S3TokenizerMel::kNFft / 2,
            "s3 tokenizer: max_samples %lld must exceed %d (the STFT's reflect padding)", (long long)max_samples,
            S3TokenizerMel::kNFft / 2);
  m.max_samples = max_samples;
  m.max_frames = max_samples / S3TokenizerMel::kHop;
  m.max_tokens = stem_len(stem_len(std::min(m.max_frames, kMaxMelFrames)));

  // ---- weights ----
  const int64_t C = c.n_state, F = c.n_ff, K = c.fsmn_kernel;
  m.conv1_w = bind(f, "s3tok.encoder.conv1.weight", {C, c.n_mels, 3}, Kind::F32Only);
  m.conv1_b = bind(f, "s3tok.encoder.conv1.bias", {C}, Kind::F32Only);
  m.conv2_w = bind(f, "s3tok.encoder.conv2.weight", {C, C, 3}, Kind::F32Only);
  m.conv2_b = bind(f, "s3tok.encoder.conv2.bias", {C}, Kind::F32Only);
  m.blocks.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "s3tok.encoder.blocks." + std::to_string(i);
    Block& b = m.blocks[size_t(i)];
    b.attn_ln_w = bind(f, p + ".attn_ln.weight", {C}, Kind::F32Only);
    b.attn_ln_b = bind(f, p + ".attn_ln.bias", {C}, Kind::F32Only);
    b.q_w = bind(f, p + ".attn.query.weight", {C, C}, Kind::Matrix);
    b.q_b = bind(f, p + ".attn.query.bias", {C}, Kind::F32Only);
    b.k_w = bind(f, p + ".attn.key.weight", {C, C}, Kind::Matrix);
    b.v_w = bind(f, p + ".attn.value.weight", {C, C}, Kind::Matrix);
    b.v_b = bind(f, p + ".attn.value.bias", {C}, Kind::F32Only);
    b.out_w = bind(f, p + ".attn.out.weight", {C, C}, Kind::Matrix);
    b.out_b = bind(f, p + ".attn.out.bias", {C}, Kind::F32Only);
    b.fsmn_w = bind(f, p + ".attn.fsmn_block.weight", {C, 1, K}, Kind::F32Only);
    b.mlp_ln_w = bind(f, p + ".mlp_ln.weight", {C}, Kind::F32Only);
    b.mlp_ln_b = bind(f, p + ".mlp_ln.bias", {C}, Kind::F32Only);
    b.mlp0_w = bind(f, p + ".mlp.0.weight", {F, C}, Kind::Matrix);
    b.mlp0_b = bind(f, p + ".mlp.0.bias", {F}, Kind::F32Only);
    b.mlp2_w = bind(f, p + ".mlp.2.weight", {C, F}, Kind::Matrix);
    b.mlp2_b = bind(f, p + ".mlp.2.bias", {C}, Kind::F32Only);
  }
  m.proj_w = bind(f, "s3tok.quantizer._codebook.project_down.weight", {c.codebook_dim, C}, Kind::Matrix);
  m.lossy_weights = gemm_weight_is_lossy(m.proj_w.dtype);
  for (const Block& b : m.blocks)
    for (const Tensor* w : {&b.q_w, &b.k_w, &b.v_w, &b.out_w, &b.mlp0_w, &b.mlp2_w})
      m.lossy_weights |= gemm_weight_is_lossy(w->dtype);
  m.proj_b = bind(f, "s3tok.quantizer._codebook.project_down.bias", {c.codebook_dim}, Kind::F32Only);
  m.mel = MelMatrix(mel_filterbank(S3TokenizerMel::kSampleRate, S3TokenizerMel::kNFft, S3TokenizerMel::kMels, 0.0, 0.0,
                                   MelScale::Slaney, MelNorm::Slaney),
                    S3TokenizerMel::kMels, S3TokenizerMel::kNFft / 2 + 1);

  // ---- arena ----
  // The tables kept across calls (run on the plan, then on the arena), then tokenize()'s
  // allocations at its largest input in their order: max_samples, cut to the 3000-frame limit
  // (a longer clip takes a max_tokens cut), each op's scratch for pools of up to max_threads.
  const int64_t T_all = m.max_frames, T100 = std::min(T_all, kMaxMelFrames), T50 = stem_len(T100);
  const int64_t T = m.max_tokens, nb = S3TokenizerMel::kNFft / 2 + 1, H = c.n_head, D8 = c.codebook_dim;
  CBX_CHECK(max_threads >= 1, "s3 tokenizer: max_threads %d must be >= 1", max_threads);
  m.max_threads = max_threads;
  const int nt = max_threads;
  auto keep = [&](auto& a) {
    m.positions = a.alloc(DType::I32, {std::max<int64_t>(T, 1)}, "s3tok positions");
    m.inv_freq = a.alloc(DType::F32, {kHeadDim / 2}, "s3tok rope inv_freq");
  };
  ArenaPlan plan;
  keep(plan);
  auto mm = [&](const Tensor& w) { plan.scratch(matmul_scratch_bytes(w.dtype, T, w.shape[0], w.shape[1], nt)); };
  plan.alloc(DType::F32, {S3TokenizerMel::kMels, T_all});  // log-mel over the whole clip
  {
    const size_t mk = plan.mark();
    plan.alloc_bytes(size_t(T_all + 1) * nb * 4);  // its power spectrum
    plan.rewind(mk);
  }
  plan.alloc(DType::F32, {C, T50});  // conv1, conv2, x
  plan.alloc(DType::F32, {C, T});
  plan.alloc(DType::F32, {T, C});
  Conv1dParams sp;
  sp.stride = 2;
  sp.pad_left = sp.pad_right = 1;
  // Either precision: set_gemm_precision may switch after the arena is sized.
  plan.scratch(conv1d_scratch_bytes_any_precision(c.n_mels, C, T100, 3, sp, nt));
  plan.scratch(conv1d_scratch_bytes_any_precision(C, C, T50, 3, sp, nt));
  const Conv1dParams fp = fsmn_params(c);
  for (const Block& b : m.blocks) {  // see block()
    const size_t mk = plan.mark();
    for (int i = 0; i < 6; ++i) plan.alloc(DType::F32, {T, C});
    for (int i = 0; i < 2; ++i) plan.alloc(DType::F32, {C, T});
    mm(b.q_w), mm(b.k_w), mm(b.v_w);
    plan.scratch(attention_scratch_bytes(H, T, kHeadDim));
    {
      GemmPrecisionScope f32_scope(GemmPrecision::F32);  // as block() runs it
      plan.scratch(conv1d_scratch_bytes(C, C, T, K, fp, nt));
    }
    mm(b.out_w);
    plan.rewind(mk);
    plan.alloc(DType::F32, {T, C});
    plan.alloc(DType::F32, {T, F});
    mm(b.mlp0_w), mm(b.mlp2_w);
    plan.rewind(mk);
  }
  plan.alloc(DType::F32, {T, D8});
  mm(m.proj_w);
  m.arena.reserve(plan.bytes());
  keep(m.arena);
  for (int64_t i = 0; i < m.positions.numel(); ++i) m.positions.ptr<int32_t>()[i] = int32_t(i);
  // precompute_freqs_cis: 1 / theta^(arange(0, 64, 2) / 64) in f32.
  for (int64_t i = 0; i < kHeadDim / 2; ++i)
    m.inv_freq.ptr<float>()[i] = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(kHeadDim));
  m.call_mark = m.arena.mark();
}

S3Tokenizer::~S3Tokenizer() = default;

int64_t S3Tokenizer::max_samples() const { return impl_->max_samples; }
int S3Tokenizer::max_threads() const { return impl_->max_threads; }
size_t S3Tokenizer::arena_bytes() const { return impl_->arena.capacity(); }
size_t S3Tokenizer::arena_high_water() const { return impl_->arena.high_water(); }
void S3Tokenizer::set_capture(S3TokCapture fn) { impl_->capture = std::move(fn); }
void S3Tokenizer::set_gemm_precision(GemmPrecision p) { impl_->gemm = resolve_gemm_precision(p, impl_->lossy_weights); }
GemmPrecision S3Tokenizer::gemm_precision() const { return impl_->gemm; }

int64_t S3Tokenizer::num_tokens(int64_t n, int64_t max_tokens) {
  int64_t t100 = std::max<int64_t>(n, 0) / S3TokenizerMel::kHop;
  if (max_tokens >= 0) t100 = std::min(t100, 4 * max_tokens);
  return stem_len(stem_len(t100));
}

// s3tokenizer.py log_mel_spectrogram: |stft|^2 without the last frame, mel, log10 of the
// clamp at 1e-10, floor at (max - 8), (x + 4) / 4; the same steps as S3TokenizerMel.
void S3Tokenizer::Impl::log_mel(const float* wav, int64_t n, Tensor& out) {
  const int64_t T = out.shape[1];
  const int nb = stft.bins();
  const size_t mark = arena.mark();
  float* power = static_cast<float*>(arena.alloc_bytes(size_t(T + 1) * nb * 4, 64, "s3tok power spectrum"));
  stft.power(wav, size_t(n), power);
  float* o = out.ptr<float>();
  float mx = -INFINITY;
  for (int64_t f = 0; f < T; ++f)
    for (int b = 0; b < S3TokenizerMel::kMels; ++b) {
      const float v = std::log10(std::max(mel.dot_row(b, power + f * nb), 1e-10f));
      o[b * T + f] = v;
      mx = std::max(mx, v);
    }
  const float floor = mx - 8.0f;
  for (int64_t i = 0; i < S3TokenizerMel::kMels * T; ++i) o[i] = (std::max(o[i], floor) + 4.0f) / 4.0f;
  arena.rewind(mark);
}

void S3Tokenizer::Impl::block(ThreadPool& pool, const Block& W, Tensor& x) {
  const int64_t T = x.shape[0], C = c.n_state, H = c.n_head;
  Arena* sc = &arena;
  const size_t mark = arena.mark();
  Tensor h = arena.alloc(DType::F32, {T, C}, "s3tok ln");
  Tensor q = arena.alloc(DType::F32, {T, C}, "s3tok q");
  Tensor k = arena.alloc(DType::F32, {T, C}, "s3tok k");
  Tensor v = arena.alloc(DType::F32, {T, C}, "s3tok v");
  Tensor att = arena.alloc(DType::F32, {T, C}, "s3tok attention");
  Tensor mem = arena.alloc(DType::F32, {T, C}, "s3tok fsmn memory");
  Tensor vt = arena.alloc(DType::F32, {C, T}, "s3tok v^T");
  Tensor mt = arena.alloc(DType::F32, {C, T}, "s3tok fsmn^T");

  // ---- x += out(attention) + fsmn(v) ----
  layer_norm(pool, x, W.attn_ln_w, W.attn_ln_b, c.attn_ln_eps, h);
  matmul_bias(pool, W.q_w, W.q_b, h, q, sc);
  matmul(pool, W.k_w, h, k, sc);
  matmul_bias(pool, W.v_w, W.v_b, h, v, sc);
  // RoPE (rotate-half) on [T, H, 64], then q and k each scaled by 64^-1/4 as upstream does.
  const Tensor pos = slice(positions, 0, 0, T);
  Tensor q3 = reshape(q, {T, H, kHeadDim}), k3 = reshape(k, {T, H, kHeadDim});
  rope_inv_freq(pool, q3, pos, inv_freq, q3);
  rope_inv_freq(pool, k3, pos, inv_freq, k3);
  const float s = float(std::pow(double(kHeadDim), -0.25));
  scale(pool, q, q, s);
  scale(pool, k, k, s);
  AttentionParams ap;
  ap.scale = 1.f;
  Tensor oh = transpose(reshape(att, {T, H, kHeadDim}), 0, 1);
  attention(pool, transpose(q3, 0, 1), transpose(k3, 0, 1), transpose(reshape(v, {T, H, kHeadDim}), 0, 1), Tensor{}, oh,
            ap, sc);
  // FSMN memory: depthwise conv (zero pad (K-1)/2 left, the rest right) over time, plus v.
  copy_strided(transpose(v, 0, 1), vt);
  const Conv1dParams fp = fsmn_params(c);
  {
    GemmPrecisionScope f32_scope(GemmPrecision::F32);  // C groups of one row: no bf16 gain
    conv1d(pool, vt, W.fsmn_w, Tensor{}, mt, fp, sc);
  }
  add(pool, mt, vt, mt);
  copy_strided(transpose(mt, 0, 1), mem);
  matmul_bias(pool, W.out_w, W.out_b, att, h, sc);
  add(pool, h, mem, h);
  add(pool, x, h, x);

  // ---- x += mlp.2(gelu(mlp.0(LN(x)))) ----
  arena.rewind(mark);
  h = arena.alloc(DType::F32, {T, C}, "s3tok ln");
  Tensor ff = arena.alloc(DType::F32, {T, c.n_ff}, "s3tok mlp");
  layer_norm(pool, x, W.mlp_ln_w, W.mlp_ln_b, c.mlp_ln_eps, h);
  matmul_bias(pool, W.mlp0_w, W.mlp0_b, h, ff, sc);
  gelu(pool, ff, ff);
  matmul_bias(pool, W.mlp2_w, W.mlp2_b, ff, h, sc);
  add(pool, x, h, x);
  arena.rewind(mark);
}

std::vector<int32_t> S3Tokenizer::tokenize(ThreadPool& pool, const float* wav, int64_t n, int64_t max_tokens) {
  Impl& m = *impl_;
  const S3TokConfig& c = m.c;
  GemmPrecisionScope gemm_scope(m.gemm);
  CBX_CHECK(wav != nullptr || n == 0, "s3 tokenizer: null wave");
  CBX_CHECK(n > S3TokenizerMel::kNFft / 2,
            "s3 tokenizer: %lld samples is too short (the 400-point STFT's reflect padding needs more than %d)",
            (long long)n, S3TokenizerMel::kNFft / 2);
  CBX_CHECK(n <= m.max_samples, "s3 tokenizer: %lld samples exceed the reserved max_samples %lld", (long long)n,
            (long long)m.max_samples);
  CBX_CHECK(pool.size() <= m.max_threads,
            "s3 tokenizer: a pool of %d threads exceeds the %d its scratch was reserved for at construction",
            pool.size(), m.max_threads);
  CBX_CHECK(max_tokens != 0, "s3 tokenizer: max_tokens must be > 0 (or < 0 for no limit), got 0");
  const int64_t T_all = n / S3TokenizerMel::kHop;
  const int64_t T100 = max_tokens > 0 ? std::min(T_all, 4 * max_tokens) : T_all;
  CBX_CHECK(T100 <= kMaxMelFrames,
            "s3 tokenizer: %lld mel frames (%.2f s) exceed %lld (30 s); upstream's sliding-window path for long "
            "audio is not implemented",
            (long long)T100, double(T100) / 100.0, (long long)kMaxMelFrames);
  const int64_t T50 = stem_len(T100), T = stem_len(T50), C = c.n_state;
  CBX_ASSERT(T <= m.max_tokens && T <= kRopePositions);
  m.arena.rewind(m.call_mark);

  // ---- log-mel over the whole clip, then the max_len cut ----
  Tensor mel_all = m.arena.alloc(DType::F32, {S3TokenizerMel::kMels, T_all}, "s3tok mel");
  m.log_mel(wav, n, mel_all);
  const Tensor mel = slice(mel_all, 1, 0, T100);
  m.emit("s3tok.mel", mel);

  // ---- conv stem: [128, T100] -> [C, T50] -> [C, T] -> [T, C] ----
  Tensor c1 = m.arena.alloc(DType::F32, {C, T50}, "s3tok conv1");
  Tensor c2 = m.arena.alloc(DType::F32, {C, T}, "s3tok conv2");
  Tensor x = m.arena.alloc(DType::F32, {T, C}, "s3tok x");
  Conv1dParams sp;
  sp.stride = 2;
  sp.pad_left = sp.pad_right = 1;
  conv1d(pool, mel, m.conv1_w, m.conv1_b, c1, sp, &m.arena);
  gelu(pool, c1, c1);
  m.emit("s3tok.conv1", c1);
  conv1d(pool, c1, m.conv2_w, m.conv2_b, c2, sp, &m.arena);
  gelu(pool, c2, c2);
  copy_strided(transpose(c2, 0, 1), x);
  m.emit("s3tok.conv2", x);

  for (int i = 0; i < c.n_layer; ++i) {
    m.block(pool, m.blocks[size_t(i)], x);
    m.emit_block(i, x);
  }

  // ---- FSQ: digits round(tanh(h) * 0.999) + 1 in {0, 1, 2}, dimension 0 least significant ----
  const int64_t D8 = c.codebook_dim;
  Tensor h = m.arena.alloc(DType::F32, {T, D8}, "s3tok project_down");
  matmul_bias(pool, m.proj_w, m.proj_b, x, h, &m.arena);
  m.emit("s3tok.project_down", h);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  const float* hp = h.ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    float mu = 0.f, p = 1.f;
    for (int64_t i = 0; i < D8; ++i, p *= 3.f) mu += (std::nearbyint(std::tanh(hp[t * D8 + i]) * kFsqScale) + 1.f) * p;
    tokens[size_t(t)] = int32_t(mu);
  }
  return tokens;
}

}  // namespace cbx
