#include "audio/audio_level.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace cbx {

void apply_gain_db(float* x, size_t n, double db) {
  CBX_CHECK(std::isfinite(db) && db >= kMinGainDb && db <= kMaxGainDb, "gain %g dB outside [%g, %g] dB", db, kMinGainDb,
            kMaxGainDb);
  CBX_CHECK(x || n == 0, "gain: null samples");
  const double g = std::pow(10.0, db / 20.0);
  for (size_t i = 0; i < n; ++i) x[i] = float(double(x[i]) * g);
}

double peak_normalize(float* x, size_t n, double target_dbfs) {
  CBX_CHECK(std::isfinite(target_dbfs) && target_dbfs >= -60.0 && target_dbfs <= 0.0,
            "peak normalize: target %g dBFS outside [-60, 0] dBFS", target_dbfs);
  CBX_CHECK(x || n == 0, "peak normalize: null samples");
  double peak = 0.0;
  for (size_t i = 0; i < n; ++i) {
    CBX_CHECK(std::isfinite(x[i]), "peak normalize: non-finite sample at index %zu", i);
    peak = std::max(peak, std::fabs(double(x[i])));
  }
  if (peak == 0.0) return 0.0;
  // Near-silence (noise floor, a click) is not blown up past the gain limit.
  const double g = std::min(std::pow(10.0, target_dbfs / 20.0) / peak, std::pow(10.0, kMaxGainDb / 20.0));
  for (size_t i = 0; i < n; ++i) x[i] = float(double(x[i]) * g);
  return 20.0 * std::log10(g);
}

}  // namespace cbx
