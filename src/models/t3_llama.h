// T3 backbone for Multilingual: an HF LlamaModel fed with inputs_embeds (embed_tokens is
// unused), plus the bias-free speech head (spec §6.2, §6.3). Pre-norm blocks:
//   x += o_proj(attn(rope(q_proj(h)), rope(k_proj(h)), v_proj(h))),  h = rms_norm(x) *
//   input_layernorm x += down_proj(silu(gate_proj(h)) * up_proj(h)),                 h =
//   rms_norm(x) * post_attention_layernorm
// final rms_norm(x) * norm, logits = speech_head(last row). RoPE: NeoX rotate-half over head_dim
// with llama3 frequency scaling; position = absolute index in the stream (conditioning included).
// Attention is causal with scale 1/sqrt(head_dim); n_kv_head may be < n_head (GQA).
//
// Batching (CFG): a call processes B <= n_rows independent sequences of T tokens each, at the
// same positions n_past .. n_past+T-1. The rows of the input are sequence-major
// ([b0 t0..tT-1, b1 t0..]), so every matmul takes all B*T rows at once and reads each weight once;
// attention runs per sequence on its own KV cache.
//
// Runtime: KV cache [n_layer] x [n_rows * H_kv, max_ctx, D] (F16 default, F32 selectable) and one
// Arena for every activation, reserved at construction for the worst case; forward allocates
// nothing. One-token calls (decode) run as one fused pool run (decode_fused) with the same
// logits as the op-by-op path; ~283 MB of q4p weight copies for the full Q4_0 model (pack_planar;
// Q8_0 models get q8p copies).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/huge_buffer.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/work_split.h"
#include "models/model_config.h"
#include "models/t3_gpt2.h"  // T3WeightKind, T3Capture
#include "ops/row_linear.h"

namespace cbx {

class GgufFile;

struct T3LlamaLayer {
  Tensor wq, wk, wv, wo;        // [H*D, d], [Hkv*D, d], [Hkv*D, d], [d, H*D]
  Tensor w_gate, w_up, w_down;  // [ff, d], [ff, d], [d, ff]
  Tensor attn_norm, ffn_norm;   // [d] input_layernorm, post_attention_layernorm
};

struct T3LlamaWeights {
  std::vector<T3LlamaLayer> layers;
  Tensor norm;           // [d]
  Tensor speech_head_w;  // [speech_vocab, d] (no bias in the Llama variants)

  using Visitor = T3Gpt2Weights::Visitor;
  void for_each_tensor(const T3Config& c, const Visitor& fn);
};

// Checks the Llama hyper-parameters, then binds every backbone weight (zero copy).
void bind_t3_llama(const GgufFile& f, const T3Config& c, T3LlamaWeights& w);
// Bytes of the weights one decode step reads: every layer matrix and norm, the final norm and the
// head.
size_t t3_llama_decode_weight_bytes(const T3LlamaWeights& w);

struct T3LlamaOptions {
  int64_t max_ctx = 0;     // KV positions per sequence (required)
  int64_t max_tokens = 0;  // most tokens per sequence in one call (the prefill); 0 = max_ctx
  int64_t n_rows = 2;      // sequences (CFG: cond, uncond)
  DType kv_type = DType::F16;
  // Fused decode: copy Q4_0 / Q8_0 layer matrices and the head into planar row pairs (q4p /
  // q8p) where their SIMD kernel exists (same logits, faster decode; costs a second copy of
  // those weights, ~290 MB for the full Multilingual Q4_0 model). Off: the decode reads the
  // GGUF layout.
  bool pack_planar = true;
  // Called on the constructing thread after each matrix's planar copy is written, with its
  // RowLinear::pack_bytes (load progress: the copies are most of a quantized model's load); it
  // may throw to cancel the construction. Empty: no calls.
  std::function<void(size_t bytes)> on_packed;
};

// Named intermediates (capture): "inp" [B*T, d]; per layer "attn_norm", "q" (after RoPE) [B*T,
// H*D], "attn" [B*T, H*D], "attn_out", "ffn_norm" [B*T, d], "ffn_act" [B*T, ff], "l_out" [B*T, d];
// "norm" [B, d] (last token of each sequence), "logits" [B, speech_vocab].
class T3Llama {
 public:
  // c and w are referenced: they must outlive this object.
  T3Llama(const T3Config& c, const T3LlamaWeights& w, ThreadPool& pool, const T3LlamaOptions& o);
  T3Llama(const T3Llama&) = delete;
  T3Llama& operator=(const T3Llama&) = delete;

  // embeds: F32 [B*T, d] (sequence-major), B in 1..n_rows. Appends the keys/values of sequence b to
  // cache b and returns the speech logits of each sequence's last token: F32 [B, speech_vocab]
  // (valid until the next call). All sequences share n_past.
  Tensor forward(const Tensor& embeds, int64_t B);
  void reset() { n_past_ = 0; }
  int64_t n_past() const { return n_past_; }
  int64_t max_ctx() const { return max_ctx_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t n_rows() const { return n_rows_; }
  // Bytes of KV cache one decode step of B sequences reads at the current length.
  size_t kv_step_bytes(int64_t B) const;
  // Copies the cached keys/values of positions 0 .. n_past()-1 from sequence src to sequence dst
  // (a prefix both sequences share is computed once: forward(prefix, 1), copy, then forward of
  // both sequences' remaining tokens with B = 2).
  void copy_sequence(int64_t src, int64_t dst);
  // The keys/values of positions [0, rows) of sequence 0 (a conditioning prefix several decodes
  // share), layer-major, K then V, [H_kv][rows][D] in the cache type: prefix_bytes(rows) bytes.
  // load_prefix writes them to sequences [0, n_seq) and sets n_past() = rows: a forward then
  // continues after them exactly as after the forward that computed them.
  size_t prefix_bytes(int64_t rows) const;
  void save_prefix(int64_t rows, void* dst) const;
  void load_prefix(int64_t rows, const void* src, int64_t n_seq);
  void set_capture(T3Capture fn) { capture_ = std::move(fn); }
  // One-token calls (T == 1) take the fused decode path unless this is off or a capture is set
  // (the op-by-op path reports every named intermediate); both give the same logits.
  void set_fused_decode(bool on) { fused_ = on; }
  // Bytes of re-laid-out weight copies held for the fused decode (T3LlamaOptions::pack_planar).
  size_t packed_weight_bytes() const;
  // The activation arena: its capacity (planned at construction) and its high-water mark.
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }

  // The fused decode's parts, for a decoder that batches sequences at different positions
  // (models/t3_mtl_batch.h): layer l's projection k (0 q, 1 k, 2 v, 3 o, 4 gate, 5 up, 6 down),
  // the head, the per-thread activation row stride, the RoPE inverse frequencies [D/2], the
  // caches [n_rows * H_kv, max_ctx, D] and the weights.
  const RowLinear& layer_rows(int l, int k) const;
  const RowLinear& head_rows() const { return head_; }
  size_t act_stride() const { return act_stride_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  DType kv_type() const { return kv_type_; }
  const Tensor& k_cache(int l) const { return k_cache_[size_t(l)]; }
  const Tensor& v_cache(int l) const { return v_cache_[size_t(l)]; }
  const T3LlamaWeights& weights() const { return w_; }

 private:
  void emit(const char* name, int layer, const Tensor& t) const {
    if (capture_) capture_(name, layer, t);
  }
  void store_kv(int layer, const Tensor& k, const Tensor& v, int64_t B, int64_t T);
  // Backs cache positions up to `upto` (and kKvBackAhead more) of every sequence and head in
  // one populate call a head slab (core/huge_buffer.h populate_pages), so that neither the
  // prefill nor the decode steps fault the 4 KB pages in one by one; RSS still grows only with
  // the positions used. Stops trying where the kernel cannot.
  void back_kv(int64_t upto);
  static constexpr int64_t kKvBackAhead = 64;
  // One-token forward of B sequences as a single pool run. Per layer: each thread takes a
  // share of the KV heads and computes their q/k/v rows (both sequences per weight read),
  // RoPE, K/V stores and attention; then row-split o_proj (+ residual), gate/up with the
  // SwiGLU combine, down_proj (+ residual), with the RMS norms done by every thread for
  // itself (4 barriers a layer, no serial sections). The row phases are shared out by
  // WorkSplit (a block per thread read front to back, the others' backs taken when done).
  // Same kernels and per-output order as the op-by-op path, so the logits are identical.
  // x [B, d] (updated in place), q, k, v, att, g, u: the forward's buffers; writes logits_
  // rows [0, B).
  void decode_fused(int64_t B, Tensor& x, Tensor& q, Tensor& k, Tensor& v, Tensor& att, Tensor& g, Tensor& u);

  const T3Config& c_;
  const T3LlamaWeights& w_;
  ThreadPool& pool_;
  DType kv_type_;
  int64_t max_ctx_ = 0, max_tokens_ = 0, n_rows_ = 0;
  int64_t n_past_ = 0;
  std::vector<float> inv_freq_;  // [D/2] llama3-scaled
  Tensor inv_freq_t_;
  Arena kv_arena_;  // 4 KB pages: only the positions used get backed (huge pages would back
                    // every head's whole max_ctx slab, hundreds of MB for Multilingual)
  size_t kv_bytes_ = 0;
  int64_t kv_backed_ = 0;    // positions [0, kv_backed_) of every head slab are backed
  bool kv_populate_ = true;  // false once populate_pages failed (old kernel)
  std::vector<Tensor> k_cache_,
      v_cache_;  // [layer]: [n_rows * H_kv, max_ctx, D] (sequence-major heads)
  Arena arena_;
  Tensor logits_;  // [n_rows, speech_vocab]
  // Fused decode: projections bound once (planar copies owned here), per-thread rows (norm
  // outputs, residual partials, converted activations) and the step's RoPE angles, all
  // outside the per-call part of the arena.
  struct LayerRows {
    RowLinear q, k, v, o, gate, up, down;
  };
  std::vector<LayerRows> rows_;
  RowLinear head_;
  std::vector<WorkSplit> splits_;  // fused decode phases: per layer o, gate/up, down; then the head
  HugeBuffer packed_buf_;          // the planar copies of all of them (streamed every step: huge pages)
  float* thread_h_ = nullptr;      // [nt, n_rows, d]
  float* thread_tmp_ = nullptr;    // [nt, n_rows, d]
  uint8_t* thread_act_ = nullptr;  // nt blocks of n_rows * act_stride_ bytes
  size_t act_stride_ = 0;
  float* rope_cs_ = nullptr;  // [D/2] cos, then [D/2] sin
  bool fused_ = true;
  size_t call_mark_ = 0;
  T3Capture capture_;
};

}  // namespace cbx
