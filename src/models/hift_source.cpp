// HiftVocoder's source module (upstream SourceModuleHnNSF with its F0 predictor): the seeded
// phase and noise draws, the F0 predictor and the NSF harmonic source (spec §9.2-9.4). The
// generator that consumes the source is in hift_vocoder.cpp.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "models/hift_vocoder.h"
#include "models/sampler.h"
#include "ops/conv.h"
#include "ops/elementwise.h"

namespace cbx {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void HiftVocoder::set_seed(uint64_t seed) {
  seed_ = seed;
  n_calls_ = 0;
}

// Phases U(-pi, pi) and N(0, 1) noise [H1, n], in blocks of kNoiseBlock samples with one
// stream each (keyed by seed, call, harmonic, block), so any thread count gives the same values.
void HiftVocoder::generate_draws(int64_t n) {
  const uint64_t key = take_draws(gen_phases_.data());
  fill_noise(key, 0, (n + kNoiseBlock - 1) / kNoiseBlock, gen_noise_.ptr<float>(), n, n);
}

uint64_t HiftVocoder::take_draws(float* phases) {
  const int64_t H1 = cfg_.nb_harmonics + 1;
  const uint64_t call_key = mix64(seed_ ^ mix64(n_calls_));
  ++n_calls_;
  Rng ph(call_key);
  for (int64_t h = 0; h < H1; ++h) phases[h] = float(-M_PI + 2.0 * M_PI * ph.uniform());
  return call_key;
}

void HiftVocoder::fill_noise(uint64_t call_key, int64_t blk0, int64_t blk1, float* out, int64_t stride, int64_t n) {
  const int64_t H1 = cfg_.nb_harmonics + 1, nb = blk1 - blk0;
  if (nb <= 0) return;
  pool_.run([&](int ith, int nth) {
    int64_t b0, b1;
    ThreadPool::split(H1 * nb, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t h = b / nb, blk = blk0 + b % nb;
      Rng r(mix64(call_key ^ mix64(uint64_t(h) << 32 | uint64_t(blk))));
      float* o = out + h * stride;
      const int64_t t0 = blk * kNoiseBlock, t1 = std::min(n, t0 + kNoiseBlock);
      for (int64_t t = t0; t < t1; t += 2) {  // Box-Muller, two normals per pair of uniforms
        const double u1 = 1.0 - r.uniform(), u2 = r.uniform();
        const double rad = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
        o[t] = float(rad * std::cos(a));
        if (t + 1 < t1) o[t + 1] = float(rad * std::sin(a));
      }
    }
  });
}

void HiftVocoder::advance_cycles(const float* f0, int64_t T, double* cycles) const {
  const int64_t H1 = cfg_.nb_harmonics + 1;
  const float sr = float(cfg_.sample_rate);
  for (int64_t h = 0; h < H1; ++h) {
    const float mult = float(h + 1);
    double acc = cycles[h];
    for (int64_t f = 0; f < T; ++f) acc += double(spf_) * double((f0[f] * mult) / sr);
    cycles[h] = acc - std::floor(acc);
  }
}

// f0 [T] = |classifier(condnet(mel))|.
// h0, h1: two [f0_channels, T] activations.
void HiftVocoder::f0_predict(const Tensor& mel, Tensor& h0, Tensor& h1, Tensor& f0) {
  const int64_t T = mel.shape[1], Cf = cfg_.f0_channels;
  Tensor* h[2] = {&h0, &h1};
  Conv1dParams p;
  p.pad_left = p.pad_right = 1;
  const Tensor* in = &mel;
  for (int l = 0; l < cfg_.f0_layers; ++l) {
    Tensor& out = *h[l % 2];
    conv1d(pool_, *in, w_.f0_w[size_t(l)], w_.f0_b[size_t(l)], out, p, work_);
    elu(pool_, out, out, 1.f);
    in = &out;
  }
  // Linear(Cf -> 1) over [T, Cf] rows, then abs.
  const float* wc = w_.f0_cls_w.ptr<float>();
  const float bc = w_.f0_cls_b.ptr<float>()[0];
  float* o = f0.ptr<float>();
  for (int64_t t = 0; t < T; ++t) o[t] = 0.f;
  for (int64_t c = 0; c < Cf; ++c) {
    const float* r = static_cast<const float*>(in->row(c));
    for (int64_t t = 0; t < T; ++t) o[t] += wc[c] * r[t];
  }
  for (int64_t t = 0; t < T; ++t) o[t] = std::fabs(o[t] + bc);
}

// source [n] = tanh(l_linear(sine * uv + noise_amp * noise)), spec §9.3-4.
void HiftVocoder::make_source(const Tensor& f0, const float* phases, const float* noise, int64_t noise_stride,
                              const double* cycle_start, int64_t cycle_frame, int64_t n, Tensor& src) {
  const int64_t H1 = cfg_.nb_harmonics + 1, T = f0.numel(), spf = spf_;
  const float* f0p = f0.ptr<float>();
  float* cyc = cycles_.ptr<float>();
  const float sr = float(cfg_.sample_rate);
  // frac(cumsum_t(f0 (h+1) / sr)): torch.cumsum on CPU accumulates f32 input in double and
  // rounds each prefix to f32; the remainder by 1 is then exact. Sequential per harmonic.
  pool_.run([&](int ith, int nth) {
    for (int64_t h = ith; h < H1; h += nth) {
      const float mult = float(h + 1);
      float* c = cyc + h * n;
      double acc = 0.0;
      if (cycle_start) {  // back from cycle_frame with this call's f0
        acc = cycle_start[h];
        for (int64_t f = 0; f < cycle_frame; ++f) acc -= double(spf) * double((f0p[f] * mult) / sr);
        acc -= std::floor(acc);
      }
      for (int64_t f = 0; f < T; ++f) {
        const double inc = double((f0p[f] * mult) / sr);
        float* cf = c + f * spf;
        for (int64_t t = 0; t < spf; ++t) {
          acc += inc;
          const float v = float(acc);
          cf[t] = v - std::floor(v);
        }
      }
    }
  });
  const float two_pi = float(2.0 * M_PI), amp = cfg_.nsf_alpha, sigma = cfg_.nsf_sigma;
  const float unvoiced_amp = cfg_.nsf_alpha / 3.f, thr = cfg_.voiced_threshold;
  float phi[64];  // nb_harmonics < 64 (check_config)
  for (int64_t h = 0; h < H1; ++h) phi[h] = h == 0 ? 0.f : phases[h];
  const float* lw = w_.l_linear_w.ptr<float>();
  const float lb = w_.l_linear_b.ptr<float>()[0];
  float* s = src.ptr<float>();
  pool_.run([&](int ith, int nth) {
    int64_t f0i, f1i;
    ThreadPool::split(T, ith, nth, &f0i, &f1i);
    for (int64_t f = f0i; f < f1i; ++f) {
      const bool voiced = f0p[f] > thr;
      const float uv = voiced ? 1.f : 0.f;
      const float namp = voiced ? sigma : unvoiced_amp;
      for (int64_t t = f * spf; t < (f + 1) * spf; ++t) {
        float acc = 0.f;
        for (int64_t h = 0; h < H1; ++h) {
          const float sine = amp * std::sin(two_pi * cyc[h * n + t] + phi[h]);
          const float e = sine * uv + namp * noise[h * noise_stride + t];
          acc += lw[h] * e;
        }
        s[t] = std::tanh(acc + lb);
      }
    }
  });
}

}  // namespace cbx
