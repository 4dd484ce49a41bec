#include "audio/time_stretch.h"

#include <rubberband/RubberBandStretcher.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace cbx {

std::vector<float> time_stretch(const float* x, size_t n, int sample_rate, double speed) {
  CBX_CHECK(std::isfinite(speed) && speed >= kMinStretchSpeed && speed <= kMaxStretchSpeed,
            "time stretch: speed %g outside [%g, %g]", speed, kMinStretchSpeed, kMaxStretchSpeed);
  CBX_CHECK(sample_rate > 0, "time stretch: bad sample rate %d", sample_rate);
  CBX_CHECK(x || n == 0, "time stretch: null samples");
  if (speed == 1.0 || n == 0) return std::vector<float>(x, x + n);

  using RB = RubberBand::RubberBandStretcher;
  // Offline + R3 engine (best quality); formants preserved keeps voices from sounding
  // chipmunk-like or hollow; one thread so results do not depend on scheduling.
  const RB::Options opts =
      RB::OptionProcessOffline | RB::OptionEngineFiner | RB::OptionFormantPreserved | RB::OptionThreadingNever;
  RB rb(size_t(sample_rate), 1, opts, 1.0 / speed, 1.0);
  CBX_CHECK(rb.getEngineVersion() == 3, "time stretch: Rubber Band R3 engine unavailable (got R%d)",
            rb.getEngineVersion());
  constexpr size_t kBlock = 4096;
  rb.setExpectedInputDuration(n);
  rb.setMaxProcessSize(kBlock);
  rb.study(&x, n, true);

  std::vector<float> out;
  out.reserve(size_t(std::llround(double(n) / speed)) + kBlock);
  std::vector<float> buf(kBlock);
  auto drain = [&] {
    for (int avail; (avail = rb.available()) > 0;) {
      float* p = buf.data();
      size_t got = rb.retrieve(&p, std::min(size_t(avail), kBlock));
      out.insert(out.end(), buf.begin(), buf.begin() + got);
    }
  };
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    const float* p = x + i;
    rb.process(&p, m, i + m == n);
    drain();
  }
  drain();
  CBX_CHECK(rb.available() == -1, "time stretch: Rubber Band did not finish (%d samples pending)", rb.available());
  return out;
}

}  // namespace cbx
