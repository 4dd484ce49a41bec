#include "audio/mel.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/error.h"

namespace cbx {

// Slaney (Auditory Toolbox) scale: linear below 1 kHz (200/3 Hz per mel), log above.
namespace {
constexpr double kSlaneyFsp = 200.0 / 3.0;
constexpr double kSlaneyMinLogHz = 1000.0;
constexpr double kSlaneyMinLogMel = kSlaneyMinLogHz / kSlaneyFsp;  // 15
const double kSlaneyLogStep = std::log(6.4) / 27.0;
}  // namespace

double hz_to_mel(double hz, MelScale scale) {
  if (scale == MelScale::Htk) return 2595.0 * std::log10(1.0 + hz / 700.0);
  if (hz >= kSlaneyMinLogHz) return kSlaneyMinLogMel + std::log(hz / kSlaneyMinLogHz) / kSlaneyLogStep;
  return hz / kSlaneyFsp;
}

double mel_to_hz(double mel, MelScale scale) {
  if (scale == MelScale::Htk) return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
  if (mel >= kSlaneyMinLogMel) return kSlaneyMinLogHz * std::exp(kSlaneyLogStep * (mel - kSlaneyMinLogMel));
  return kSlaneyFsp * mel;
}

std::vector<float> mel_filterbank(int sample_rate, int n_fft, int n_mels, double fmin, double fmax, MelScale scale,
                                  MelNorm norm) {
  CBX_CHECK(sample_rate > 0 && n_fft >= 2 && n_mels >= 1, "mel_filterbank: bad sr %d n_fft %d n_mels %d", sample_rate,
            n_fft, n_mels);
  if (fmax <= 0) fmax = sample_rate / 2.0;
  CBX_CHECK(fmin >= 0 && fmin < fmax && fmax <= sample_rate / 2.0,
            "mel_filterbank: bad range fmin %g fmax %g for sr %d", fmin, fmax, sample_rate);
  const int nb = n_fft / 2 + 1;
  std::vector<double> fft_hz(static_cast<size_t>(nb));
  for (int k = 0; k < nb; ++k) fft_hz[size_t(k)] = double(k) * (sample_rate / 2.0) / double(nb - 1);
  // n_mels + 2 band edges equally spaced on the mel scale.
  const double m0 = hz_to_mel(fmin, scale), m1 = hz_to_mel(fmax, scale);
  std::vector<double> edge(static_cast<size_t>(n_mels + 2));
  for (int i = 0; i < n_mels + 2; ++i)
    edge[size_t(i)] = mel_to_hz(m0 + (m1 - m0) * double(i) / double(n_mels + 1), scale);
  std::vector<float> w(size_t(n_mels) * nb);
  for (int m = 0; m < n_mels; ++m) {
    const double lo = edge[size_t(m)], c = edge[size_t(m + 1)], hi = edge[size_t(m + 2)];
    const double enorm = norm == MelNorm::Slaney ? 2.0 / (hi - lo) : 1.0;
    for (int k = 0; k < nb; ++k) {
      double up = (fft_hz[size_t(k)] - lo) / (c - lo);
      double down = (hi - fft_hz[size_t(k)]) / (hi - c);
      float tri = float(std::max(0.0, std::min(up, down)));  // librosa stores float32 first
      w[size_t(m) * nb + k] = norm == MelNorm::Slaney ? float(double(tri) * enorm) : tri;
    }
  }
  return w;
}

std::vector<float> kaldi_mel_banks(int n_bins, int padded_window, double sample_rate, double low_freq,
                                   double high_freq) {
  CBX_CHECK(n_bins > 3 && padded_window % 2 == 0, "kaldi_mel_banks: bad n_bins %d / window %d", n_bins, padded_window);
  const double nyquist = 0.5 * sample_rate;
  if (high_freq <= 0.0) high_freq += nyquist;
  CBX_CHECK(low_freq >= 0.0 && low_freq < nyquist && high_freq > 0.0 && high_freq <= nyquist && low_freq < high_freq,
            "kaldi_mel_banks: bad low %g / high %g vs nyquist %g", low_freq, high_freq, nyquist);
  auto mel = [](double f) { return 1127.0 * std::log(1.0 + f / 700.0); };
  const int n_fft_bins = padded_window / 2;
  const double bin_hz = sample_rate / padded_window;
  const double ml = mel(low_freq), mh = mel(high_freq);
  const double delta = (mh - ml) / (n_bins + 1);
  std::vector<float> w(size_t(n_bins) * (n_fft_bins + 1), 0.0f);
  for (int b = 0; b < n_bins; ++b) {
    const double left = ml + b * delta, center = ml + (b + 1) * delta, right = ml + (b + 2) * delta;
    for (int k = 0; k < n_fft_bins; ++k) {
      const double m = mel(bin_hz * k);
      const double up = (m - left) / (center - left), down = (right - m) / (right - center);
      w[size_t(b) * (n_fft_bins + 1) + k] = float(std::max(0.0, std::min(up, down)));
    }
  }
  return w;
}

MelMatrix::MelMatrix(std::vector<float> weights, int r, int c) : rows(r), cols(c), w(std::move(weights)) {
  CBX_ASSERT(w.size() == size_t(r) * c);
  span.resize(size_t(r));
  for (int i = 0; i < r; ++i) {
    const float* row = &w[size_t(i) * c];
    int b = 0, e = c;
    while (b < c && row[b] == 0.0f) ++b;
    while (e > b && row[e - 1] == 0.0f) --e;
    span[size_t(i)] = {b, e};
  }
}

float MelMatrix::dot_row(int r, const float* x) const {
  const float* row = &w[size_t(r) * cols];
  float acc = 0.0f;
  for (int c = span[size_t(r)].first; c < span[size_t(r)].second; ++c) acc += row[c] * x[c];
  return acc;
}

// ---- (a) S3 tokenizer ----
S3TokenizerMel::S3TokenizerMel()
    : stft_(kNFft, kHop, make_window(WindowKind::HannPeriodic, kNFft), true, StftPad::Reflect),
      mel_(mel_filterbank(kSampleRate, kNFft, kMels, 0.0, 0.0, MelScale::Slaney, MelNorm::Slaney), kMels,
           kNFft / 2 + 1) {}

std::vector<float> S3TokenizerMel::compute(const float* x, size_t n, int64_t* n_frames) {
  stft_.check_input(n);
  const int64_t T = num_frames(n);  // the STFT's last frame is dropped
  const int nb = stft_.bins();
  power_.resize(size_t(T) * nb);
  std::vector<std::complex<float>> row(static_cast<size_t>(nb));
  for (int64_t f = 0; f < T; ++f) {
    stft_.frame(x, n, f, row.data());
    for (int k = 0; k < nb; ++k) power_[size_t(f) * nb + k] = std::norm(row[size_t(k)]);
  }
  std::vector<float> out(size_t(kMels) * T);
  float mx = -INFINITY;
  for (int64_t f = 0; f < T; ++f)
    for (int m = 0; m < kMels; ++m) {
      float v = std::log10(std::max(mel_.dot_row(m, &power_[size_t(f) * nb]), 1e-10f));
      out[size_t(m) * T + f] = v;
      mx = std::max(mx, v);
    }
  const float floor = mx - 8.0f;
  for (float& v : out) v = (std::max(v, floor) + 4.0f) / 4.0f;
  if (n_frames) *n_frames = T;
  return out;
}

// ---- (b) S3Gen prompt mel ----
namespace {
constexpr int kS3GenPad = (S3GenMel::kNFft - S3GenMel::kHop) / 2;  // 720
}

S3GenMel::S3GenMel()
    : stft_(kNFft, kHop, make_window(WindowKind::HannPeriodic, kNFft), false, StftPad::Constant),
      mel_(mel_filterbank(kSampleRate, kNFft, kMels, 0.0, 8000.0, MelScale::Slaney, MelNorm::Slaney), kMels,
           kNFft / 2 + 1) {}

int64_t S3GenMel::num_frames(size_t n) const { return stft_.num_frames(n + 2 * kS3GenPad); }

std::vector<float> S3GenMel::compute(const float* x, size_t n, int64_t* n_frames) {
  CBX_CHECK(n > size_t(kS3GenPad), "s3gen mel: reflect padding of %d needs more than %d samples, got %zu", kS3GenPad,
            kS3GenPad, n);
  const size_t pn = n + 2 * kS3GenPad;
  padded_.resize(pn);
  for (int i = 0; i < kS3GenPad; ++i) {
    padded_[size_t(i)] = x[kS3GenPad - i];
    padded_[size_t(kS3GenPad) + n + i] = x[n - 2 - size_t(i)];
  }
  std::copy(x, x + n, padded_.begin() + kS3GenPad);
  const int64_t T = stft_.num_frames(pn);
  const int nb = stft_.bins();
  spec_.resize(size_t(nb));
  std::vector<float> mag(static_cast<size_t>(nb));
  std::vector<float> out(size_t(T) * kMels);
  for (int64_t f = 0; f < T; ++f) {
    stft_.frame(padded_.data(), pn, f, spec_.data());
    for (int k = 0; k < nb; ++k) {
      const float re = spec_[size_t(k)].real(), im = spec_[size_t(k)].imag();
      mag[size_t(k)] = std::sqrt(re * re + im * im + 1e-9f);
    }
    for (int m = 0; m < kMels; ++m) out[size_t(f) * kMels + m] = std::log(std::max(mel_.dot_row(m, mag.data()), 1e-5f));
  }
  if (n_frames) *n_frames = T;
  return out;
}

// ---- (c) Kaldi fbank ----
KaldiFbank::KaldiFbank()
    : fft_(kNFft),
      window_(make_window(WindowKind::Povey, kWin)),
      mel_(kaldi_mel_banks(kMels, kNFft, kSampleRate, 20.0, 0.0), kMels, kNFft / 2 + 1),
      frame_(kNFft, 0.0f),
      power_(kNFft / 2 + 1),
      spec_(kNFft / 2 + 1) {}

int64_t KaldiFbank::num_frames(size_t n) const { return n < size_t(kWin) ? 0 : 1 + (int64_t(n) - kWin) / kHop; }

std::vector<float> KaldiFbank::compute(const float* x, size_t n, bool mean_norm, int64_t* n_frames) {
  CBX_CHECK(n >= size_t(kWin), "kaldi fbank: need at least %d samples (one 25 ms frame), got %zu", kWin, n);
  const int64_t T = num_frames(n);
  std::vector<float> out(size_t(T) * kMels);
  compute_into(x, n, mean_norm, out.data());
  if (n_frames) *n_frames = T;
  return out;
}

void KaldiFbank::compute_into(const float* x, size_t n, bool mean_norm, float* out) {
  CBX_CHECK(n >= size_t(kWin), "kaldi fbank: need at least %d samples (one 25 ms frame), got %zu", kWin, n);
  const int64_t T = num_frames(n);
  const int nb = kNFft / 2 + 1;
  for (int64_t f = 0; f < T; ++f) {
    const float* s = x + f * kHop;
    double sum = 0.0;
    for (int i = 0; i < kWin; ++i) sum += s[i];
    const float mean = float(sum / kWin);
    float prev = s[0] - mean;  // replicate padding: the first sample's predecessor is itself
    for (int i = 0; i < kWin; ++i) {
      const float v = s[i] - mean;
      frame_[size_t(i)] = (v - 0.97f * prev) * window_[size_t(i)];
      prev = v;
    }
    std::fill(frame_.begin() + kWin, frame_.end(), 0.0f);
    fft_.forward(frame_.data(), spec_.data());
    for (int k = 0; k < nb; ++k) power_[size_t(k)] = std::norm(spec_[size_t(k)]);
    for (int m = 0; m < kMels; ++m)
      out[size_t(f) * kMels + m] = std::log(std::max(mel_.dot_row(m, power_.data()), FLT_EPSILON));
  }
  if (mean_norm && T > 0) {
    for (int m = 0; m < kMels; ++m) {
      double s = 0.0;
      for (int64_t f = 0; f < T; ++f) s += out[size_t(f) * kMels + m];
      const float mu = float(s / double(T));
      for (int64_t f = 0; f < T; ++f) out[size_t(f) * kMels + m] -= mu;
    }
  }
}

// ---- (d) voice encoder ----
VoiceEncoderMel::VoiceEncoderMel()
    : stft_(kNFft, kHop, make_window(WindowKind::HannPeriodic, kNFft), true, StftPad::Reflect),
      mel_(mel_filterbank(kSampleRate, kNFft, kMels, 0.0, 8000.0, MelScale::Slaney, MelNorm::Slaney), kMels,
           kNFft / 2 + 1),
      spec_(kNFft / 2 + 1),
      power_(kNFft / 2 + 1) {}

std::vector<float> VoiceEncoderMel::compute(const float* x, size_t n, int64_t* n_frames) {
  stft_.check_input(n);
  const int64_t T = num_frames(n);
  std::vector<float> out(size_t(T) * kMels);
  compute_into(x, n, out.data());
  if (n_frames) *n_frames = T;
  return out;
}

void VoiceEncoderMel::compute_into(const float* x, size_t n, float* out) {
  stft_.check_input(n);
  const int64_t T = num_frames(n);
  const int nb = stft_.bins();
  for (int64_t f = 0; f < T; ++f) {  // Stft::power, one frame at a time
    stft_.frame(x, n, f, spec_.data());
    for (int k = 0; k < nb; ++k) power_[size_t(k)] = std::norm(spec_[size_t(k)]);
    for (int m = 0; m < kMels; ++m) out[size_t(f) * kMels + m] = mel_.dot_row(m, power_.data());
  }
}

std::pair<size_t, size_t> trim_silence(const float* x, size_t n, double top_db, int frame_length, int hop_length) {
  CBX_CHECK(frame_length > 0 && hop_length > 0, "trim_silence: bad frame %d / hop %d", frame_length, hop_length);
  if (n == 0) return {0, 0};
  const int64_t half = frame_length / 2;
  // Centred frames over the zero-padded signal: 1 + n / hop of them.
  const int64_t frames = 1 + (int64_t(n) + 2 * half - frame_length) / hop_length;
  auto mean_square = [&](int64_t f) {  // rms^2 of frame f
    double s = 0.0;
    const int64_t a = f * hop_length - half;
    for (int64_t p = std::max<int64_t>(a, 0); p < std::min<int64_t>(a + frame_length, int64_t(n)); ++p)
      s += double(x[p]) * x[p];
    return s / frame_length;
  };
  double mx = 0.0;
  for (int64_t f = 0; f < frames; ++f) mx = std::max(mx, mean_square(f));
  const double amin = 1e-10;
  const double ref_db = 10.0 * std::log10(std::max(amin, mx));
  int64_t first = -1, last = -1;
  for (int64_t f = 0; f < frames; ++f) {
    double db = 10.0 * std::log10(std::max(amin, mean_square(f))) - ref_db;
    if (db > -top_db) {
      if (first < 0) first = f;
      last = f;
    }
  }
  if (first < 0) return {0, 0};
  return {size_t(first) * hop_length, std::min(n, size_t(last + 1) * hop_length)};
}

}  // namespace cbx
