// S3TokenizerV2: 16 kHz speech -> 25 Hz speech tokens (spec §11.3, §12(a); upstream
// S3Tokenizer model_v2.py AudioEncoderV2 + FSQCodebook, chatterbox s3tokenizer.py forward).
//
//   mel   = log-mel 128 (S3TokenizerMel), cut to 4 * max_tokens frames           [128, T100]
//   x     = gelu(conv1(k3, s2, p1)(mel));  x = gelu(conv2(k3, s2, p1)(x))         [1280, T25]
//   x     = x^T                                                                    [T, 1280]
//   n_layer x block:
//     h  = LN_1e-6(x);  q = rope(h Wq + bq), k = rope(h Wk), v = h Wv + bv        [T, 1280]
//     m  = depthwise_conv(k 31, pad 15)(v^T)^T + v                                 FSMN memory
//     x += out(softmax(q k^T (per head, q and k each scaled by 64^-1/4)) v) + m
//     x += mlp.2(gelu(mlp.0(LN_1e-5(x))))
//   h     = project_down(x)                                                        [T, 8]
//   token = sum_i (round_half_even(tanh(h_i) * 0.999) + 1) * 3^i                   [T]
//
// A batch of one has no padding, so upstream's masks are all ones and drop out.
// Runtime: everything (activations, op scratch) lives in one arena sized at construction by
// an ArenaPlan of tokenize()'s allocations at max_samples on pools of up to max_threads;
// tokenize() allocates only its return vector.
// Precision: the linears and convolutions run F32 GEMMs by default, whatever the weight type
// or the model's GEMM precision say: upstream runs the tokenizer in f32, and the FSQ rounding turns small
// deviations into different tokens (BF16 GEMMs change ~2-3 % of the full-size model's tokens).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/matmul.h"

namespace cbx {

class GgufFile;
class ThreadPool;
struct ModelConfig;

// Named intermediates, reported during tokenize() when a capture function is set (F32):
//   s3tok.mel          [128, T100]  after the max_tokens cut
//   s3tok.conv2        [T, 1280]    conv stem output (after the transpose)
//   s3tok.blockI.out   [T, 1280]    after block I
//   s3tok.project_down [T, 8]       the FSQ projection (before tanh)
using S3TokCapture = std::function<void(const std::string& name, const Tensor& t)>;

class S3Tokenizer {
 public:
  // Binds s3tok.* weights (zero copy; errors name the tensor; the GgufFile must outlive this
  // object) and reserves all scratch for inputs of up to max_samples samples at 16 kHz on
  // pools of up to max_threads threads. Throws cbx::Error.
  S3Tokenizer(const GgufFile& f, const ModelConfig& c, int64_t max_samples, int max_threads);
  ~S3Tokenizer();
  S3Tokenizer(const S3Tokenizer&) = delete;
  S3Tokenizer& operator=(const S3Tokenizer&) = delete;

  // 25 Hz speech tokens as upstream S3Tokenizer.forward([wav], max_len=max_tokens) returns them
  // (log-mel 128, encoder, FSQ). max_tokens < 0: no limit. Throws cbx::Error (too short,
  // n > max_samples, pool larger than max_threads).
  std::vector<int32_t> tokenize(ThreadPool& pool, const float* wav, int64_t n, int64_t max_tokens = -1);

  // Tokens produced for n samples cut to max_tokens (< 0: no limit): ceil(ceil(T100/2)/2),
  // T100 = min(n / 160, 4 max_tokens).
  static int64_t num_tokens(int64_t n, int64_t max_tokens = -1);
  int64_t max_samples() const;
  int max_threads() const;
  // The arena reserved at construction and the most of it any call has used so far.
  size_t arena_bytes() const;
  size_t arena_high_water() const;
  void set_capture(S3TokCapture fn);
  // GEMM precision of the linears and the conv stem (ops/matmul.h) for later calls: F32 (the
  // default), BF16 (faster on AMX, tokens differ), or Auto (BF16 for lossy weights, else
  // F32). The FSMN depthwise convolution and the attention always run in f32.
  void set_gemm_precision(GemmPrecision p);
  GemmPrecision gemm_precision() const;  // as resolved: F32 or BF16

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
