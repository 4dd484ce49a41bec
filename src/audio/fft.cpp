#include "audio/fft.h"

#include <fftw3.h>

#include <cstring>
#include <mutex>

#include "core/error.h"

namespace cbx {
namespace {
// FFTW's planner is not thread-safe; execution of distinct plans is.
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

RealFft::RealFft(int n) : n_(n) {
  CBX_CHECK(n >= 1, "RealFft: bad size %d", n);
  std::lock_guard<std::mutex> lock(planner_mutex());
  rbuf_ = fftwf_alloc_real(size_t(n));
  auto* c = fftwf_alloc_complex(size_t(n / 2 + 1));
  cbuf_ = c;
  CBX_CHECK(rbuf_ && c, "RealFft: out of memory for size %d", n);
  fwd_ = fftwf_plan_dft_r2c_1d(n, rbuf_, c, FFTW_ESTIMATE);
  inv_ = fftwf_plan_dft_c2r_1d(n, c, rbuf_, FFTW_ESTIMATE);
  CBX_CHECK(fwd_ && inv_, "RealFft: FFTW could not plan size %d", n);
}

RealFft::~RealFft() {
  std::lock_guard<std::mutex> lock(planner_mutex());
  if (fwd_) fftwf_destroy_plan(static_cast<fftwf_plan>(fwd_));
  if (inv_) fftwf_destroy_plan(static_cast<fftwf_plan>(inv_));
  fftwf_free(rbuf_);
  fftwf_free(cbuf_);
}

void RealFft::forward(const float* in, std::complex<float>* out) {
  std::memcpy(rbuf_, in, sizeof(float) * size_t(n_));
  fftwf_execute(static_cast<fftwf_plan>(fwd_));
  std::memcpy(out, cbuf_, sizeof(fftwf_complex) * size_t(bins()));
}

void RealFft::inverse(const std::complex<float>* in, float* out) {
  // c2r plans destroy their input; the copy into cbuf_ keeps `in` intact.
  std::memcpy(cbuf_, in, sizeof(fftwf_complex) * size_t(bins()));
  auto* c = static_cast<fftwf_complex*>(cbuf_);
  c[0][1] = 0.0f;
  if (n_ % 2 == 0) c[n_ / 2][1] = 0.0f;
  fftwf_execute(static_cast<fftwf_plan>(inv_));
  std::memcpy(out, rbuf_, sizeof(float) * size_t(n_));
}

}  // namespace cbx
