// S3Gen flow front + UpsampleConformerEncoder (spec §8.1, §8.2, §8.2.1; upstream flow.py
// `inference`, transformer/upsample_encoder.py, encoder_layer.py, attention.py, embedding.py).
//
//   spks   = spk_embed_affine_layer(embedding / max(|embedding|, 1e-12))        [S] -> [M]
//   tokens = concat(prompt_tokens, tokens)                                       [L]
//   x      = input_embedding[tokens]                                             [L, d]
//   x      = LN_1e-5(embed.out.0(x)) * sqrt(d);  pos = rel table for L           [L, d], [2L-1, d]
//   x      = x + conv2(pad_l 2)(leaky_relu_0.01(conv1(pad_r P)(x^T)))^T          pre-lookahead
//   x      = n_encoders x conformer layer (pos)                                  [L, d]
//   x      = conv(pad_l K-1)(upsample_nearest_2(x^T))^T                          [2L, d]
//   x      = LN_1e-5(up_embed.out.0(x)) * sqrt(d);  pos = rel table for 2L
//   x      = n_up_encoders x conformer layer (pos);  after_norm (1e-5)           [2L, d]
//   mu     = encoder_proj(x)^T                                                   [M, 2L]
//   cond   = zeros [M, 2L] with cond[:, :Tm] = prompt_feat^T                     [M, 2L]
// Conformer layer (normalize_before, no macaron, no conv module), LN eps 1e-12:
//   x += linear_out(rel_attn(LN_mha(x), pos));  x += w_2(silu(w_1(LN_ff(x))))
// rel_attn, per head h (D = head_dim): scores[i, j] = ((q_i + u_h) k_j + (q_i + v_h) p_h[L-1-i+j]) / sqrt(D)
// where p = linear_pos(pos) and table row r holds relative position L-1-r, i.e. the ESPnet
// rel_shift is a strided view (row stride 2L-2, offset L-1) of the [L, 2L-1] matrix
// (q + v) p^T. Full bidirectional attention: no padding in a batch of one.
// Precision: at GemmPrecision::BF16 (lossy GGUFs) the linears run in bf16, and where the fused
// bf16 attention runs (ops/attention_bf16.h) so do (q + v) p^T and the attention, the
// position scores entering it as an f32 additive bias (test_gemm_bf16.sh bounds mu); at F32
// everything is f32 (the parity test).
//
// Runtime: one Arena reserved at construction for max_tokens (prompt + generated) holds the
// relative-position table, every activation and all op scratch; forward allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/conv.h"
#include "ops/matmul.h"

namespace cbx {

class GgufFile;

struct FlowConformerLayer {
  Tensor norm_mha_w, norm_mha_b;        // [d]
  Tensor q_w, q_b, k_w, k_b, v_w, v_b;  // [d, d], [d]
  Tensor out_w, out_b;                  // [d, d], [d]
  Tensor pos_w;                         // [d, d] (linear_pos, no bias)
  Tensor pos_bias_u, pos_bias_v;        // [H, D]
  Tensor norm_ff_w, norm_ff_b;          // [d]
  Tensor w1_w, w1_b;                    // [n_ff, d], [n_ff]
  Tensor w2_w, w2_b;                    // [d, n_ff], [d]
};

// Where a tensor may be stored: Vector/Conv = F32 only; Matrix = any float/quantized weight
// type (matmul); Embedding = any type get_rows reads.
enum class FlowWeightKind { Vector, Matrix, Conv, Embedding };

struct FlowEncoderWeights {
  Tensor input_embedding;             // [vocab, d]
  Tensor spk_affine_w, spk_affine_b;  // [M, S], [M]
  Tensor embed_w, embed_b;            // [d, d], [d]
  Tensor embed_ln_w, embed_ln_b;      // [d]
  Tensor pre_conv1_w, pre_conv1_b;    // [d, d, P+1], [d]
  Tensor pre_conv2_w, pre_conv2_b;    // [d, d, 3], [d]
  std::vector<FlowConformerLayer> encoders;
  Tensor up_conv_w, up_conv_b;          // [d, d, up_kernel], [d]
  Tensor up_embed_w, up_embed_b;        // [d, d], [d]
  Tensor up_embed_ln_w, up_embed_ln_b;  // [d]
  std::vector<FlowConformerLayer> up_encoders;
  Tensor after_norm_w, after_norm_b;  // [d]
  Tensor proj_w, proj_b;              // [M, d], [M] (encoder_proj)

  // Calls fn(gguf_name, slot, expected row-major shape, kind) for every weight (all required);
  // sizes the layer vectors first.
  using Visitor = std::function<void(const std::string& name, Tensor& slot, const std::vector<int64_t>& shape,
                                     FlowWeightKind kind)>;
  void for_each_tensor(const FlowConfig& c, const Visitor& fn);
};

// Binds every weight by GGUF name (zero copy), checking presence, shape and dtype; errors
// name the tensor. The GgufFile must outlive the weights.
void bind_flow_encoder(const GgufFile& f, const FlowConfig& c, FlowEncoderWeights& w);

struct FlowEncoderOptions {
  int64_t max_tokens = 0;  // most prompt + generated tokens one call takes (required, > 0)
  // GEMM precision of the linears and convolutions (ops/matmul.h); attention stays f32.
  // Auto: BF16 when the matmul weights are lossy (not F32), else F32.
  GemmPrecision gemm = GemmPrecision::Auto;
  // Per-call buffers in this arena instead of the encoder's own (S3GenStage: one arena for
  // flow, CFM and HiFT, which run one after the other); it must outlive the encoder and is
  // rewound by every call. The outputs stay in the encoder's own arena.
  Arena* work = nullptr;
};

// Outputs of one forward call; views into the encoder's own arena, valid until the next call.
struct FlowEncoderOutput {
  Tensor mu;                    // [M, T] F32, T = 2 L frames
  Tensor cond;                  // [M, T] F32: prompt_feat^T in the first n_prompt_frames columns, zeros after
  Tensor spks;                  // [M] F32
  int64_t n_frames = 0;         // T
  int64_t n_prompt_frames = 0;  // Tm: the CFM output is sliced from here (flow.py)
};

// Named intermediates, reported during forward when a capture function is set (F32):
//   flow_encoder.spks            [M]
//   flow_encoder.embedding       [L, d]   input_embedding rows
//   flow_encoder.embed           [L, d]   after embed (scaled by sqrt(d))
//   flow_encoder.pos_emb         [2L-1, d]
//   flow_encoder.pre_lookahead   [L, d]
//   flow_encoder.layerI.attn     [L, d]   x after the attention residual (I < n_encoders)
//   flow_encoder.layerI.out      [L, d]
//   flow_encoder.up_layer        [2L, d]  after upsample + conv
//   flow_encoder.up_embed        [2L, d]
//   flow_encoder.up_pos_emb      [4L-1, d]
//   flow_encoder.up_layerI.attn / .out [2L, d]
//   flow_encoder.after_norm      [2L, d]
//   flow_encoder.mu, flow_encoder.cond [M, 2L]
using FlowCapture = std::function<void(const std::string& name, const Tensor& t)>;

class FlowEncoder {
 public:
  // c and w are referenced, not copied: they must outlive this object.
  FlowEncoder(const FlowConfig& c, const FlowEncoderWeights& w, ThreadPool& pool, const FlowEncoderOptions& o);
  FlowEncoder(const FlowEncoder&) = delete;
  FlowEncoder& operator=(const FlowEncoder&) = delete;

  // prompt_tokens [Tp], tokens [N] (Tp + N <= max_tokens, every id < vocab, Tp + N > 0),
  // prompt_feat [Tm, M] row-major (Tm <= 2 (Tp + N); may be null when Tm = 0),
  // embedding [S] (the CAMPPlus x-vector).
  FlowEncoderOutput forward(const int32_t* prompt_tokens, int64_t n_prompt, const int32_t* tokens, int64_t n_tokens,
                            const float* prompt_feat, int64_t n_prompt_frames, const float* embedding,
                            int64_t n_embedding);

  void set_capture(FlowCapture fn) { capture_ = std::move(fn); }
  int64_t max_tokens() const { return max_tokens_; }
  GemmPrecision gemm_precision() const { return gemm_; }  // F32 or BF16, resolved at construction
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }

 private:
  struct Bufs;
  // forward()'s per-call buffers for L tokens in its order, on the work arena or on a plan.
  template <class A>
  Bufs alloc_bufs(A& a, int64_t L) const;
  // The arenas' sizes: the persistent buffers, then forward()'s at max_tokens with each op's
  // scratch as it takes it.
  void plan_arenas(const FlowEncoderOptions& o);
  void emit(const std::string& name, const Tensor& t) const {
    if (capture_) capture_(name, t);
  }
  // x: [n, d] in place; pos: [2n-1, d].
  void conformer_layer(const FlowConformerLayer& W, Tensor& x, const Tensor& pos, const Bufs& b,
                       const std::string& name);
  void attention_per_head(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qv, const Tensor& p,
                          const Bufs& b, Tensor& att);
  // x: [n, d] -> LN(linear(x)) * sqrt(d) in place.
  void embed(const Tensor& w, const Tensor& bias, const Tensor& ln_w, const Tensor& ln_b, Tensor& x, Tensor& tmp);
  Tensor pos_table(int64_t n) const;  // [2n-1, d] view of the table
  struct PackedLayer {                // one conformer layer's matrices (ops/matmul.h PackedWeight)
    PackedWeight q, k, v, out, pos, w1, w2;
  };
  const PackedLayer& packed_for(const FlowConformerLayer& W) const;

  const FlowConfig& c_;
  const FlowEncoderWeights& w_;
  ThreadPool& pool_;
  int64_t max_tokens_ = 0;
  GemmPrecision gemm_ = GemmPrecision::F32;
  bool attn_bf16_ = false;  // position scores + attention in bf16 (BF16 precision, fused kernel available)
  bool relpos_ = false;     // ... with the position term inside the kernel (attention_bf16_relpos)
  Arena arena_;
  Tensor pos_;  // [2 T_max - 1, d]: relative positions T_max-1 .. -(T_max-1)
  std::vector<std::pair<const FlowConformerLayer*, PackedLayer>> packed_;  // made at construction
  Conv1dPacks conv_packs_;  // pre-lookahead and upsampling convs in bf16 direct-conv layout (BF16 only)
  size_t call_mark_ = 0;
  Arena* work_ = &arena_;  // per-call buffers (options.work or arena_ after call_mark_)
  size_t work_base_ = 0;
  Tensor mu_buf_, cond_buf_, spks_buf_;  // the outputs, sized for max_tokens
  FlowCapture capture_;
};

}  // namespace cbx
