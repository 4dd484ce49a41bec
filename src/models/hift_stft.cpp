// HiFT's STFT of the source signal and inverse STFT of the generated spectrum (as torch.stft and
// torch.istft compute them; see hift_vocoder.h), one frame per FFT on the pool's threads.
#include <algorithm>
#include <complex>

#include "audio/fft.h"
#include "core/error.h"
#include "models/hift_vocoder.h"

namespace cbx {

void HiftVocoder::source_stft(const float* src, int64_t n, float* s_stft) {
  const int64_t nfft = cfg_.n_fft, hop = cfg_.hop, half = nfft / 2, bins = nfft / 2 + 1;
  const int64_t F = n / hop + 1;
  CBX_CHECK(n > half, "hift: %lld source samples are too few for the reflect padding", (long long)n);
  float* re = s_stft;
  float* im = s_stft + bins * F;
  pool_.run([&](int ith, int nth) {
    RealFft& fft = *ffts_[size_t(ith)];
    float* fr = fft_bufs_[size_t(ith)].data();
    auto* spec = reinterpret_cast<std::complex<float>*>(fr + nfft);
    int64_t f0, f1;
    ThreadPool::split(F, ith, nth, &f0, &f1);
    for (int64_t f = f0; f < f1; ++f) {
      for (int64_t t = 0; t < nfft; ++t) {
        int64_t j = f * hop + t - half;  // reflect: x[-i] = x[i], x[n-1+i] = x[n-1-i]
        if (j < 0) j = -j;
        if (j >= n) j = 2 * (n - 1) - j;
        fr[t] = src[j] * window_[size_t(t)];
      }
      fft.forward(fr, spec);
      for (int64_t k = 0; k < bins; ++k) {
        re[k * F + f] = spec[k].real();
        im[k * F + f] = spec[k].imag();
      }
    }
  });
}

void HiftVocoder::istft(const float* re, const float* im, int64_t F, float* frames, float* wave) {
  const int64_t nfft = cfg_.n_fft, hop = cfg_.hop, half = nfft / 2, bins = nfft / 2 + 1;
  const int64_t n = hop * (F - 1);  // torch.istft default length with center=True
  const float inv_n = 1.f / float(nfft);
  pool_.run([&](int ith, int nth) {
    RealFft& fft = *ffts_[size_t(ith)];
    auto* spec = reinterpret_cast<std::complex<float>*>(fft_bufs_[size_t(ith)].data() + nfft);
    int64_t f0, f1;
    ThreadPool::split(F, ith, nth, &f0, &f1);
    for (int64_t f = f0; f < f1; ++f) {  // irfft (1/n), then the synthesis window
      for (int64_t k = 0; k < bins; ++k) spec[k] = {re[k * F + f], im[k * F + f]};
      float* fr = frames + f * nfft;
      fft.inverse(spec, fr);
      for (int64_t t = 0; t < nfft; ++t) fr[t] = fr[t] * inv_n * window_[size_t(t)];
    }
    pool_.barrier();
    // Overlap-add gathered per output sample, divided by the summed squared window.
    int64_t p0, p1;
    ThreadPool::split(n, ith, nth, &p0, &p1);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t q = p + half;  // index in the centre-padded signal
      const int64_t fa = std::max<int64_t>(0, (q - nfft) / hop), fb = std::min(F - 1, q / hop);
      float acc = 0.f, env = 0.f;
      for (int64_t f = fa; f <= fb; ++f) {
        const int64_t t = q - f * hop;
        if (t < 0 || t >= nfft) continue;
        acc += frames[f * nfft + t];
        env += window_[size_t(t)] * window_[size_t(t)];
      }
      wave[p] = env > 1e-11f ? acc / env : 0.f;
    }
  });
}

}  // namespace cbx
