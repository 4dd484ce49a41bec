// CFM estimator: the S3Gen `ConditionalDecoder` (upstream models/s3gen/decoder.py with
// matcha/decoder.py and matcha/transformer.py; spec §8.4). With one channel level there is no
// down/up-sampling, so every block runs at the full length T:
//
//   temb = time_mlp(sinusoid(t))                                       [E]   (E = 4 C)
//   meanflow: temb = time_embed_mixer([temb | time_mlp(sinusoid(r))])   [E]   (no bias)
//   h    = [x | mu | spks broadcast over T | cond]                      [4 * 80, T]
//   down:  h = resnet(h); 4 x transformer; skip = h; h = causal_conv3(h * m)      [C, T]
//   mid:   12 x { h = resnet(h); 4 x transformer }
//   up:    h = resnet([h | skip]); 4 x transformer; h = causal_conv3(h * m)
//   out  = final_proj(causal_block(h) * m) * m                          [80, T]
//
//   sinusoid(t)[i] = sin(1000 t f_i), [half + i] = cos(1000 t f_i), f_i = exp(-i ln(1e4) / (half - 1))
//   time_mlp       = linear_2(silu(linear_1(.)))
//   causal_block   = x -> mish(LayerNorm_channels(CausalConv1d_k3(x * m))) * m   (eps 1e-5)
//   resnet(x)      = block2(block1(x) + mlp.1(mish(temb))) + res_conv_k1(x * m)
//   transformer    = x += to_out(attn(norm1(x)));  x += ff.net.2(gelu_erf(ff.net.0.proj(norm3(x))))
//                    (diffusers BasicTransformerBlock: LayerNorm eps 1e-5, q/k/v without bias,
//                    heads of 64, scale 1/8, bidirectional attention over the unmasked keys)
//
// m is the padding mask: upstream builds it from lengths (ones then zeros), so forward takes
// it as such a prefix mask. Masked keys get a -1e10 bias upstream, i.e. weight exactly 0,
// which is what restricting the keys to the valid prefix computes.
//
// Batch: rows are independent (B = 2 is the CFG pair of the Multilingual solver).
// Runtime: one Arena reserved at construction for max_batch x max_frames, plus one small scratch
// Arena per pool thread for the attention work items; forward allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/huge_buffer.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/conv.h"
#include "ops/matmul.h"

namespace cbx {

class GgufFile;

struct CfmResnetWeights {
  Tensor conv1_w, conv1_b, ln1_w, ln1_b;  // block1: [C, Cin, k], [C]; LayerNorm [C]
  Tensor conv2_w, conv2_b, ln2_w, ln2_b;  // block2: [C, C, k], [C]; LayerNorm [C]
  Tensor mlp_w, mlp_b;                    // mlp.1: [C, E], [C]
  Tensor res_w, res_b;                    // res_conv: [C, Cin, 1], [C]
};

struct CfmTransformerWeights {
  Tensor norm1_w, norm1_b;            // [C]
  Tensor to_q, to_k, to_v;            // [inner, C], no bias
  Tensor to_out_w, to_out_b;          // [C, inner], [C]
  Tensor norm3_w, norm3_b;            // [C]
  Tensor ff1_w, ff1_b, ff2_w, ff2_b;  // ff.net.0.proj [F, C], [F]; ff.net.2 [C, F], [C]
};

// resnet + transformer blocks (+ the causal conv that replaces the down/up-sampler).
struct CfmStageWeights {
  CfmResnetWeights resnet;
  std::vector<CfmTransformerWeights> blocks;
  Tensor conv_w, conv_b;  // [C, C, k], [C]; empty for mid blocks
};

// Where a tensor may be stored: Vector = F32 only; Matrix = any weight type the matmul takes;
// Conv = F32 (F16/BF16 are widened into `owned` at bind time).
enum class CfmWeightKind { Vector, Matrix, Conv };

struct CfmEstimatorWeights {
  Tensor time1_w, time1_b;  // time_mlp.linear_1: [E, S], [E]
  Tensor time2_w, time2_b;  // time_mlp.linear_2: [E, E], [E]
  Tensor mixer_w;           // time_embed_mixer: [E, 2E] (meanflow only)
  CfmStageWeights down;
  std::vector<CfmStageWeights> mid;
  CfmStageWeights up;
  Tensor final_conv_w, final_conv_b, final_ln_w, final_ln_b;  // final_block.block.{0,2}
  Tensor proj_w, proj_b;                                      // final_proj: [80, C, 1], [80]
  std::vector<HugePiece> owned;                               // f32 copies of the f16 / bf16 conv weights (huge pages)

  // Calls fn(gguf_name, slot, expected row-major shape, kind) for every weight of a config
  // (sizes the vectors first). Serves binding, tests and byte counts.
  using Visitor =
      std::function<void(const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, CfmWeightKind kind)>;
  void for_each_tensor(const CfmConfig& c, const Visitor& fn);
};

// Checks the hyper-parameters, then binds every weight by GGUF name (zero copy except widened
// convs). Errors name the tensor, its shape and the expected one. f must outlive the weights.
void bind_cfm_estimator(const GgufFile& f, const CfmConfig& c, CfmEstimatorWeights& w);

struct CfmEstimatorOptions {
  int64_t max_frames = 3000;  // most frames T one forward call takes (prompt + generated)
  int64_t max_batch = 1;      // 2 for the CFG pair
  // GEMM precision of the linears and convolutions (ops/matmul.h); attention stays f32.
  // Auto: ops/matmul.h resolve_packed_precision: F32 for f32 weights; for lossy ones (not F32)
  // Int8 where the VNNI int8 kernel runs (and no GemmPrecisionScope is held), else BF16.
  // Int8: the transformer linears (q|k|v, out, feed-forward) run the int8 GEMM (weights quantized
  // per channel at construction, activations per row); everything else as BF16.
  GemmPrecision gemm = GemmPrecision::Auto;
  // Per-call buffers in this arena instead of the estimator's own (see FlowEncoderOptions::work);
  // the output stays in the estimator's own arena.
  Arena* work = nullptr;
};

// Named intermediates, reported during forward when a capture function is set. `index` is the
// mid block for "mid.*", the transformer block within its stage for "*.tfm", else -1.
// Shapes are per call, F32:
//   "temb"        [B, E]       time embedding (after the mixer for meanflow)
//   "x_in"        [B, 320, T]  concatenated input
//   "down.resnet" [B, C, T]    "down.tfm" [B, T, C]   "down.out" [B, C, T] (after the conv)
//   "mid.resnet"  [B, C, T]    "mid.tfm"  [B, T, C]   (index: mid block; tfm: last block's output)
//   "up.resnet"   [B, C, T]    "up.tfm"   [B, T, C]   "up.out"   [B, C, T]
//   "final_block" [B, C, T]    "out"      [B, 80, T]
using CfmCapture = std::function<void(const char* name, int index, const Tensor& t)>;

class CfmEstimator {
 public:
  // c and w are referenced, not copied: they must outlive this object.
  CfmEstimator(const CfmConfig& c, const CfmEstimatorWeights& w, ThreadPool& pool, const CfmEstimatorOptions& o = {});
  CfmEstimator(const CfmEstimator&) = delete;
  CfmEstimator& operator=(const CfmEstimator&) = delete;

  // x, mu, cond: F32 [B, 80, T] (or [80, T] for B = 1), rows may be strided;
  // spks: F32 [B, 80] (or [80]); t, r: B times each (r only for meanflow, where it is required);
  // mask: empty (all frames valid) or F32 [T] of ones followed by zeros.
  // -> velocity F32 [B, 80, T], valid until the next call.
  const Tensor& forward(const Tensor& x, const Tensor& mask, const Tensor& mu, const float* t, const Tensor& spks,
                        const Tensor& cond, const float* r = nullptr);

  const CfmConfig& config() const { return c_; }
  int64_t max_frames() const { return max_frames_; }
  int64_t max_batch() const { return max_batch_; }
  GemmPrecision gemm_precision() const { return gemm_; }  // F32 or BF16, resolved at construction
  // The transformer linears' precision: gemm_precision(), or Int8.
  GemmPrecision linear_precision() const { return linear_; }
  void set_capture(CfmCapture fn) { capture_ = std::move(fn); }
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }
  size_t packed_weight_bytes() const { return packed_bytes_; }  // bf16 panels made at construction

 private:
  struct Bufs {                       // per-call activations
    Tensor temb, sin_in, h1, h2;      // [B, E], time embedding rows [n, S], [n, E] x 2 (n: 2B with meanflow)
    Tensor temb_act, tproj, xin, hs;  // [B, E], [n_res, B, C], [B, 4 M, T], [B, 2 C, T]
    Tensor t0, t1;                    // [B, C, T]
    Tensor xt;                        // [B, T, C]
    Tensor qkv, att, ff;              // [B, T, 3 inner], [B, T, inner], [B, T, F]
    Tensor vt;                        // [B, inner, T]: v transposed
  };
  // forward()'s per-call allocations in its order, on the work arena or on a plan sizing it.
  template <class A>
  static Bufs alloc_bufs(A& a, const CfmConfig& c, int64_t B, int64_t T);
  // The arena plans at max_batch x max_frames (each op's scratch after the activations) and the
  // per-thread scratch arenas of the f32 attention.
  void plan_arenas(const CfmEstimatorOptions& o);
  void emit(const char* name, int index, const Tensor& t) const {
    if (capture_) capture_(name, index, t);
  }
  void time_embedding(const float* t, const float* r, int64_t B, Bufs& b);
  void causal_block(const Tensor& x, const Tensor& conv_w, const Tensor& conv_b, const Tensor& ln_w, const Tensor& ln_b,
                    Tensor& y, int64_t n_valid);
  void resnet(const CfmResnetWeights& rw, Tensor& x, const Tensor& tproj, Tensor& y, Tensor& tmp, int64_t n_valid);
  void transformer(const CfmTransformerWeights& tw, Bufs& b, int64_t n_valid);
  void attention_f32(Tensor& q, const Tensor& k, const Tensor& v, Tensor& att, Tensor& vt_all, int64_t n_valid);
  void attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& att, int64_t n_valid);
  void stage(const CfmStageWeights& sw, const char* resnet_name, const char* tfm_name, int index, Tensor& x,
             Tensor& out, const Tensor& tproj, Bufs& b, int64_t n_valid);

  struct PackedBlock {  // one transformer block's matrices (ops/matmul.h PackedWeight)
    PackedWeight qkv;   // to_q | to_k | to_v: [3 inner, C]
    PackedWeight out, ff1, ff2;
  };
  const PackedBlock& packed_for(const CfmTransformerWeights& tw) const;

  const CfmConfig& c_;
  const CfmEstimatorWeights& w_;
  ThreadPool& pool_;
  int64_t max_frames_ = 0, max_batch_ = 0;
  GemmPrecision gemm_ = GemmPrecision::F32;
  GemmPrecision linear_ = GemmPrecision::F32;
  bool attn_bf16_ = false;  // attention_kernel(gemm_, head_dim) is Bf16: the fused attention_bf16
  Arena arena_;
  std::vector<std::unique_ptr<ThreadPool>> solo_;  // one single-thread pool per pool thread (attention)
  std::vector<Arena> solo_arena_;                  // their scratch
  std::vector<std::pair<const CfmTransformerWeights*, PackedBlock>> packed_;  // down, mid, up order
  size_t packed_bytes_ = 0;
  Conv1dPacks conv_packs_;  // every conv's bf16 direct-conv weights (BF16 only)
  Tensor out_buf_;          // [max_batch, 80, max_frames]
  Tensor out_;              // view for the last call
  size_t call_mark_ = 0;
  Arena* work_ = &arena_;  // per-call buffers (options.work or arena_ after call_mark_)
  size_t work_base_ = 0;
  CfmCapture capture_;
};

}  // namespace cbx
