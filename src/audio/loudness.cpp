#include "audio/loudness.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace cbx {
namespace {

struct Biquad {
  double b0, b1, b2, a1, a2;  // normalised by a0
};

// RBJ audio-EQ-cookbook designs, as pyloudnorm's IIRfilter builds them.
Biquad high_shelf(double gain_db, double q, double fc, double rate) {
  const double A = std::pow(10.0, gain_db / 40.0);
  const double w0 = 2.0 * M_PI * (fc / rate);
  const double alpha = std::sin(w0) / (2.0 * q);
  const double c = std::cos(w0), sa = 2.0 * std::sqrt(A) * alpha;
  const double b0 = A * ((A + 1) + (A - 1) * c + sa);
  const double b1 = -2 * A * ((A - 1) + (A + 1) * c);
  const double b2 = A * ((A + 1) + (A - 1) * c - sa);
  const double a0 = (A + 1) - (A - 1) * c + sa;
  const double a1 = 2 * ((A - 1) - (A + 1) * c);
  const double a2 = (A + 1) - (A - 1) * c - sa;
  return {b0 / a0, b1 / a0, b2 / a0, a1 / a0, a2 / a0};
}

Biquad high_pass(double q, double fc, double rate) {
  const double w0 = 2.0 * M_PI * (fc / rate);
  const double alpha = std::sin(w0) / (2.0 * q);
  const double c = std::cos(w0);
  const double a0 = 1 + alpha;
  return {(1 + c) / 2 / a0, -(1 + c) / a0, (1 + c) / 2 / a0, -2 * c / a0, (1 - alpha) / a0};
}

// Direct form II transposed, zero initial state (scipy.signal.lfilter).
void apply(const Biquad& f, std::vector<float>& x) {
  double z1 = 0.0, z2 = 0.0;
  for (float& v : x) {
    const double in = v;
    const double out = f.b0 * in + z1;
    z1 = f.b1 * in - f.a1 * out + z2;
    z2 = f.b2 * in - f.a2 * out;
    v = float(out);
  }
}

}  // namespace

double integrated_loudness(const float* x, size_t n, int sample_rate) {
  CBX_CHECK(sample_rate > 0, "loudness: bad sample rate %d", sample_rate);
  const double block = 0.400, overlap = 0.75, step = 1.0 - overlap;
  CBX_CHECK(double(n) >= block * sample_rate, "loudness: %zu samples at %d Hz is shorter than one 400 ms block", n,
            sample_rate);
  std::vector<float> y(x, x + n);
  apply(high_shelf(4.0, 1.0 / std::sqrt(2.0), 1500.0, sample_rate), y);
  apply(high_pass(0.5, 38.0, sample_rate), y);

  const double T = double(n) / sample_rate;
  const long blocks = long(std::nearbyint((T - block) / (block * step))) + 1;  // half-to-even
  std::vector<double> z(static_cast<size_t>(blocks)), l(static_cast<size_t>(blocks));
  for (long j = 0; j < blocks; ++j) {
    size_t lo = size_t(block * (double(j) * step) * sample_rate);
    size_t hi = size_t(block * (double(j) * step + 1.0) * sample_rate);
    if (hi > n) hi = n;
    double s = 0.0;
    for (size_t i = lo; i < hi; ++i) s += double(y[i]) * y[i];
    z[size_t(j)] = (1.0 / (block * sample_rate)) * s;
    l[size_t(j)] = -0.691 + 10.0 * std::log10(z[size_t(j)]);
  }
  const double abs_gate = -70.0;
  double sum = 0.0;
  long cnt = 0;
  for (long j = 0; j < blocks; ++j)
    if (l[size_t(j)] >= abs_gate) sum += z[size_t(j)], ++cnt;
  if (cnt == 0) return -INFINITY;
  const double rel_gate = -0.691 + 10.0 * std::log10(sum / double(cnt)) - 10.0;
  sum = 0.0;
  cnt = 0;
  for (long j = 0; j < blocks; ++j)
    if (l[size_t(j)] > rel_gate && l[size_t(j)] > abs_gate) sum += z[size_t(j)], ++cnt;
  if (cnt == 0) return -INFINITY;
  return -0.691 + 10.0 * std::log10(sum / double(cnt));
}

double loudness_gain(double loudness_lufs, double target_lufs) {
  return std::pow(10.0, (target_lufs - loudness_lufs) / 20.0);
}

bool normalize_loudness(float* x, size_t n, int sample_rate, double target_lufs) {
  if (sample_rate <= 0 || double(n) < 0.4 * sample_rate) return false;
  const double lufs = integrated_loudness(x, n, sample_rate);
  const double g = loudness_gain(lufs, target_lufs);
  if (!std::isfinite(g) || !(g > 0.0)) return false;
  const float gf = float(g);  // numpy: float32 array * python float stays float32
  for (size_t i = 0; i < n; ++i) x[i] *= gf;
  return true;
}

}  // namespace cbx
