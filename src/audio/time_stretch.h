// Pitch-preserving speed change (Rubber Band Library, offline mode: the whole buffer is known,
// so it is studied first and the output length is exact).
#pragma once
#include <cstddef>
#include <vector>

namespace cbx {

constexpr double kMinStretchSpeed = 0.25;
constexpr double kMaxStretchSpeed = 4.0;

// speed > 1 = faster and shorter: the output holds round(n / speed) samples at the same pitch.
// Uses the R3 ("finer") engine with formant preservation, single-threaded. speed == 1 returns
// the input unchanged. Throws cbx::Error when speed is outside [0.25, 4] (or not finite) or the
// sample rate is not positive.
std::vector<float> time_stretch(const float* x, size_t n, int sample_rate, double speed);

}  // namespace cbx
