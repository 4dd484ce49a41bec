// T3 backbone for Turbo/Nano: an HF GPT2Model fed with inputs_embeds (no wte), plus the
// speech head (spec §6.2, §6.3). Pre-LN blocks:
//   x += c_proj(attn(ln_1(x)));  x += mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))));  ln_f at the end
// with learned absolute positions wpe[n_past + i] added to the inputs. The converter stores
// every Conv1D weight as a Linear [out, in] (docs/gguf-format.md), so all projections are
// y = x W^T + b here.
//
// Runtime: one KV cache [n_layer][H, max_ctx, D] (F16 by default, F32 selectable) and one
// Arena for every activation, both reserved at construction for the worst case (max_ctx
// keys, max_batch rows per call); a forward call allocates nothing.
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
#include "ops/row_linear.h"

namespace cbx {

class GgufFile;

struct T3Gpt2Layer {
  Tensor ln_1_w, ln_1_b;      // [d]
  Tensor c_attn_w, c_attn_b;  // [3d, d], [3d]: rows q | k | v
  Tensor c_proj_w, c_proj_b;  // [d, d], [d]
  Tensor ln_2_w, ln_2_b;      // [d]
  Tensor fc_w, fc_b;          // [n_ff, d], [n_ff]
  Tensor proj_w, proj_b;      // [d, n_ff], [d]
};

// Where a tensor may be stored: Vector = F32 only; Matrix = any float/quantized weight type.
enum class T3WeightKind { Vector, Matrix };

// Binds one GGUF tensor into slot checking presence, shape and dtype (Vector: F32 only; Matrix: any
// float/quantized weight type). Errors name the file and the tensor. A missing optional one leaves
// slot empty.
void bind_t3_tensor(const GgufFile& f, const std::string& name, Tensor& slot, const std::vector<int64_t>& shape,
                    T3WeightKind kind, bool required);

struct T3Gpt2Weights {
  Tensor wpe;  // [n_ctx, d]
  std::vector<T3Gpt2Layer> layers;
  Tensor ln_f_w, ln_f_b;          // [d]
  Tensor text_emb;                // [text_vocab, d]
  Tensor speech_emb;              // [speech_vocab, d]
  Tensor speech_head_w;           // [speech_vocab, d]
  Tensor speech_head_b;           // [speech_vocab] (optional: t3.speech_head_bias)
  Tensor spkr_enc_w, spkr_enc_b;  // [d, speaker_embed_size], [d]

  // Calls fn(gguf_name, tensor slot, expected row-major shape, kind, required) for every
  // weight of a config (sizes `layers` first). Serves binding, tests and byte counts.
  using Visitor = std::function<void(const std::string& name, Tensor& slot, const std::vector<int64_t>& shape,
                                     T3WeightKind kind, bool required)>;
  void for_each_tensor(const T3Config& c, const Visitor& fn);
};

// Binds every weight by GGUF name (zero copy), checking presence, shape and dtype; errors
// name the tensor. The GgufFile must outlive the weights.
void bind_t3_gpt2(const GgufFile& f, const T3Config& c, T3Gpt2Weights& w);
// Bytes of the weights one decode step reads: every layer matrix, biases and norms, ln_f
// and the speech head (embedding rows and the KV cache excluded).
size_t t3_gpt2_decode_weight_bytes(const T3Config& c, const T3Gpt2Weights& w);

struct T3Gpt2Options {
  int64_t max_ctx = 0;         // KV cache length (<= n_ctx); 0 = n_ctx
  int64_t max_batch = 0;       // most rows one forward call takes (the prefill); 0 = max_ctx
  DType kv_type = DType::F16;  // F16 or F32
  // Fused decode: copy Q4_0 / Q8_0 layer matrices and the head into planar row pairs (q4p /
  // q8p) where their SIMD kernel exists (same logits, faster decode; costs a second copy of
  // those weights, ~170 MB for the full Turbo Q4_0 model). Off: the decode reads the GGUF
  // layout.
  bool pack_planar = true;
  // KV cache on transparent huge pages (core/huge_buffer.h). The decode step reads the whole
  // cache every step (~50 MB of a Turbo step's ~230 MB), and huge pages spare it TLB misses
  // (docs/benchmarks.md). The cost: a touch backs 2 MB and the cache is head-major, so the
  // whole reservation becomes resident as soon as the prefill writes (every reserved key, not
  // only those used). false: 4 KB pages, only the written rows resident.
  bool kv_huge_pages = true;
  // Forward calls of 2 .. row_prefill_max rows whose layer matrices are all Q8_0 / Q4_0 run
  // their projections on the decode's row kernels (RowLinear::run_rows: activations to 8
  // bits per block and integer dots, as in a decode step; each weight row is read once for
  // all rows, and every row's outputs equal those of a one-row call) instead of the GEMM,
  // which dequantizes every weight per call. Turbo's text + BOS after a cached voice prefix
  // is such a call (~50 rows). 0 or 1: always the GEMM. -1 (default): the ops layer picks
  // (ops/row_linear.h row_prefill_max_rows: 64, or the GEMM where it runs on AMX tiles).
  int64_t row_prefill_max = -1;
  // Called on the constructing thread after each matrix's planar copy is written, with its
  // RowLinear::pack_bytes (load progress: the copies are most of a quantized model's load); it
  // may throw to cancel the construction. Empty: no calls.
  std::function<void(size_t bytes)> on_packed;
};

// Named intermediates, reported during forward when a capture function is set (layer -1 for
// the ones outside the blocks). Shapes: [T, width] F32 for the T rows of the call.
//   "inp"        inputs + wpe                        [T, d]
//   "attn_norm"  ln_1(x)                             [T, d]      layer i
//   "qkv"        c_attn(ln_1(x))                     [T, 3d]     layer i
//   "attn"       softmax(q k^T / sqrt(D)) v, merged  [T, d]      layer i
//   "attn_out"   x after the attention residual      [T, d]      layer i
//   "ffn_norm"   ln_2(x)                             [T, d]      layer i
//   "ffn_act"    gelu_tanh(c_fc(...))                [T, n_ff]   layer i
//   "l_out"      x after the MLP residual            [T, d]      layer i
//   "ln_f"       ln_f of the last row                [1, d]
//   "logits"     speech_head(ln_f)                   [1, speech_vocab]
using T3Capture = std::function<void(const char* name, int layer, const Tensor& t)>;

class T3Gpt2 {
 public:
  // c and w are referenced, not copied: they must outlive this object.
  T3Gpt2(const T3Config& c, const T3Gpt2Weights& w, ThreadPool& pool, const T3Gpt2Options& o);
  T3Gpt2(const T3Gpt2&) = delete;
  T3Gpt2& operator=(const T3Gpt2&) = delete;

  // embeds: F32 [T, d], the inputs_embeds of positions n_past() .. n_past()+T-1; appends
  // their keys/values to the cache and returns the speech logits of the last row
  // ([speech_vocab] F32, valid until the next call).
  const Tensor& forward(const Tensor& embeds);
  void reset() { n_past_ = 0; }
  int64_t n_past() const { return n_past_; }
  int64_t max_ctx() const { return max_ctx_; }
  int64_t max_batch() const { return max_batch_; }
  void set_capture(T3Capture fn) { capture_ = std::move(fn); }
  bool has_capture() const { return bool(capture_); }
  // Keys and values of cache rows [0, rows) of every layer, out to / in from a buffer of
  // kv_rows_bytes(rows) bytes (layer-major, K then V, [H][rows][D] in the cache type).
  // load_kv_rows sets n_past() to rows: a forward then continues after them exactly as
  // after the forward that produced them. rows <= n_past() to save, <= max_ctx() to load.
  size_t kv_rows_bytes(int64_t rows) const;
  void save_kv_rows(int64_t rows, void* dst) const;
  void load_kv_rows(int64_t rows, const void* src);
  // Leading cache rows no forward has written since the last save_kv_rows / load_kv_rows
  // (which set it to their row count): while it is >= rows, the cache still holds the rows
  // that call saved or loaded, and reuse_kv_rows(rows) takes them instead of a copy back
  // (which only the caller can tell is the same data: T3Turbo's kept voice prefix).
  int64_t kv_rows_unchanged() const { return kv_unchanged_; }
  // The buffer of that last save_kv_rows / load_kv_rows (nullptr before the first).
  const void* kv_rows_source() const { return kv_source_; }
  // n_past() = rows, the cache left as it is; rows <= kv_rows_unchanged().
  void reuse_kv_rows(int64_t rows);
  // One-row calls take the fused decode path unless this is off or a capture is set (the
  // op-by-op path reports every named intermediate); both give the same logits.
  void set_fused_decode(bool on) { fused_ = on; }
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }
  // Bytes of re-laid-out weight copies held for the fused decode (T3Gpt2Options::pack_planar).
  size_t packed_weight_bytes() const;

  // For a batched decode over the same weights (models/t3_batch.h): the fused decode's row
  // kernels of layer l (which: 0 c_attn, 1 attn.c_proj, 2 mlp.c_fc, 3 mlp.c_proj), the speech
  // head's, the bytes a converted activation row takes, and layer l's cache ([H, max_ctx, D]).
  const RowLinear& layer_rows(int l, int which) const;
  const RowLinear& head_rows() const { return head_; }
  size_t act_stride() const { return act_stride_; }
  DType kv_type() const { return kv_type_; }
  const Tensor& k_cache(int l) const { return k_cache_[size_t(l)]; }
  const Tensor& v_cache(int l) const { return v_cache_[size_t(l)]; }

 private:
  void emit(const char* name, int layer, const Tensor& t) const {
    if (capture_) capture_(name, layer, t);
  }
  void store_kv(int layer, const Tensor& qkv, int64_t T);
  // One-row forward (decode) as a single pool run: per layer, the heads (q/k/v rows of a
  // head, its K/V stored, its attention), then three barrier-separated projections with
  // norm, bias, GELU and residual fused (4 barriers a layer, no serial sections). Work is
  // shared out by WorkSplit (core/work_split.h: a block per thread, the others' tails taken
  // when it is done; splits_). Every output row is computed whole by one thread,
  // so the result does not depend on who took what. x: [1, d] inputs + wpe (updated in place);
  // qkv [1, 3d], att [1, d], f1 [1, n_ff]: the forward's buffers; writes logits_.
  void decode_fused(Tensor& x, Tensor& qkv, Tensor& att, Tensor& f1);
  // y [T, M] = x [T, K] . w^T + b on r's row kernels, weight rows split over the pool
  // (T <= row_prefill_max_; the converted rows go to rows_act_).
  void rows_linear(const RowLinear& r, const Tensor& x, Tensor& y);

  const T3Config& c_;
  const T3Gpt2Weights& w_;
  ThreadPool& pool_;
  DType kv_type_;
  int64_t max_ctx_ = 0, max_batch_ = 0;
  int64_t n_past_ = 0;
  mutable int64_t kv_unchanged_ = 0;         // see kv_rows_unchanged()
  mutable const void* kv_source_ = nullptr;  // see kv_rows_source()
  HugeBuffer kv_buf_;                        // K and V per layer: [H, max_ctx, D] each (huge pages: kv_huge_pages)
  size_t kv_bytes_ = 0;
  std::vector<Tensor> k_cache_, v_cache_;
  Arena arena_;
  Tensor logits_;  // [speech_vocab], outside the per-call part of the arena
  // Fused decode: projections bound once, per-thread rows (norm output, residual
  // partials, converted activations), all outside the per-call part of the arena.
  struct LayerRows {
    RowLinear qkv, attn_proj, fc, proj;
  };
  HugeBuffer packed_buf_;  // the planar copies of rows_ and head_ (streamed every step: huge pages)
  std::vector<LayerRows> rows_;
  RowLinear head_;
  // How the fused decode shares out each barrier-separated phase (4 a layer + the head):
  // a block per thread read front to back, the others' backs taken once it is done, so a
  // thread slowed by the memory system or the OS does not leave the other waiting.
  std::vector<WorkSplit> splits_;
  Tensor thread_h_, thread_tmp_;   // [nt, d] each
  uint8_t* thread_act_ = nullptr;  // nt rows of act_stride_ bytes
  int64_t row_prefill_max_ = 0;    // forward rows that take rows_linear (0: never)
  uint8_t* rows_act_ = nullptr;    // row_prefill_max_ rows of act_stride_ bytes
  size_t act_stride_ = 0;
  bool fused_ = true;
  size_t call_mark_ = 0;
  T3Capture capture_;
};

}  // namespace cbx
