// CAMPPlus x-vector: S3Gen's 192-d speaker embedding (upstream models/s3gen/xvector.py,
// S3Gen.embed_ref; spec §5.3, §11.2).
//
//   wav [n] 16 kHz -> Kaldi fbank [T, 80] (audio/mel.h) -> minus its mean over time
//   head (FCM): conv2d 1->32 k3 + BN + ReLU, 2 x 2 residual blocks (first of each stride (2,1)),
//               conv2d k3 stride (2,1) + BN + ReLU                  [32, 10, T] -> [320, T]
//   tdnn: conv1d 320->128 k5 stride 2 pad 2 + BN + ReLU              [128, T/2]
//   3 CAM dense TDNN blocks (12/24/16 layers, growth 32, dilation 1/2/2), each + transit
//   (BN-ReLU-conv1x1 halving the channels)                          -> [512, T/2]
//   BN-ReLU, statistics pooling (mean | unbiased std over time), dense 1024 -> 192 + BN (no affine)
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace cbx {

class GgufFile;
class ThreadPool;
struct ModelConfig;

class CampPlus {
 public:
  // Binds campplus.* weights (errors name the tensor); reserves all scratch for 16 kHz inputs of up
  // to max_samples samples. Throws cbx::Error.
  CampPlus(const GgufFile& f, const ModelConfig& c, int64_t max_samples);
  ~CampPlus();
  CampPlus(const CampPlus&) = delete;
  CampPlus& operator=(const CampPlus&) = delete;

  // S3Gen's x-vector [c.campplus.embed_size=192] as upstream S3Gen.embed_ref computes it from
  // ref_wav_16 (speaker_encoder.inference: Kaldi fbank 80 + mean normalisation + CAMPPlus).
  // Throws cbx::Error (too short, n > max_samples).
  std::vector<float> embed(ThreadPool& pool, const float* wav, int64_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
