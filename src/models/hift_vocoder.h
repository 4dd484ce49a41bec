// HiFT vocoder, mel -> 24 kHz waveform (upstream models/s3gen/hifigan.py HiFTGenerator.inference
// and f0_predictor.py; spec §9), plus the S3Gen start trim/fade (spec §10).
//
//   mel [80, T] (natural-log amplitude)
//   f0     = |classifier(ELU(conv3(...ELU(conv3(mel)))))|            [T] Hz (5 convs, k 3, pad 1)
//   f0 up  = nearest x (prod(upsample_rates) * hop) = 480             [N = 480 T]
//   sine_h = 0.1 sin(2 pi frac(cumsum_t(f0 (h+1) / 24000)) + phi_h)   h = 0..8, phi_0 = 0
//   uv     = f0 > 10;  e_h = sine_h uv + (uv ? 0.003 : 0.1/3) noise_h
//   source = tanh(l_linear(e))                                        [N]
//   s_stft = STFT(source; n_fft 16, hop 4, periodic Hann, center, reflect): re | im  [18, F = N/4 + 1]
//   x = conv_pre(mel)                                                 [512, T]
//   stage i = 0..2: x = ups_i(leaky_relu(x, 0.1))  (ConvTranspose1d, pad (k-u)/2)
//                   last stage: ReflectionPad1d((1, 0))             [512 >> (i+1), 8T | 40T | 120T+1]
//                   x += source_resblock_i(source_down_i(s_stft))
//                   x = mean_j resblock_{3i+j}(x)                     (kernels 3, 7, 11)
//   o = conv_post(leaky_relu(x, 0.01))                                [18, F]
//   wave = clamp(iSTFT(min(exp(o[0:9]), 100) e^{i sin(o[9:18])}), -0.99, 0.99)   [N]
// ResBlock(k, dilations d): x += conv2(snake2(conv1_d(snake1(x)))) for each d.
//
// Random draws (upstream SineGen, unseeded there): one phase per harmonic, U(-pi, pi), with
// phi_0 forced to 0, and N(0, 1) noise [9, N] (torch.randn_like(sine_waves), harmonic-major).
// They can be injected (HiftDraws) so a parity test shares them with PyTorch; otherwise a
// seeded generator of our own draws them (same seed and call order -> same waveform, for any
// thread count).
//
// Runtime: one Arena reserved at construction for max_frames; forward allocates nothing.
// At full size that is ~0.23 MB per frame (115.7 MB for 500 frames = 10 s): five activation
// slabs of the largest stage [64, 120 T + 1], the [9, 480 T] noise and phase-cycle buffers,
// and the conv scratch. Cost at full size: ~306 GFLOP per 10 s of audio, 92 % of it in the
// resblock and source-resblock convolutions (GEMM-bound).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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
class RealFft;

// Weight norm is already fused by the converter (docs/gguf-format.md), so every conv has a
// plain weight and bias.
struct HiftResBlockWeights {
  int32_t kernel = 0;
  std::vector<int32_t> dilations;
  std::vector<Tensor> conv1_w, conv1_b;  // per dilation: [C, C, k], [C] (dilation d)
  std::vector<Tensor> conv2_w, conv2_b;  // per dilation: [C, C, k], [C] (dilation 1)
  std::vector<Tensor> alpha1, alpha2;    // per dilation: [C] Snake alphas (linear scale)
};

struct HiftWeights {
  Tensor l_linear_w, l_linear_b;                       // [1, nb_harmonics + 1], [1]
  Tensor conv_pre_w, conv_pre_b;                       // [C0, in_channels, conv_pre_kernel], [C0]
  std::vector<Tensor> ups_w, ups_b;                    // stage i: [C0 >> i, C0 >> (i+1), k_i], [C0 >> (i+1)]
  std::vector<Tensor> source_downs_w, source_downs_b;  // stage i: [C0 >> (i+1), n_fft + 2, 2u | 1]
  std::vector<HiftResBlockWeights> source_resblocks;   // one per stage
  std::vector<HiftResBlockWeights> resblocks;          // stage-major: stage i, kernel j at i * nk + j
  Tensor conv_post_w, conv_post_b;                     // [n_fft + 2, C0 >> n_stages, 7], [n_fft + 2]
  std::vector<Tensor> f0_w, f0_b;                      // condnet 2l: [Cf, in_channels | Cf, 3], [Cf]
  Tensor f0_cls_w, f0_cls_b;                           // [1, Cf], [1]
  // F32 copies of weights stored as F16/BF16 in the file (stable addresses, huge pages).
  std::vector<HugePiece> owned;

  // Calls fn(gguf_name, slot, expected row-major shape, is_vector) for every weight of a
  // config, sizing the vectors first. is_vector: stored as F32 only (biases, alphas).
  using Visitor =
      std::function<void(const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, bool is_vector)>;
  void for_each_tensor(const HiftConfig& c, const Visitor& fn);
};

// Checks the hyper-parameters, then binds every weight by GGUF name (zero copy for F32;
// F16/BF16 convs and linears are widened into w.owned). Errors name the tensor, its shape
// and the expected one. The GgufFile must outlive the weights.
void bind_hift(const GgufFile& f, const HiftConfig& c, HiftWeights& w);

struct HiftOptions {
  int64_t max_frames = 1500;  // most mel frames one forward call takes (30 s)
  uint64_t seed = 0;          // generator used when forward gets no HiftDraws
  // GEMM precision of the convolutions (ops/matmul.h). Auto: BF16 when
  // the GGUF's weights are lossy (general.file_type other than all-F32), else F32.
  GemmPrecision gemm = GemmPrecision::Auto;
  // Per-call buffers in this arena instead of the vocoder's own (see FlowEncoderOptions::work);
  // the generator draws and the wave stay in the vocoder's own arena.
  Arena* work = nullptr;
};

// Injected random draws (see the header comment). Both must be set.
struct HiftDraws {
  const float* phases = nullptr;  // [nb_harmonics + 1], as drawn; element 0 is ignored (upstream zeroes it)
  const float* noise = nullptr;   // [nb_harmonics + 1, samples_per_frame * T], N(0, 1)
  // Streaming (pipeline/stream_synth.h) continues a waveform in pieces:
  int64_t noise_stride = 0;  // floats between noise rows; 0 = samples_per_frame * T
  // [nb_harmonics + 1] frac(cumsum) of each harmonic at the start of frame cycle_frame (the
  // source runs back from there with this call's f0), so a continuation meets the phase the
  // previous piece had at a join; null = 0 at the first sample, a waveform's start.
  const double* cycle_start = nullptr;
  int64_t cycle_frame = 0;
};

// Named intermediates, reported during forward when a capture function is set (stage -1 for
// the ones outside the upsampling stages). All F32:
//   "f0"            [T]            predicted f0 (Hz)
//   "source"        [N]            tanh(l_linear(e)), the excitation
//   "s_stft"        [18, F]        real parts, then imaginary parts
//   "conv_pre"      [C0, T]
//   "ups"           [C, L]         stage i: upsampled x (after the reflection pad on the last)
//   "source_branch" [C, L]         stage i: source_resblock(source_down(s_stft))
//   "stage"         [C, L]         stage i: mean of the resblocks
//   "conv_post"     [18, F]
//   "wave"          [N]            after the clamp
using HiftCapture = std::function<void(const char* name, int stage, const Tensor& t)>;

class HiftVocoder {
 public:
  // Reads the config from f and binds the HiFT weights (f must outlive this object).
  HiftVocoder(const GgufFile& f, ThreadPool& pool, const HiftOptions& o = {});
  HiftVocoder(const ModelConfig& c, const GgufFile& f, ThreadPool& pool, const HiftOptions& o = {});
  ~HiftVocoder();
  HiftVocoder(const HiftVocoder&) = delete;
  HiftVocoder& operator=(const HiftVocoder&) = delete;

  // mel: F32 [in_channels, T] (rows may be strided), 1 <= T <= max_frames
  // -> wave F32 [samples_per_frame() * T], valid until the next call.
  // draws == nullptr: phases and noise come from the seeded generator.
  const Tensor& forward(const Tensor& mel, const HiftDraws* draws = nullptr);

  // Restarts the generator (the k-th generated call after set_seed(s) is always the same;
  // calls with injected draws do not advance it).
  void set_seed(uint64_t seed);
  // The generator's state (seed, generated calls since set_seed), as CfmSolver's.
  uint64_t generator_seed() const { return seed_; }
  uint64_t generator_calls() const { return n_calls_; }
  void set_generator(uint64_t seed, uint64_t calls) {
    seed_ = seed;
    n_calls_ = calls;
  }
  // Streaming: takes the draws of the next generated call without running it (it advances the
  // generator as that call would): its phases [nb_harmonics + 1] and the key of its noise,
  // which fill_noise then writes block by block (kNoiseBlock samples per harmonic; a
  // sample's value depends only on the key, its harmonic and its position, not on the length).
  static constexpr int64_t kNoiseBlock = 65536;
  uint64_t take_draws(float* phases);
  // Blocks [blk0, blk1) of the key's noise into noise (rows of `stride` floats, positions < n).
  void fill_noise(uint64_t key, int64_t blk0, int64_t blk1, float* noise, int64_t stride, int64_t n);
  // The f0 [T] the last forward call predicted.
  const std::vector<float>& last_f0() const { return last_f0_; }
  // cycles [nb_harmonics + 1] (frac(cumsum) per harmonic) advanced over T frames of f0, as
  // the source accumulates them; the result seeds HiftDraws::cycle_start of a continuation.
  void advance_cycles(const float* f0, int64_t T, double* cycles) const;
  int64_t samples_per_frame() const { return spf_; }  // prod(upsample_rates) * hop = 480
  int64_t max_frames() const { return max_frames_; }
  int n_harmonic_channels() const { return cfg_.nb_harmonics + 1; }
  const HiftConfig& config() const { return cfg_; }
  GemmPrecision gemm_precision() const { return gemm_; }  // F32 or BF16, resolved at load
  const HiftWeights& weights() const { return w_; }
  void set_capture(HiftCapture fn) { capture_ = std::move(fn); }
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }

  // Per-phase wall time of the last forward call, in ms (for benchmarks and --timing).
  struct Timing {
    double f0 = 0, source = 0, stft = 0, conv_pre = 0, istft = 0, total = 0;
    std::vector<double> ups, source_branch, resblocks;  // per stage
  };
  const Timing& last_timing() const { return timing_; }

 private:
  void init(const GgufFile& f, const HiftOptions& o);
  void emit(const char* name, int stage, const Tensor& t) const {
    if (capture_) capture_(name, stage, t);
  }
  void run_resblock(const HiftResBlockWeights& rb, const Tensor& in, Tensor& out, Tensor& t1, Tensor& t2);
  void generate_draws(int64_t n);
  void f0_predict(const Tensor& mel, Tensor& h0, Tensor& h1, Tensor& f0);
  void make_source(const Tensor& f0, const float* phases, const float* noise, int64_t noise_stride,
                   const double* cycle_start, int64_t cycle_frame, int64_t n, Tensor& src);
  // source [N] -> s_stft [n_fft + 2, F]: torch.stft(center, reflect, periodic Hann), re | im.
  void source_stft(const float* src, int64_t n, float* s_stft);
  // re, im [bins, F] -> wave [N]: torch.istft (center, default length); frames: [F, n_fft] scratch.
  void istft(const float* re, const float* im, int64_t F, float* frames, float* wave);

  HiftConfig cfg_;
  HiftWeights w_;
  ThreadPool& pool_;
  int64_t max_frames_ = 0, spf_ = 0;
  int n_stages_ = 0, n_kernels_ = 0;
  uint64_t seed_ = 0, n_calls_ = 0;
  GemmPrecision gemm_ = GemmPrecision::F32;
  Conv1dPacks conv_packs_;                        // bf16 direct-conv weights of conv_pre and the resblocks (BF16 only)
  std::vector<ConvTranspose1dPacked> ups_packs_;  // per stage, transposed upsampling weights (BF16 only)
  std::vector<float> window_;                     // periodic Hann [n_fft]
  std::vector<std::unique_ptr<RealFft>> ffts_;    // one per pool thread
  std::vector<std::vector<float>> fft_bufs_;      // per thread: n_fft reals + (bins) complex
  Arena arena_;
  // Persistent buffers (sized for max_frames), then per-call scratch after call_mark_.
  Tensor gen_noise_;  // [H, max N] generator output
  std::vector<float> gen_phases_;
  std::vector<float> last_f0_;  // reserved for max_frames
  Tensor cycles_;               // [H, max N] frac(cumsum) per harmonic
  Tensor wave_;                 // [N] view of the output buffer
  Tensor wave_buf_;             // [max N]
  size_t call_mark_ = 0;
  Arena* work_ = &arena_;  // per-call buffers (options.work or arena_ after call_mark_)
  size_t work_base_ = 0;
  HiftCapture capture_;
  Timing timing_;
};

// S3Gen start trim/fade (spec §10): the first n_trim samples are zeroed and the next n_trim
// multiplied by (cos(linspace(pi, 0, n_trim)) + 1) / 2, a 0 -> 1 raised cosine.
// Samples beyond n are ignored when the wave is shorter.
void hift_trim_fade(float* wave, int64_t n, int64_t n_trim);

}  // namespace cbx
