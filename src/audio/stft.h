// Windows, STFT and inverse STFT with torch.stft / torch.istft semantics:
//  * a window shorter than n_fft is zero-padded on both sides (left = (n_fft - win) / 2);
//  * center=true pads n_fft/2 on both sides (reflect: x[-i] = x[i], x[n-1+i] = x[n-1-i],
//    which needs n > n_fft/2, as torch demands), giving 1 + n / hop frames; center=false
//    gives 1 + (n - n_fft) / hop frames (0 when n < n_fft);
//  * the spectrum is onesided (n_fft/2 + 1 bins) and unnormalised;
//  * istft is irfft (1/n_fft), window, overlap-add, divided by the overlap-added squared
//    window, then the n_fft/2 centre padding trimmed; its default length is hop*(frames-1)
//    with center (n_fft + hop*(frames-1) without). Positions whose envelope is below 1e-11
//    throw, as torch's NOLA check does.
// Padding is done by index mapping, so neither class allocates per call (Istft keeps one
// envelope buffer that only grows).
#pragma once
#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "audio/fft.h"

namespace cbx {

enum class WindowKind {
  HannPeriodic,   // torch.hann_window(N) / scipy get_window("hann", N) / librosa "hann"
  HannSymmetric,  // torch.hann_window(N, periodic=False)
  Povey,          // Kaldi: HannSymmetric ** 0.85
  Rectangular,
};
// Computed in double, rounded to float.
std::vector<float> make_window(WindowKind kind, int length);

enum class StftPad { Reflect, Constant };

class Stft {
 public:
  Stft(int n_fft, int hop, const std::vector<float>& window, bool center = true, StftPad pad = StftPad::Reflect);
  int n_fft() const { return n_fft_; }
  int hop() const { return hop_; }
  int bins() const { return n_fft_ / 2 + 1; }
  int64_t num_frames(size_t n) const;
  // Throws if n is too short for the padding mode (reflect needs n > n_fft/2).
  void check_input(size_t n) const;

  // Complex spectrum, element (frame f, bin k) written to out[f * frame_stride + k * bin_stride].
  // [frames, bins] row-major: frame_stride = bins(), bin_stride = 1 (torch.stft(...).T);
  // [bins, frames] (torch layout): frame_stride = 1, bin_stride = frames.
  void forward(const float* x, size_t n, std::complex<float>* out, ptrdiff_t frame_stride, ptrdiff_t bin_stride);
  // Real and imaginary parts into separate planes with the same stride convention
  // (HiFT's s_stft: re at [k, f], im at [bins + k, f]).
  void forward_planar(const float* x, size_t n, float* re, float* im, ptrdiff_t frame_stride, ptrdiff_t bin_stride);
  // |X|^2 as [frames, bins] row-major.
  void power(const float* x, size_t n, float* out);
  // One frame: windowed, zero-extended to n_fft, transformed (bins() values).
  void frame(const float* x, size_t n, int64_t f, std::complex<float>* out);

 private:
  int n_fft_, hop_;
  bool center_;
  StftPad pad_;
  std::vector<float> window_;  // n_fft long (padded)
  std::vector<float> buf_;
  std::vector<std::complex<float>> row_;
  std::unique_ptr<RealFft> fft_;
};

class Istft {
 public:
  Istft(int n_fft, int hop, const std::vector<float>& window, bool center = true);
  int bins() const { return n_fft_ / 2 + 1; }
  size_t default_length(int64_t frames) const;
  // spec element (f, k) read from spec[f * frame_stride + k * bin_stride]; writes `length`
  // samples (use default_length(frames) for torch.istft's default).
  void inverse(const std::complex<float>* spec, int64_t frames, ptrdiff_t frame_stride, ptrdiff_t bin_stride,
               float* out, size_t length);
  void inverse_planar(const float* re, const float* im, int64_t frames, ptrdiff_t frame_stride, ptrdiff_t bin_stride,
                      float* out, size_t length);

 private:
  template <typename Get>
  void run(Get get, int64_t frames, float* out, size_t length);
  int n_fft_, hop_;
  bool center_;
  std::vector<float> window_;
  std::vector<std::complex<float>> cbuf_;
  std::vector<float> tbuf_;
  std::vector<float> env_;
  std::unique_ptr<RealFft> fft_;
};

}  // namespace cbx
