// Realistic random values per tensor role, generated block by block (see mkckpt.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "mkckpt.h"

namespace mk {

using cbx::TensorRole;
using R = cbx::TensorRole;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t tensor_bytes(const cbx::UpstreamTensor& t) {
  return size_t(numel(t.shape)) * (t.dtype == cbx::DType::I64 ? 8 : 4);
}

namespace {

// librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm="slaney"):
// Slaney mel scale (linear below 1 kHz, log above), triangles normalised to unit area.
double hz_to_mel(double f) {
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return f < min_log_hz ? f / f_sp : min_log_mel + std::log(f / min_log_hz) / logstep;
}
double mel_to_hz(double m) {
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return m < min_log_mel ? m * f_sp : min_log_hz * std::exp(logstep * (m - min_log_mel));
}

// weights: [n_mels, n_fft/2 + 1]
std::vector<float> slaney_mel(int64_t n_mels, int64_t n_bins, double sr) {
  const int64_t n_fft = 2 * (n_bins - 1);
  std::vector<double> fft(n_bins), mel_f(n_mels + 2);
  for (int64_t i = 0; i < n_bins; ++i) fft[i] = double(i) * sr / double(n_fft);
  const double mmin = hz_to_mel(0.0), mmax = hz_to_mel(sr / 2);
  for (int64_t i = 0; i < n_mels + 2; ++i) mel_f[i] = mel_to_hz(mmin + (mmax - mmin) * double(i) / double(n_mels + 1));
  std::vector<float> w(size_t(n_mels * n_bins), 0.0f);
  for (int64_t m = 0; m < n_mels; ++m) {
    const double enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
    for (int64_t k = 0; k < n_bins; ++k) {
      const double lower = (fft[k] - mel_f[m]) / (mel_f[m + 1] - mel_f[m]);
      const double upper = (mel_f[m + 2] - fft[k]) / (mel_f[m + 2] - mel_f[m + 1]);
      w[size_t(m * n_bins + k)] = float(std::max(0.0, std::min(lower, upper)) * enorm);
    }
  }
  return w;
}

float draw(const cbx::UpstreamTensor& t, Rng& r, int64_t idx) {
  switch (t.role) {
    case R::Weight:
    case R::WnV:
      return r.normal() / std::sqrt(float(std::max<int64_t>(1, t.fan_in)));
    case R::Bias:
      return 0.02f * r.normal();
    case R::Embedding:
      // T3 tables follow GPT-2's 0.02 init scale; S3Gen's token table is nn.Embedding N(0, 1).
      return (t.name.rfind("flow.", 0) == 0 ? 1.0f : 0.02f) * r.normal();
    case R::PosEmbedding:
      return 0.02f * r.normal();
    case R::NormWeight:
    case R::BnWeight:
      return 1.0f + 0.05f * r.normal();
    case R::NormBias:
      return 0.02f * r.normal();
    case R::BnBias:
      return 0.05f * r.normal();
    case R::BnMean:
      return 0.1f * r.normal();
    case R::BnVar:
      return std::exp(0.3f * r.normal());
    case R::WnG:
      return std::max(0.05f, 1.0f + 0.1f * r.normal());
    case R::SnakeAlpha:
      return std::max(0.1f, 1.0f + 0.1f * r.normal());
    case R::Query: {
      const float a = std::sqrt(3.0f) * std::sqrt(2.0f / 64.0f);  // perceiver's uniform init
      return float((2.0 * r.uniform() - 1.0) * a);
    }
    case R::PosBias:
      return 0.1f * r.normal();
    case R::TimeMixer: {  // [T, 2T], trained from [I | 0]
      const int64_t cols = t.shape[1], row = idx / cols, col = idx % cols;
      return (row == col ? 1.0f : 0.0f) + 0.01f * r.normal();
    }
    case R::Constant:
      return t.value;
    case R::BnCount:
    case R::MelFilters:
    case R::HannWindow:
      break;
  }
  return 0.0f;
}

}  // namespace

void fill_blocks(const cbx::UpstreamTensor& t, uint64_t key, int64_t block_begin, int64_t block_end, uint8_t* out) {
  const int64_t n = numel(t.shape);
  const int64_t begin = block_begin * kBlock, end = std::min(n, block_end * kBlock);
  if (begin >= end) return;
  if (t.dtype == cbx::DType::I64) {
    CBX_CHECK(t.role == R::BnCount, "mkckpt: unexpected int64 tensor %s", t.name.c_str());
    // A trained BatchNorm has seen some hundred thousand batches.
    const int64_t v = 100000 + int64_t(mix64(key) % 400000);
    for (int64_t i = begin; i < end; ++i) std::memcpy(out + 8 * (i - begin), &v, 8);
    return;
  }
  float* f = reinterpret_cast<float*>(out);
  if (t.role == R::MelFilters) {
    const std::vector<float> w = slaney_mel(t.shape[0], t.shape[1], 16000.0);
    std::copy(w.begin() + begin, w.begin() + end, f);
    return;
  }
  if (t.role == R::HannWindow) {  // torch.hann_window(N), periodic
    for (int64_t i = begin; i < end; ++i)
      f[i - begin] = float(0.5 - 0.5 * std::cos(2.0 * M_PI * double(i) / double(n)));
    return;
  }
  for (int64_t b = block_begin; b < block_end; ++b) {
    Rng r(stream_key(key, "block", std::to_string(b)));
    const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    for (int64_t i = lo; i < hi; ++i) f[i - begin] = draw(t, r, i);
  }
}

cbx::CkptTensor make_tensor(const cbx::UpstreamTensor& t, uint64_t key) {
  cbx::CkptTensor c;
  c.name = t.name;
  c.dtype = t.dtype;
  c.shape = t.shape;
  c.data.resize(tensor_bytes(t));
  const int64_t blocks = (numel(t.shape) + kBlock - 1) / kBlock;
  fill_blocks(t, key, 0, blocks, c.data.data());
  return c;
}

}  // namespace mk
