// Time stretch (src/audio/time_stretch.h) and level changes (src/audio/audio_level.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>
#include <string>
#include <vector>

#include "audio/audio_level.h"
#include "audio/fft.h"
#include "audio/time_stretch.h"
#include "core/error.h"

using namespace cbx;

namespace {

constexpr int kRate = 24000;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<float> tones(const std::vector<double>& freqs, double seconds, int sr) {
  std::vector<float> x(size_t(seconds * sr));
  for (size_t i = 0; i < x.size(); ++i) {
    double v = 0;
    for (double f : freqs) v += 0.3 * std::sin(2 * M_PI * f * double(i) / sr);
    x[i] = float(v);
  }
  return x;
}

// Frequencies of the `count` strongest spectral peaks of the middle 16384 samples (Hann window,
// parabolic interpolation on log magnitudes), strongest first.
std::vector<double> peak_freqs(const std::vector<float>& y, int sr, int count) {
  const int n = 16384;
  EXPECT_GE(y.size(), size_t(n));
  size_t start = (y.size() - n) / 2;
  std::vector<float> w(n);
  for (int i = 0; i < n; ++i) w[i] = y[start + i] * float(0.5 - 0.5 * std::cos(2 * M_PI * i / (n - 1)));
  RealFft fft(n);
  std::vector<std::complex<float>> X(fft.bins());
  fft.forward(w.data(), X.data());
  std::vector<double> mag(X.size());
  for (size_t k = 0; k < X.size(); ++k) mag[k] = std::log(std::abs(X[k]) + 1e-12);
  std::vector<std::pair<double, double>> peaks;  // (log magnitude, frequency)
  for (size_t k = 1; k + 1 < mag.size(); ++k) {
    if (mag[k] > mag[k - 1] && mag[k] >= mag[k + 1]) {
      double a = mag[k - 1], b = mag[k], c = mag[k + 1];
      double d = 0.5 * (a - c) / (a - 2 * b + c);
      peaks.push_back({b, (double(k) + d) * sr / n});
    }
  }
  std::sort(peaks.rbegin(), peaks.rend());
  std::vector<double> f;
  for (int i = 0; i < count && i < int(peaks.size()); ++i) f.push_back(peaks[i].second);
  return f;
}

}  // namespace

TEST(TimeStretch, SineFasterKeepsPitch) {
  std::vector<float> x = tones({440.0}, 2.0, kRate);
  std::vector<float> y = time_stretch(x.data(), x.size(), kRate, 1.5);
  EXPECT_NEAR(double(y.size()) / kRate, 2.0 / 1.5, 0.02 * 2.0 / 1.5);
  std::vector<double> f = peak_freqs(y, kRate, 1);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0], 440.0, 0.02 * 440.0);
  // The tone keeps its level (no fade or dropout in the middle).
  double rms = 0;
  for (size_t i = y.size() / 4; i < 3 * y.size() / 4; ++i) rms += double(y[i]) * y[i];
  rms = std::sqrt(rms / double(y.size() / 2));
  EXPECT_NEAR(rms, 0.3 / std::sqrt(2.0), 0.2 * 0.3 / std::sqrt(2.0));
}

TEST(TimeStretch, TwoTonesFaster) {
  std::vector<float> x = tones({300.0, 1100.0}, 2.0, kRate);
  std::vector<float> y = time_stretch(x.data(), x.size(), kRate, 1.5);
  EXPECT_NEAR(double(y.size()) / kRate, 2.0 / 1.5, 0.02 * 2.0 / 1.5);
  std::vector<double> f = peak_freqs(y, kRate, 2);
  ASSERT_EQ(f.size(), 2u);
  std::sort(f.begin(), f.end());
  EXPECT_NEAR(f[0], 300.0, 0.02 * 300.0);
  EXPECT_NEAR(f[1], 1100.0, 0.02 * 1100.0);
}

TEST(TimeStretch, SlowerDoublesLength) {
  std::vector<float> x = tones({440.0}, 2.0, kRate);
  std::vector<float> y = time_stretch(x.data(), x.size(), kRate, 0.5);
  EXPECT_NEAR(double(y.size()) / kRate, 4.0, 0.02 * 4.0);
  std::vector<double> f = peak_freqs(y, kRate, 1);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0], 440.0, 0.02 * 440.0);
}

TEST(TimeStretch, UnitSpeedIsIdentityAndRangeChecked) {
  std::vector<float> x = tones({440.0}, 0.5, kRate);
  EXPECT_EQ(time_stretch(x.data(), x.size(), kRate, 1.0), x);
  for (double s : {0.2, 4.5, 0.0, -1.0, std::nan("")}) {
    std::string e = error_of([&] { time_stretch(x.data(), x.size(), kRate, s); });
    EXPECT_NE(e.find("[0.25, 4]"), std::string::npos) << s << ": " << e;
  }
  EXPECT_NE(error_of([&] { time_stretch(x.data(), x.size(), 0, 1.5); }), "");
  EXPECT_TRUE(time_stretch(x.data(), 0, kRate, 2.0).empty());
}

TEST(AudioLevel, GainDb) {
  std::vector<float> x = {0.5f, -0.25f, 0.0f, 0.1f};
  std::vector<float> y = x;
  apply_gain_db(y.data(), y.size(), 20.0 * std::log10(2.0));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.0f * x[i]);
  y = x;
  apply_gain_db(y.data(), y.size(), -20.0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], 0.1f * x[i]);
  y = x;
  apply_gain_db(y.data(), y.size(), 0.0);
  EXPECT_EQ(y, x);
  for (double db : {-61.0, 41.0, std::nan(""), HUGE_VAL}) {
    std::string e = error_of([&] { apply_gain_db(y.data(), y.size(), db); });
    EXPECT_NE(e.find("outside [-60, 40] dB"), std::string::npos) << db << ": " << e;
  }
}

TEST(AudioLevel, PeakNormalize) {
  std::vector<float> x = {0.25f, -0.125f, 0.0625f};
  double g = peak_normalize(x.data(), x.size(), -20.0 * std::log10(2.0));  // to 0.5
  EXPECT_NEAR(g, 20.0 * std::log10(2.0), 1e-9);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], -0.25f);
  EXPECT_FLOAT_EQ(x[2], 0.125f);
  // A negative peak counts by magnitude.
  std::vector<float> neg = {0.1f, -0.4f};
  EXPECT_NEAR(peak_normalize(neg.data(), neg.size(), 0.0), -20.0 * std::log10(0.4), 1e-6);
  EXPECT_FLOAT_EQ(neg[1], -1.0f);
  EXPECT_FLOAT_EQ(neg[0], 0.25f);
  // Silence stays silence.
  std::vector<float> z(100, 0.0f);
  EXPECT_EQ(peak_normalize(z.data(), z.size(), -1.0), 0.0);
  EXPECT_EQ(z, std::vector<float>(100, 0.0f));
  // Near-silence: the gain stops at +40 dB.
  std::vector<float> tiny = {1e-6f, -1e-6f};
  EXPECT_NEAR(peak_normalize(tiny.data(), tiny.size(), 0.0), 40.0, 1e-9);
  EXPECT_FLOAT_EQ(tiny[0], 1e-4f);
  for (double t : {0.5, -61.0, std::nan("")}) {
    std::string e = error_of([&] { peak_normalize(x.data(), x.size(), t); });
    EXPECT_NE(e.find("outside [-60, 0] dBFS"), std::string::npos) << t << ": " << e;
  }
  std::vector<float> bad = {0.1f, std::nanf("")};
  EXPECT_NE(error_of([&] { peak_normalize(bad.data(), bad.size(), -1.0); }).find("index 1"), std::string::npos);
}
