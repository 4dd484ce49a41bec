// CAMPPlus x-vector: S3Gen's 192-d speaker embedding (upstream models/s3gen/xvector.py,
// S3Gen.embed_ref; spec §5.3, §11.2). Full-size shapes:
//
//   wav [n] 16 kHz -> Kaldi fbank [T, 80] (audio/mel.h), minus its mean over time
//   head (FCM), 2-D over (freq, time): conv3x3 1->32 + BN + ReLU [32, 80, T]; layer1, layer2:
//     2 residual blocks each, the first with stride (2, 1) and a 1x1 conv + BN shortcut
//     [32, 40, T] -> [32, 20, T]; conv3x3 stride (2, 1) + BN + ReLU [32, 10, T] = [320, T]
//   tdnn: conv1d 320->128 k5 stride 2 pad 2 + BN + ReLU            [128, T2], T2 = (T-1)/2 + 1
//   blocks 1..3 (12/24/16 layers, kernel 3, dilation 1/2/2), each layer on its input x [C, T2]:
//     b = ReLU(BN(conv1x1 C->128(ReLU(BN(x)))));  y = conv k3 dil d (128->32)(b)
//     ctx = mean_t(b) + mean of b over each 100-frame segment (the last may be partial)
//     y *= sigmoid(conv1x1 64->32(ReLU(conv1x1 128->64(ctx))));  x = concat(x, y)
//   transit after each block: conv1x1 C->C/2 (ReLU(BN(x)))        128->512->256->1024->512->1024->512
//   out: ReLU(BN(x)) [512, T2] -> mean | unbiased std over time [1024] -> linear 1024->192 -> BN
//
// Every BN is eval-mode; those after a conv are folded into its weights at bind time. The head's
// 3x3 convs run as conv1d over zero-bordered frequency-major maps (no im2col), each step one
// parallel region over output rows. Runtime: one Arena reserved at construction, ~31 KB per
// fbank frame at full size plus ~4 MB (35.6 MB for 10 s), most of it the head's [32, 80, T] and
// [32, 40, T] maps; embed() allocates only its result (2 MB per pool thread of head scratch is
// added the first time a larger pool is seen). Cost at full size: ~11 GFLOP per 10 s, ~45 % in
// the head.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace cbx {

class GgufFile;
class ThreadPool;
struct ModelConfig;
struct Tensor;

class CampPlus {
 public:
  // Binds campplus.* weights (errors name the tensor); reserves all scratch for 16 kHz inputs of up
  // to max_samples samples on pools of up to max_threads threads (sized by an ArenaPlan of
  // embed()'s allocations). Throws cbx::Error.
  CampPlus(const GgufFile& f, const ModelConfig& c, int64_t max_samples, int max_threads);
  ~CampPlus();
  CampPlus(const CampPlus&) = delete;
  CampPlus& operator=(const CampPlus&) = delete;

  // S3Gen's x-vector [c.campplus.embed_size=192] as upstream S3Gen.embed_ref computes it from
  // ref_wav_16 (speaker_encoder.inference: Kaldi fbank 80 + mean normalisation + CAMPPlus).
  // Throws cbx::Error (too short, n > max_samples, pool larger than max_threads).
  std::vector<float> embed(ThreadPool& pool, const float* wav, int64_t n);

  // The network alone on mean-normalised fbank features [T, feat_dim] (T <= the frames of
  // max_samples, T >= 3).
  std::vector<float> embed_fbank(ThreadPool& pool, const float* fbank, int64_t T);

  // Debug / parity: called during later calls with named intermediates: "fbank" [T, 80]
  // (embed only), "head" [320, T], "tdnn" [128, T2], "block1..3" [C, T2] (after the dense
  // block), "transit1..3" [C/2, T2], "stats" [2C]. Empty function: none.
  using Capture = std::function<void(const char* name, const Tensor& t)>;
  void set_capture(Capture fn);
  // Fbank frames of n samples (0 below one 400-sample frame).
  int64_t num_frames(int64_t n) const;

  // Bytes of the scratch arena reserved at construction, and the most any call has used.
  size_t arena_bytes() const;
  size_t arena_high_water() const;
  // The same for each pool thread's arena (the head's single-threaded convs).
  size_t thread_scratch_bytes() const;
  size_t thread_scratch_high_water() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
