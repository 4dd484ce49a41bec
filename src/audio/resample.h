// Sample-rate conversion. Upstream Chatterbox uses two different resamplers
// (architecture spec §5.2, §5.3, §15.9), and a parity-minded port needs both:
//
//  * resample_soxr: libsoxr, the engine behind librosa.load(sr=...) and librosa.resample
//    (default res_type "soxr_hq" = python-soxr quality "HQ" = soxr_quality_spec(SOXR_HQ, 0),
//    float32 I/O, then librosa's fix_length to ceil(n * out / in) samples). Used for file
//    loading to 24 kHz and for the full-length 24k -> 16k copy (T3 prompt tokens, VE).
//    We call the same library with the same recipe, so the result matches upstream up to
//    libsoxr build differences (python-soxr bundles its own libsoxr 0.1.3; Debian ships
//    0.1.3 too), i.e. float rounding, not filter design.
//
//  * SincResampler: torchaudio.functional.resample / transforms.Resample with its defaults
//    (sinc_interp_hann, lowpass_filter_width 6, rolloff 0.99), written out from the published
//    formula: a polyphase windowed-sinc FIR on the gcd-reduced rates. Used by S3Gen.embed_ref
//    for the 10 s 24k -> 16k copy (CAMPPlus x-vector and S3Gen prompt tokens).
#pragma once
#include <cstddef>
#include <vector>

namespace cbx {

enum class SoxrQuality { Quick, Low, Medium, High, VeryHigh };

// librosa.resample(x, orig_sr=in_rate, target_sr=out_rate) with res_type "soxr_<q>".
// Output length ceil(n * out_rate / in_rate). Returns a copy when the rates are equal.
std::vector<float> resample_soxr(const float* x, size_t n, double in_rate, double out_rate,
                                 SoxrQuality quality = SoxrQuality::High);

class SincResampler {
 public:
  SincResampler(int in_rate, int out_rate, int lowpass_filter_width = 6, double rolloff = 0.99);
  // Output length ceil(n * out_rate / in_rate).
  std::vector<float> process(const float* x, size_t n) const;
  size_t output_length(size_t n) const;

 private:
  int in_ = 1, out_ = 1;       // gcd-reduced rates
  int width_ = 0;              // taps reach `width_` input samples either side
  int taps_ = 0;               // 2 * width_ + in_
  std::vector<float> kernel_;  // [out_, taps_]
};

}  // namespace cbx
