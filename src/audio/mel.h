// Mel filterbanks and the four feature front-ends of Chatterbox (architecture spec §12).
// Each front-end object owns its FFT plan, window, filterbank and scratch, built once;
// compute() may then be called repeatedly (one object per thread).
//
// Output layouts follow what the consuming upstream module sees:
//   S3TokenizerMel  [128, T]  (bins, frames)  = s3tokenizer log_mel_spectrogram()[0]
//   S3GenMel        [T, 80]   (frames, bins)  = prompt_feat[0] (mel_spectrogram(...)[0].T)
//   KaldiFbank      [T, 80]   (frames, bins)  = torchaudio kaldi.fbank (CAMPPlus input)
//   VoiceEncoderMel [T, 40]   (frames, bins)  = melspectrogram(wav, hp).T (VE LSTM input)
#pragma once
#include <complex>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "audio/stft.h"

namespace cbx {

enum class MelScale { Slaney, Htk };
enum class MelNorm { None, Slaney };

double hz_to_mel(double hz, MelScale scale);
double mel_to_hz(double mel, MelScale scale);

// Triangular filters [n_mels, n_fft/2 + 1] row-major over linear bins 0..sr/2, as
// librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk, norm) (float32 result) and
// torchaudio.functional.melscale_fbanks(...).T. fmax <= 0 means sr/2.
std::vector<float> mel_filterbank(int sample_rate, int n_fft, int n_mels, double fmin = 0.0, double fmax = 0.0,
                                  MelScale scale = MelScale::Slaney, MelNorm norm = MelNorm::Slaney);

// Kaldi/torchaudio.compliance.kaldi.get_mel_banks (no VTLN): [n_bins, padded_window/2 + 1],
// mel = 1127 ln(1 + f/700), the Nyquist column is zero. high_freq <= 0 is an offset from
// Nyquist.
std::vector<float> kaldi_mel_banks(int n_bins, int padded_window, double sample_rate, double low_freq = 20.0,
                                   double high_freq = 0.0);

// Sparse view of a filterbank: for each row the [begin, end) range of non-zero columns.
struct MelMatrix {
  int rows = 0, cols = 0;
  std::vector<float> w;                   // [rows, cols]
  std::vector<std::pair<int, int>> span;  // per row
  MelMatrix() = default;
  MelMatrix(std::vector<float> weights, int rows, int cols);
  float dot_row(int r, const float* x) const;  // sum_c w[r, c] x[c], c ascending
};

// (a) S3 tokenizer (16 kHz): torch.stft(n_fft 400, hop 160, periodic Hann, center, reflect),
// last frame dropped, |X|^2, librosa Slaney mel (128 bins, 0-8 kHz), log10(max(x, 1e-10)),
// floored at (max over the whole clip - 8), then (x + 4) / 4. T = n / 160; needs n > 200.
// Upstream's max_len cut happens after this (the max is taken over the whole input).
class S3TokenizerMel {
 public:
  static constexpr int kSampleRate = 16000, kNFft = 400, kHop = 160, kMels = 128;
  S3TokenizerMel();
  int64_t num_frames(size_t n) const { return int64_t(n) / kHop; }
  std::vector<float> compute(const float* wav16k, size_t n, int64_t* n_frames = nullptr);

 private:
  Stft stft_;
  MelMatrix mel_;
  std::vector<float> power_;
};

// (b) S3Gen prompt mel (24 kHz): reflect pad 720 both sides, torch.stft(n_fft 1920, hop 480,
// periodic Hann, center=False), sqrt(re^2 + im^2 + 1e-9), librosa Slaney mel (80 bins,
// 0-8 kHz), ln(max(x, 1e-5)). T = n / 480; needs n > 720.
class S3GenMel {
 public:
  static constexpr int kSampleRate = 24000, kNFft = 1920, kHop = 480, kMels = 80;
  S3GenMel();
  int64_t num_frames(size_t n) const;
  std::vector<float> compute(const float* wav24k, size_t n, int64_t* n_frames = nullptr);

 private:
  Stft stft_;
  MelMatrix mel_;
  std::vector<float> padded_;
  std::vector<std::complex<float>> spec_;
};

// (c) CAMPPlus input: torchaudio.compliance.kaldi.fbank(wave, num_mel_bins=80) with its
// defaults (16 kHz, 25 ms / 10 ms, snip_edges, dither 0 as used, DC removal, pre-emphasis
// 0.97, Povey window, FFT 512, power, 80 Kaldi mel bins 20-8000 Hz, ln(max(x, FLT_EPSILON)),
// no energy) then, when mean_norm, per-utterance mean subtraction over time (xvector.py).
// The wave is NOT rescaled to int16 range. T = 1 + (n - 400) / 160; needs n >= 400.
class KaldiFbank {
 public:
  static constexpr int kSampleRate = 16000, kWin = 400, kHop = 160, kNFft = 512, kMels = 80;
  KaldiFbank();
  int64_t num_frames(size_t n) const;
  std::vector<float> compute(const float* wav16k, size_t n, bool mean_norm = true, int64_t* n_frames = nullptr);
  // The same into caller memory: out holds num_frames(n) * kMels floats. Allocates nothing.
  void compute_into(const float* wav16k, size_t n, bool mean_norm, float* out);

 private:
  RealFft fft_;
  std::vector<float> window_;
  MelMatrix mel_;
  std::vector<float> frame_;
  std::vector<float> power_;
  std::vector<std::complex<float>> spec_;
};

// (d) Voice encoder (16 kHz): librosa.stft(n_fft 400, hop 160, Hann, center, reflect),
// |X|^2, librosa Slaney mel (40 bins, 0-8 kHz), no log. T = 1 + n / 160; needs n > 200.
class VoiceEncoderMel {
 public:
  static constexpr int kSampleRate = 16000, kNFft = 400, kHop = 160, kMels = 40;
  VoiceEncoderMel();
  int64_t num_frames(size_t n) const { return 1 + int64_t(n) / kHop; }
  std::vector<float> compute(const float* wav16k, size_t n, int64_t* n_frames = nullptr);
  // The same into caller memory: out holds num_frames(n) * kMels floats. Allocates nothing.
  void compute_into(const float* wav16k, size_t n, float* out);

 private:
  Stft stft_;
  MelMatrix mel_;
  std::vector<std::complex<float>> spec_;  // one frame
  std::vector<float> power_;               // one frame
};

// librosa.effects.trim(y, top_db, frame_length=2048, hop_length=512) as the voice encoder
// calls it: frame RMS (centred, zero padded) in dB relative to the loudest frame; keeps
// [first, last] frames above -top_db. Returns the [begin, end) sample range ({0, 0} if all
// silent). Allocates nothing (the frame energies are computed twice).
std::pair<size_t, size_t> trim_silence(const float* x, size_t n, double top_db = 20.0, int frame_length = 2048,
                                       int hop_length = 512);

}  // namespace cbx
