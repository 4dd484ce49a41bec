#include "audio/stft.h"

#include <cmath>

#include "core/error.h"

namespace cbx {

std::vector<float> make_window(WindowKind kind, int length) {
  CBX_CHECK(length >= 1, "make_window: bad length %d", length);
  std::vector<float> w(static_cast<size_t>(length));
  if (length == 1) {
    w[0] = 1.0f;
    return w;
  }
  for (int i = 0; i < length; ++i) {
    double v = 1.0;
    switch (kind) {
      case WindowKind::HannPeriodic:
        v = 0.5 - 0.5 * std::cos(2.0 * M_PI * i / length);
        break;
      case WindowKind::HannSymmetric:
        v = 0.5 - 0.5 * std::cos(2.0 * M_PI * i / (length - 1));
        break;
      case WindowKind::Povey:
        v = std::pow(0.5 - 0.5 * std::cos(2.0 * M_PI * i / (length - 1)), 0.85);
        break;
      case WindowKind::Rectangular:
        v = 1.0;
        break;
    }
    w[size_t(i)] = float(v);
  }
  return w;
}

namespace {
std::vector<float> pad_window(const std::vector<float>& w, int n_fft, const char* who) {
  CBX_CHECK(!w.empty() && int(w.size()) <= n_fft, "%s: window length %zu must be in [1, n_fft=%d]", who, w.size(),
            n_fft);
  std::vector<float> out(size_t(n_fft), 0.0f);
  size_t left = (size_t(n_fft) - w.size()) / 2;
  for (size_t i = 0; i < w.size(); ++i) out[left + i] = w[i];
  return out;
}
}  // namespace

Stft::Stft(int n_fft, int hop, const std::vector<float>& window, bool center, StftPad pad)
    : n_fft_(n_fft), hop_(hop), center_(center), pad_(pad) {
  CBX_CHECK(n_fft >= 2 && hop >= 1, "Stft: bad n_fft %d / hop %d", n_fft, hop);
  window_ = pad_window(window, n_fft, "Stft");
  buf_.resize(size_t(n_fft));
  row_.resize(size_t(bins()));
  fft_ = std::make_unique<RealFft>(n_fft);
}

int64_t Stft::num_frames(size_t n) const {
  if (center_) return 1 + int64_t(n) / hop_;
  if (n < size_t(n_fft_)) return 0;
  return 1 + (int64_t(n) - n_fft_) / hop_;
}

void Stft::check_input(size_t n) const {
  if (center_ && pad_ == StftPad::Reflect)
    CBX_CHECK(n > size_t(n_fft_ / 2), "stft: reflect padding of %d needs more than %d input samples, got %zu",
              n_fft_ / 2, n_fft_ / 2, n);
}

void Stft::frame(const float* x, size_t n, int64_t f, std::complex<float>* out) {
  const int64_t pad = center_ ? n_fft_ / 2 : 0;
  const int64_t start = f * hop_ - pad;
  const int64_t sn = int64_t(n);
  for (int t = 0; t < n_fft_; ++t) {
    int64_t p = start + t;
    float v;
    if (p >= 0 && p < sn) {
      v = x[p];
    } else if (pad_ == StftPad::Reflect) {
      int64_t q = p < 0 ? -p : 2 * (sn - 1) - p;
      v = (q >= 0 && q < sn) ? x[q] : 0.0f;  // q always valid after check_input
    } else {
      v = 0.0f;
    }
    buf_[size_t(t)] = v * window_[size_t(t)];
  }
  fft_->forward(buf_.data(), out);
}

void Stft::forward(const float* x, size_t n, std::complex<float>* out, ptrdiff_t frame_stride, ptrdiff_t bin_stride) {
  check_input(n);
  const int64_t frames = num_frames(n);
  const int nb = bins();
  if (frame_stride == nb && bin_stride == 1) {
    for (int64_t f = 0; f < frames; ++f) frame(x, n, f, out + f * nb);
    return;
  }
  std::complex<float>* row = row_.data();
  for (int64_t f = 0; f < frames; ++f) {
    frame(x, n, f, row);
    for (int k = 0; k < nb; ++k) out[f * frame_stride + k * bin_stride] = row[k];
  }
}

void Stft::forward_planar(const float* x, size_t n, float* re, float* im, ptrdiff_t frame_stride,
                          ptrdiff_t bin_stride) {
  check_input(n);
  const int64_t frames = num_frames(n);
  const int nb = bins();
  std::complex<float>* row = row_.data();
  for (int64_t f = 0; f < frames; ++f) {
    frame(x, n, f, row);
    for (int k = 0; k < nb; ++k) {
      re[f * frame_stride + k * bin_stride] = row[k].real();
      im[f * frame_stride + k * bin_stride] = row[k].imag();
    }
  }
}

void Stft::power(const float* x, size_t n, float* out) {
  check_input(n);
  const int64_t frames = num_frames(n);
  const int nb = bins();
  std::complex<float>* row = row_.data();
  for (int64_t f = 0; f < frames; ++f) {
    frame(x, n, f, row);
    float* o = out + f * nb;
    for (int k = 0; k < nb; ++k) o[k] = std::norm(row[k]);
  }
}

Istft::Istft(int n_fft, int hop, const std::vector<float>& window, bool center)
    : n_fft_(n_fft), hop_(hop), center_(center) {
  CBX_CHECK(n_fft >= 2 && hop >= 1 && hop <= n_fft, "Istft: bad n_fft %d / hop %d", n_fft, hop);
  window_ = pad_window(window, n_fft, "Istft");
  cbuf_.resize(size_t(bins()));
  tbuf_.resize(size_t(n_fft));
  fft_ = std::make_unique<RealFft>(n_fft);
}

size_t Istft::default_length(int64_t frames) const {
  if (frames <= 0) return 0;
  size_t full = size_t(n_fft_) + size_t(hop_) * size_t(frames - 1);
  return center_ ? full - 2 * size_t(n_fft_ / 2) : full;
}

template <typename Get>
void Istft::run(Get get, int64_t frames, float* out, size_t length) {
  CBX_CHECK(frames >= 1, "istft: need at least one frame, got %lld", (long long)frames);
  const int64_t pad = center_ ? n_fft_ / 2 : 0;
  const int nb = bins();
  if (env_.size() < length) env_.resize(length);
  for (size_t i = 0; i < length; ++i) out[i] = env_[i] = 0.0f;
  const float scale = 1.0f / float(n_fft_);
  for (int64_t f = 0; f < frames; ++f) {
    const int64_t start = f * hop_ - pad;
    if (start >= int64_t(length) || start + n_fft_ <= 0) continue;
    for (int k = 0; k < nb; ++k) cbuf_[size_t(k)] = get(f, k);
    fft_->inverse(cbuf_.data(), tbuf_.data());
    for (int t = 0; t < n_fft_; ++t) {
      int64_t p = start + t;
      if (p < 0 || p >= int64_t(length)) continue;
      float w = window_[size_t(t)];
      out[p] += tbuf_[size_t(t)] * scale * w;
      env_[size_t(p)] += w * w;
    }
  }
  for (size_t i = 0; i < length; ++i) {
    CBX_CHECK(std::fabs(env_[i]) > 1e-11f,
              "istft: window overlap-add is zero at sample %zu (NOLA violated or length %zu "
              "exceeds what %lld frames cover)",
              i, length, (long long)frames);
    out[i] /= env_[i];
  }
}

void Istft::inverse(const std::complex<float>* spec, int64_t frames, ptrdiff_t frame_stride, ptrdiff_t bin_stride,
                    float* out, size_t length) {
  run([&](int64_t f, int k) { return spec[f * frame_stride + k * bin_stride]; }, frames, out, length);
}

void Istft::inverse_planar(const float* re, const float* im, int64_t frames, ptrdiff_t frame_stride,
                           ptrdiff_t bin_stride, float* out, size_t length) {
  run(
      [&](int64_t f, int k) {
        ptrdiff_t i = f * frame_stride + k * bin_stride;
        return std::complex<float>(re[i], im[i]);
      },
      frames, out, length);
}

}  // namespace cbx
