// Real FFT of one fixed size on FFTW single precision. The plan is made once (FFTW_ESTIMATE:
// deterministic algorithm choice, so results are bit-reproducible run to run) and reused;
// each RealFft owns aligned scratch, so one object must not be used by two threads at once
// (make one per thread; construction is thread-safe).
//
// Why FFTW rather than our own: it is well kept, and an own mixed-radix FFT was 18-46x slower per
// transform at the sizes used here (n = 16 .. 1920; docs/benchmarks.md "Tried and not kept").
#pragma once
#include <complex>
#include <cstddef>

namespace cbx {

class RealFft {
 public:
  explicit RealFft(int n);  // any n >= 1
  ~RealFft();
  RealFft(const RealFft&) = delete;
  RealFft& operator=(const RealFft&) = delete;

  int size() const { return n_; }
  int bins() const { return n_ / 2 + 1; }
  // in: n reals -> out: n/2+1 complex, X[k] = sum_t x[t] e^{-2 pi i k t / n} (unnormalised).
  void forward(const float* in, std::complex<float>* out);
  // in: n/2+1 complex (Hermitian half spectrum) -> out: n reals, unnormalised
  // (inverse(forward(x)) = n * x). Imag parts of DC/Nyquist are ignored, as irfft does.
  void inverse(const std::complex<float>* in, float* out);

 private:
  int n_;
  float* rbuf_ = nullptr;
  void* cbuf_ = nullptr;  // fftwf_complex[n/2+1]
  void* fwd_ = nullptr;   // fftwf_plan
  void* inv_ = nullptr;
};

}  // namespace cbx
