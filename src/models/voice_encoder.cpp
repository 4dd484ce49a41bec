// Voice encoder (spec §11.1): silence trim, linear power mel, 160-frame partials, a 3-layer
// LSTM over all partials at once, projection + ReLU + L2 norm, mean, L2 norm.
#include "models/voice_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "audio/mel.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/elementwise.h"
#include "ops/lstm.h"
#include "ops/matmul.h"

namespace cbx {

namespace {

// Partials are run through the LSTM in groups of at most this many (upstream batches 32;
// the result does not depend on the grouping). 16 keeps the gate buffer at ~10 MB.
constexpr int64_t kMaxGroup = 16;
constexpr float kTrimTopDb = 20.0f;  // embeds_from_wavs(trim_top_db=20)

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Zero-copy F32 weight; errors name the file, the tensor and what was expected.
Tensor bind_f32(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape) {
  const GgufTensorInfo* ti = f.find_tensor(name);
  CBX_CHECK(ti != nullptr, "%s: missing tensor '%s' %s", f.path().c_str(), name.c_str(), shape_text(shape).c_str());
  Tensor t = f.tensor(*ti);
  bool ok = t.ndim == int(shape.size());
  for (int i = 0; ok && i < t.ndim; ++i) ok = t.shape[i] == shape[size_t(i)];
  CBX_CHECK(ok, "%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(), t.shape_str().c_str(),
            shape_text(shape).c_str());
  CBX_CHECK(t.dtype == DType::F32, "%s: tensor '%s' is %s; voice encoder weights must be f32", f.path().c_str(),
            name.c_str(), dtype_name(t.dtype));
  return t;
}

// Python float of a float32 config value given in decimal (0.8f -> 0.8): upstream compares
// in double, and a coverage exactly at the threshold must decide the same way.
double decimal(float v) { return std::round(double(v) * 1e6) / 1e6; }

}  // namespace

struct VoiceEncoder::Impl {
  VeConfig cfg;
  int64_t max_samples = 0, step = 0, group = 0;
  std::vector<Tensor> w_ih, w_hh, b_ih, b_hh;
  Tensor proj_w, proj_b;
  VoiceEncoderMel mel;
  Arena arena;
  std::vector<double> sum;  // [E] running sum of the partial embeddings
  Capture capture;

  // upstream get_num_wins: (partials, target frames) for T mel frames.
  std::pair<int64_t, int64_t> num_wins(int64_t T) const {
    const int64_t win = cfg.partial_frames;
    const int64_t span = std::max<int64_t>(T - win + step, 0);
    int64_t n = span / step;
    const int64_t rem = span % step;
    if (n == 0 || double(rem + (win - step)) / double(win) >= decimal(cfg.min_coverage)) ++n;
    return {n, win + step * (n - 1)};
  }

  void emit(const char* name, const Tensor& t) const {
    if (capture) capture(name, t);
  }
};

VoiceEncoder::VoiceEncoder(const GgufFile& f, const ModelConfig& c, int64_t max_samples)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const VeConfig& v = c.ve;
  m.cfg = v;
  CBX_CHECK(v.n_mels == VoiceEncoderMel::kMels && v.sample_rate == VoiceEncoderMel::kSampleRate &&
                v.n_fft == VoiceEncoderMel::kNFft && v.win == VoiceEncoderMel::kNFft &&
                v.hop == VoiceEncoderMel::kHop && v.fmin == 0.0f && v.fmax == 8000.0f,
            "%s: voice encoder mel (%d mels, %d Hz, n_fft %d, win %d, hop %d, %g-%g Hz) differs from "
            "the supported 40 mels, 16000 Hz, 400/400/160, 0-8000 Hz",
            f.path().c_str(), v.n_mels, v.sample_rate, v.n_fft, v.win, v.hop, double(v.fmin), double(v.fmax));
  CBX_CHECK(v.n_layer >= 1 && v.n_hidden >= 1 && v.embed_size >= 1 && v.partial_frames >= 1 && v.partial_rate > 0 &&
                v.min_coverage > 0 && v.min_coverage <= 1,
            "%s: bad voice encoder config (layers %d, hidden %d, embed %d, partial %d frames, rate %g, "
            "coverage %g)",
            f.path().c_str(), v.n_layer, v.n_hidden, v.embed_size, v.partial_frames, double(v.partial_rate),
            double(v.min_coverage));
  // upstream get_frame_step: round((sr / rate) / partial_frames), numpy's half-to-even.
  m.step = int64_t(std::nearbyint((double(v.sample_rate) / decimal(v.partial_rate)) / v.partial_frames));
  CBX_CHECK(m.step >= 1 && m.step <= v.partial_frames, "%s: voice encoder frame step %lld outside [1, %d]",
            f.path().c_str(), (long long)m.step, v.partial_frames);
  CBX_CHECK(max_samples >= 1, "voice encoder: max_samples %lld must be >= 1", (long long)max_samples);
  m.max_samples = max_samples;

  const int64_t H = v.n_hidden, G = 4 * H;
  for (int l = 0; l < v.n_layer; ++l) {
    const std::string s = std::to_string(l);
    m.w_ih.push_back(bind_f32(f, "ve.lstm.weight_ih_l" + s, {G, l == 0 ? v.n_mels : H}));
    m.w_hh.push_back(bind_f32(f, "ve.lstm.weight_hh_l" + s, {G, H}));
    m.b_ih.push_back(bind_f32(f, "ve.lstm.bias_ih_l" + s, {G}));
    m.b_hh.push_back(bind_f32(f, "ve.lstm.bias_hh_l" + s, {G}));
  }
  m.proj_w = bind_f32(f, "ve.proj.weight", {v.embed_size, H});
  m.proj_b = bind_f32(f, "ve.proj.bias", {v.embed_size});

  // Worst case: the whole input survives the trim.
  const int64_t max_frames = m.mel.num_frames(size_t(max_samples));
  m.group = std::min(kMaxGroup, m.num_wins(max_frames).first);
  const int64_t P = m.group, Tp = v.partial_frames, In = std::max<int64_t>(v.n_mels, H);
  const int64_t floats = max_frames * v.n_mels + P * Tp * v.n_mels + 2 * P * Tp * H + 2 * P * H + P * v.embed_size +
                         lstm_layer_batch_scratch(P, Tp, In, H);
  m.arena.reserve(size_t(floats) * 4 + 16 * 64);
  m.sum.resize(size_t(v.embed_size));
}

VoiceEncoder::~VoiceEncoder() = default;

size_t VoiceEncoder::arena_bytes() const { return impl_->arena.capacity(); }

void VoiceEncoder::set_capture(Capture fn) { impl_->capture = std::move(fn); }

int64_t VoiceEncoder::num_partials(int64_t n_trimmed) const {
  return impl_->num_wins(impl_->mel.num_frames(size_t(std::max<int64_t>(n_trimmed, 0)))).first;
}

std::vector<float> VoiceEncoder::embed(ThreadPool& pool, const float* wav, int64_t n) {
  Impl& m = *impl_;
  const VeConfig& v = m.cfg;
  CBX_CHECK(wav != nullptr || n == 0, "voice encoder: null wave");
  CBX_CHECK(n <= m.max_samples, "voice encoder: %lld samples exceed the %lld reserved at construction", (long long)n,
            (long long)m.max_samples);
  const auto [b0, b1] = trim_silence(wav, size_t(std::max<int64_t>(n, 0)), kTrimTopDb);
  const int64_t len = int64_t(b1 - b0);
  CBX_CHECK(len > v.n_fft / 2,
            "voice encoder: reference too short: %lld samples after trimming silence (of %lld), need "
            "more than %d at 16 kHz",
            (long long)len, (long long)n, v.n_fft / 2);
  if (m.capture) {
    float r[2] = {float(b0), float(b1)};
    m.emit("trim", make_tensor(DType::F32, {2}, r, sizeof r));
  }
  const int64_t T = m.mel.num_frames(size_t(len));
  m.arena.reset();
  Tensor mel_t = m.arena.alloc(DType::F32, {T, v.n_mels}, "ve mel");
  m.mel.compute_into(wav + b0, size_t(len), mel_t.ptr<float>());
  const float* mel = mel_t.ptr<float>();
  m.emit("mel", mel_t);
  const size_t group_mark = m.arena.mark();

  const auto [n_part, target] = m.num_wins(T);
  (void)target;  // frames past T are the zero padding; partials never reach past target
  const int64_t H = v.n_hidden, E = v.embed_size, Tp = v.partial_frames, M = v.n_mels;
  std::vector<float> out(size_t(E), 0.f);
  std::vector<double>& sum = m.sum;
  std::fill(sum.begin(), sum.end(), 0.0);
  std::vector<float> partials;
  if (m.capture) partials.resize(size_t(n_part * E));

  for (int64_t p0 = 0; p0 < n_part; p0 += m.group) {
    const int64_t P = std::min(m.group, n_part - p0);
    m.arena.rewind(group_mark);
    Tensor x = m.arena.alloc(DType::F32, {P, Tp, M}, "ve partial mels");
    float* xp = x.ptr<float>();
    for (int64_t i = 0; i < P; ++i)
      for (int64_t t = 0; t < Tp; ++t) {
        const int64_t fr = (p0 + i) * m.step + t;
        float* dst = xp + (i * Tp + t) * M;
        if (fr < T)
          std::memcpy(dst, mel + fr * M, size_t(M) * 4);
        else
          std::memset(dst, 0, size_t(M) * 4);
      }
    Tensor ya = m.arena.alloc(DType::F32, {P, Tp, H}, "ve lstm out a");
    Tensor yb = m.arena.alloc(DType::F32, {P, Tp, H}, "ve lstm out b");
    Tensor h = m.arena.alloc(DType::F32, {P, H}, "ve h");
    Tensor c = m.arena.alloc(DType::F32, {P, H}, "ve c");
    Tensor e = m.arena.alloc(DType::F32, {P, E}, "ve partial embeds");
    Tensor in = x;
    for (int l = 0; l < v.n_layer; ++l) {
      std::memset(h.data, 0, size_t(P * H) * 4);
      std::memset(c.data, 0, size_t(P * H) * 4);
      Tensor y = l + 1 == v.n_layer ? Tensor{} : (l % 2 == 0 ? ya : yb);
      lstm_layer_batch(pool, in, m.w_ih[size_t(l)], m.w_hh[size_t(l)], m.b_ih[size_t(l)], m.b_hh[size_t(l)], h, c, y,
                       &m.arena);
      in = y;
    }
    // e = relu(proj(h_T)) / ||.||
    matmul_bias(pool, m.proj_w, m.proj_b, h, e);
    if (v.final_relu) relu(pool, e, e);
    float* ep = e.ptr<float>();
    for (int64_t i = 0; i < P; ++i) {
      float* r = ep + i * E;
      double ss = 0.0;
      for (int64_t j = 0; j < E; ++j) ss += double(r[j]) * r[j];
      CBX_CHECK(ss > 0.0,
                "voice encoder: partial %lld has an all-zero embedding (upstream divides by "
                "its norm)",
                (long long)(p0 + i));
      const float nrm = float(std::sqrt(ss));
      for (int64_t j = 0; j < E; ++j) {
        r[j] /= nrm;
        sum[size_t(j)] += r[j];
      }
      if (m.capture) std::memcpy(partials.data() + (p0 + i) * E, r, size_t(E) * 4);
    }
  }
  if (m.capture) m.emit("partials", make_tensor(DType::F32, {n_part, E}, partials.data(), partials.size() * 4));
  double ss = 0.0;
  for (int64_t j = 0; j < E; ++j) {
    const double mean = sum[size_t(j)] / double(n_part);
    out[size_t(j)] = float(mean);
    ss += mean * mean;
  }
  CBX_CHECK(ss > 0.0, "voice encoder: the mean of the partial embeddings is zero");
  const double nrm = std::sqrt(ss);
  for (int64_t j = 0; j < E; ++j) out[size_t(j)] = float(sum[size_t(j)] / double(n_part) / nrm);
  return out;
}

}  // namespace cbx
