#include "audio/resample.h"

#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace cbx {

std::vector<float> resample_soxr(const float* x, size_t n, double in_rate, double out_rate, SoxrQuality quality) {
  CBX_CHECK(in_rate > 0 && out_rate > 0, "resample_soxr: bad rates %g -> %g", in_rate, out_rate);
  if (in_rate == out_rate) return std::vector<float>(x, x + n);
  const size_t target = size_t(std::ceil(double(n) * (out_rate / in_rate)));
  std::vector<float> y;
  if (n == 0) return y;
  unsigned long recipe = SOXR_HQ;
  switch (quality) {
    case SoxrQuality::Quick:
      recipe = SOXR_QQ;
      break;
    case SoxrQuality::Low:
      recipe = SOXR_LQ;
      break;
    case SoxrQuality::Medium:
      recipe = SOXR_MQ;
      break;
    case SoxrQuality::High:
      recipe = SOXR_HQ;
      break;
    case SoxrQuality::VeryHigh:
      recipe = SOXR_VHQ;
      break;
  }
  soxr_error_t err = nullptr;
  soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  soxr_quality_spec_t q = soxr_quality_spec(recipe, 0);
  soxr_t s = soxr_create(in_rate, out_rate, 1, &err, &io, &q, nullptr);
  CBX_CHECK(s && !err, "resample_soxr: soxr_create(%g -> %g) failed: %s", in_rate, out_rate, err ? err : "?");
  // Room for what soxr may emit (n * ratio + filter delay); trimmed/padded afterwards.
  size_t cap = size_t(double(n) * out_rate / in_rate) + 1;
  y.resize(cap);
  size_t opos = 0;
  const size_t chunk = std::max<size_t>(1000, size_t(48000 * in_rate / out_rate));
  for (size_t i = 0; i < n && !err; i += chunk) {
    size_t odone = 0;
    err = soxr_process(s, x + i, std::min(chunk, n - i), nullptr, y.data() + opos, cap - opos, &odone);
    opos += odone;
  }
  while (!err) {  // flush
    size_t odone = 0;
    if (opos == cap) break;
    err = soxr_process(s, nullptr, 0, nullptr, y.data() + opos, cap - opos, &odone);
    opos += odone;
    if (odone == 0) break;
  }
  soxr_delete(s);
  CBX_CHECK(!err, "resample_soxr: %s", err);
  y.resize(opos);
  y.resize(target, 0.0f);  // librosa fix_length: trim or zero-pad
  return y;
}

SincResampler::SincResampler(int in_rate, int out_rate, int lowpass_filter_width, double rolloff) {
  CBX_CHECK(in_rate > 0 && out_rate > 0, "SincResampler: bad rates %d -> %d", in_rate, out_rate);
  CBX_CHECK(lowpass_filter_width > 0 && rolloff > 0 && rolloff <= 1.0,
            "SincResampler: bad lowpass_filter_width %d / rolloff %g", lowpass_filter_width, rolloff);
  int g = std::gcd(in_rate, out_rate);
  in_ = in_rate / g;
  out_ = out_rate / g;
  if (in_ == out_) return;
  const double base = std::min(in_, out_) * rolloff;  // cutoff, in units of the reduced rates
  const double lw = lowpass_filter_width;
  width_ = int(std::ceil(lw * in_ / base));
  taps_ = 2 * width_ + in_;
  kernel_.resize(size_t(out_) * taps_);
  // Output phase j sits at time j/out_; tap k covers input sample (k - width_) relative to
  // the frame start, at time (k - width_)/in_. t is the distance in units of 1/base.
  for (int j = 0; j < out_; ++j) {
    for (int k = 0; k < taps_; ++k) {
      double t = (-double(j) / out_ + double(k - width_) / in_) * base;
      t = std::clamp(t, -lw, lw);
      double c = std::cos(t * M_PI / lw / 2.0);
      double w = c * c;
      double tp = t * M_PI;
      double sinc = tp == 0.0 ? 1.0 : std::sin(tp) / tp;
      kernel_[size_t(j) * taps_ + k] = float(sinc * w * base / in_);
    }
  }
}

size_t SincResampler::output_length(size_t n) const { return size_t((uint64_t(n) * out_ + in_ - 1) / in_); }

std::vector<float> SincResampler::process(const float* x, size_t n) const {
  if (in_ == out_) return std::vector<float>(x, x + n);
  const size_t len = output_length(n);
  std::vector<float> y(len);
  // Input is zero-extended by width_ on the left (and enough on the right); output frame f,
  // phase j, is the dot of kernel row j with padded input [f*in_, f*in_ + taps_).
  for (size_t o = 0; o < len; ++o) {
    size_t f = o / size_t(out_);
    int j = int(o % size_t(out_));
    const float* kr = &kernel_[size_t(j) * taps_];
    int64_t start = int64_t(f) * in_ - width_;  // index into x of tap 0
    int k0 = int(std::max<int64_t>(0, -start));
    int k1 = int(std::min<int64_t>(taps_, int64_t(n) - start));
    float acc = 0.0f;
    for (int k = k0; k < k1; ++k) acc += kr[k] * x[start + k];
    y[o] = acc;
  }
  return y;
}

}  // namespace cbx
