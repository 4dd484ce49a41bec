// Level changes on mono float samples, in place.
#pragma once
#include <cstddef>

namespace cbx {

// Gain limits: beyond them a request is more likely a mistake than an intent.
constexpr double kMinGainDb = -60.0;
constexpr double kMaxGainDb = 40.0;

// x *= 10^(db / 20). Throws cbx::Error when db is not finite or outside [-60, 40] dB. Samples
// are not clipped here (encoders clip on output).
void apply_gain_db(float* x, size_t n, double db);

// Scale x so its peak |x| reaches target_dbfs (in [-60, 0] dBFS, else cbx::Error). Returns the
// gain applied in dB. The gain is capped at kMaxGainDb (near-silence is not raised to full
// scale); silence (peak 0) stays silence and returns 0. Non-finite samples throw.
double peak_normalize(float* x, size_t n, double target_dbfs);

}  // namespace cbx
