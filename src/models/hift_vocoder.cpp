#include "models/hift_vocoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "audio/fft.h"
#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "ops/conv.h"
#include "ops/elementwise.h"

namespace cbx {

namespace {

constexpr float kPostLreluSlope = 0.01f;  // F.leaky_relu default before conv_post (spec §15.6)
constexpr float kMaxMagnitude = 100.f;    // _istft: clip(magnitude, max=1e2)

std::string idx(const std::string& p, int i) { return p + "." + std::to_string(i); }

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Source-down conv of stage i: downsamples s_stft by the product of the later rates.
struct SourceDown {
  int64_t u = 1, kernel = 1, stride = 1, pad = 0;
};
SourceDown source_down(const HiftConfig& c, size_t i) {
  SourceDown s;
  for (size_t j = i + 1; j < c.upsample_rates.size(); ++j) s.u *= c.upsample_rates[j];
  if (s.u > 1) {
    s.kernel = 2 * s.u;
    s.stride = s.u;
    s.pad = s.u / 2;
  }
  return s;
}

void check_config(const HiftConfig& c, const std::string& file) {
  const char* f = file.c_str();
  const size_t nu = c.upsample_rates.size();
  CBX_CHECK(nu >= 1 && nu == c.upsample_kernels.size() && nu == c.source_resblock_kernels.size(),
            "%s: hift upsample_rates (%zu), upsample_kernels (%zu) and source_resblock_kernels (%zu) "
            "must have the same non-zero length",
            f, nu, c.upsample_kernels.size(), c.source_resblock_kernels.size());
  CBX_CHECK(nu <= 8 && c.base_channels > 0 && c.base_channels % (1 << nu) == 0,
            "%s: hift base_channels %d must be divisible by 2^%zu", f, c.base_channels, nu);
  CBX_CHECK(c.in_channels > 0 && c.nb_harmonics >= 0 && c.nb_harmonics < 64 && c.conv_pre_kernel > 0 &&
                c.conv_pre_kernel % 2 == 1,
            "%s: bad hift in_channels %d / nb_harmonics %d / conv_pre_kernel %d", f, c.in_channels, c.nb_harmonics,
            c.conv_pre_kernel);
  CBX_CHECK(c.n_fft >= 2 && c.n_fft % 2 == 0 && c.hop >= 1 && c.hop <= c.n_fft && c.sample_rate > 0,
            "%s: bad hift n_fft %d / hop %d / sample_rate %d", f, c.n_fft, c.hop, c.sample_rate);
  CBX_CHECK(c.f0_layers >= 1 && c.f0_channels > 0, "%s: bad hift f0_layers %d / f0_channels %d", f, c.f0_layers,
            c.f0_channels);
  for (size_t i = 0; i < nu; ++i) {
    const int u = c.upsample_rates[i], k = c.upsample_kernels[i];
    CBX_CHECK(u >= 1 && k >= u && (k - u) % 2 == 0,
              "%s: hift stage %zu: upsample kernel %d and rate %d must satisfy k >= u, k - u even", f, i, k, u);
    CBX_CHECK(c.source_resblock_kernels[i] % 2 == 1, "%s: hift source_resblock_kernels[%zu] = %d must be odd", f, i,
              c.source_resblock_kernels[i]);
  }
  CBX_CHECK(!c.resblock_kernels.empty() && !c.resblock_dilations.empty() && !c.source_resblock_dilations.empty(),
            "%s: hift resblock kernel/dilation lists must not be empty", f);
  for (int32_t k : c.resblock_kernels) CBX_CHECK(k >= 1 && k % 2 == 1, "%s: hift resblock kernel %d must be odd", f, k);
  for (int32_t d : c.resblock_dilations) CBX_CHECK(d >= 1, "%s: hift resblock dilation %d", f, d);
  for (int32_t d : c.source_resblock_dilations) CBX_CHECK(d >= 1, "%s: hift source dilation %d", f, d);
}

void resblock_tensors(const std::string& p, int64_t ch, int32_t k, const std::vector<int32_t>& dil,
                      HiftResBlockWeights& rb, const HiftWeights::Visitor& fn) {
  const size_t n = dil.size();
  rb.kernel = k;
  rb.dilations = dil;
  for (auto* v : {&rb.conv1_w, &rb.conv1_b, &rb.conv2_w, &rb.conv2_b, &rb.alpha1, &rb.alpha2}) v->resize(n);
  for (size_t j = 0; j < n; ++j) {
    fn(idx(p + ".convs1", int(j)) + ".weight", rb.conv1_w[j], {ch, ch, k}, false);
    fn(idx(p + ".convs1", int(j)) + ".bias", rb.conv1_b[j], {ch}, true);
    fn(idx(p + ".convs2", int(j)) + ".weight", rb.conv2_w[j], {ch, ch, k}, false);
    fn(idx(p + ".convs2", int(j)) + ".bias", rb.conv2_b[j], {ch}, true);
    fn(idx(p + ".activations1", int(j)) + ".alpha", rb.alpha1[j], {ch}, true);
    fn(idx(p + ".activations2", int(j)) + ".alpha", rb.alpha2[j], {ch}, true);
  }
}

}  // namespace

void HiftWeights::for_each_tensor(const HiftConfig& c, const Visitor& fn) {
  const size_t nu = c.upsample_rates.size(), nk = c.resblock_kernels.size();
  const int64_t C0 = c.base_channels, nf = c.n_fft + 2;
  fn("hift.m_source.l_linear.weight", l_linear_w, {1, c.nb_harmonics + 1}, false);
  fn("hift.m_source.l_linear.bias", l_linear_b, {1}, true);
  fn("hift.conv_pre.weight", conv_pre_w, {C0, c.in_channels, c.conv_pre_kernel}, false);
  fn("hift.conv_pre.bias", conv_pre_b, {C0}, true);
  ups_w.resize(nu);
  ups_b.resize(nu);
  source_downs_w.resize(nu);
  source_downs_b.resize(nu);
  source_resblocks.resize(nu);
  resblocks.resize(nu * nk);
  for (size_t i = 0; i < nu; ++i) {
    const int64_t cin = C0 >> i, cout = C0 >> (i + 1);
    fn(idx("hift.ups", int(i)) + ".weight", ups_w[i], {cin, cout, c.upsample_kernels[i]}, false);
    fn(idx("hift.ups", int(i)) + ".bias", ups_b[i], {cout}, true);
    const SourceDown sd = source_down(c, i);
    fn(idx("hift.source_downs", int(i)) + ".weight", source_downs_w[i], {cout, nf, sd.kernel}, false);
    fn(idx("hift.source_downs", int(i)) + ".bias", source_downs_b[i], {cout}, true);
  }
  for (size_t i = 0; i < nu; ++i)
    resblock_tensors(idx("hift.source_resblocks", int(i)), C0 >> (i + 1), c.source_resblock_kernels[i],
                     c.source_resblock_dilations, source_resblocks[i], fn);
  for (size_t i = 0; i < nu; ++i)
    for (size_t j = 0; j < nk; ++j)
      resblock_tensors(idx("hift.resblocks", int(i * nk + j)), C0 >> (i + 1), c.resblock_kernels[j],
                       c.resblock_dilations, resblocks[i * nk + j], fn);
  fn("hift.conv_post.weight", conv_post_w, {nf, C0 >> nu, 7}, false);
  fn("hift.conv_post.bias", conv_post_b, {nf}, true);
  f0_w.resize(size_t(c.f0_layers));
  f0_b.resize(size_t(c.f0_layers));
  for (int l = 0; l < c.f0_layers; ++l) {
    const std::string p = idx("hift.f0_predictor.condnet", 2 * l);
    fn(p + ".weight", f0_w[size_t(l)], {c.f0_channels, l == 0 ? c.in_channels : c.f0_channels, 3}, false);
    fn(p + ".bias", f0_b[size_t(l)], {c.f0_channels}, true);
  }
  fn("hift.f0_predictor.classifier.weight", f0_cls_w, {1, c.f0_channels}, false);
  fn("hift.f0_predictor.classifier.bias", f0_cls_b, {1}, true);
}

void bind_hift(const GgufFile& f, const HiftConfig& c, HiftWeights& w) {
  check_config(c, f.path());
  w.owned.clear();
  w.for_each_tensor(c, [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, bool is_vector) {
    const GgufTensorInfo* ti = f.find_tensor(name);
    CBX_CHECK(ti != nullptr, "%s: missing tensor '%s' %s", f.path().c_str(), name.c_str(), shape_string(shape).c_str());
    bool ok = ti->ndim == int(shape.size());
    for (int i = 0; ok && i < ti->ndim; ++i) ok = ti->shape[i] == shape[size_t(i)];
    if (!ok) {
      Tensor got = f.tensor(*ti);
      fail("%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(), got.shape_str().c_str(),
           shape_string(shape).c_str());
    }
    if (ti->dtype == DType::F32) {
      slot = f.tensor(*ti);
      return;
    }
    CBX_CHECK(!is_vector, "%s: tensor '%s' must be f32, got %s", f.path().c_str(), name.c_str(), dtype_name(ti->dtype));
    CBX_CHECK(ti->dtype == DType::F16 || ti->dtype == DType::BF16,
              "%s: tensor '%s' has dtype %s; HiFT weights must be f32, f16 or bf16", f.path().c_str(), name.c_str(),
              dtype_name(ti->dtype));
    Tensor src = f.tensor(*ti);
    const HugePiece& buf = w.owned.emplace_back(size_t(src.numel()) * 4);
    type_traits(ti->dtype).to_float(src.data, reinterpret_cast<float*>(buf.data()), src.numel());
    slot = make_tensor(DType::F32, src.ndim, src.shape, buf.data(), buf.size());
  });
}

// ---------------------------------------------------------------------------------------

HiftVocoder::HiftVocoder(const GgufFile& f, ThreadPool& pool, const HiftOptions& o)
    : cfg_(read_config(f).hift), pool_(pool) {
  init(f, o);
}

HiftVocoder::HiftVocoder(const ModelConfig& c, const GgufFile& f, ThreadPool& pool, const HiftOptions& o)
    : cfg_(c.hift), pool_(pool) {
  init(f, o);
}

HiftVocoder::~HiftVocoder() = default;

namespace {

// Lengths of one forward call for T mel frames (no heap: forward calls this).
constexpr int kMaxStages = 8;
struct HiftLengths {
  int64_t T = 0, N = 0, F = 0;
  int64_t L[kMaxStages] = {};  // per stage, after the reflection pad on the last
  int64_t slab = 0;            // floats of the largest [C, L] activation
};

HiftLengths lengths(const HiftConfig& c, int64_t T) {
  HiftLengths r;
  r.T = T;
  int64_t up = 1;
  for (int32_t u : c.upsample_rates) up *= u;
  r.N = up * c.hop * T;
  r.F = r.N / c.hop + 1;
  const size_t nu = c.upsample_rates.size();
  r.slab = std::max<int64_t>({int64_t(c.base_channels) * T, int64_t(c.f0_channels) * T, int64_t(c.n_fft + 2) * r.F});
  int64_t L = T;
  for (size_t i = 0; i < nu; ++i) {
    ConvTranspose1dParams p;
    p.stride = c.upsample_rates[i];
    p.padding = (c.upsample_kernels[i] - c.upsample_rates[i]) / 2;
    L = conv_transpose1d_out_len(L, c.upsample_kernels[i], p);
    const int64_t Lp = i + 1 == nu ? L + 1 : L;
    r.L[i] = Lp;
    r.slab = std::max(r.slab, (int64_t(c.base_channels) >> (i + 1)) * Lp);
  }
  return r;
}

// forward()'s per-call buffers, in its order: on the work arena, or on a plan sizing it.
struct HiftCallBufs {
  Tensor f0, src, s_stft;
  float* slab[5];  // activation slabs of L.slab floats
};
template <class A>
HiftCallBufs alloc_call(A& a, const HiftConfig& c, const HiftLengths& L) {
  HiftCallBufs b;
  b.f0 = a.alloc(DType::F32, {L.T}, "hift f0");
  b.src = a.alloc(DType::F32, {L.N}, "hift source");
  b.s_stft = a.alloc(DType::F32, {c.n_fft + 2, L.F}, "hift s_stft");
  for (float*& s : b.slab) s = static_cast<float*>(a.alloc_bytes(size_t(L.slab) * 4, 64, "hift activation slab"));
  return b;
}

}  // namespace

void HiftVocoder::init(const GgufFile& f, const HiftOptions& o) {
  bind_hift(f, cfg_, w_);
  CBX_CHECK(o.max_frames >= 1, "hift: max_frames %lld must be >= 1", (long long)o.max_frames);
  max_frames_ = o.max_frames;
  seed_ = o.seed;
  const GgufValue* ft = f.find("general.file_type");
  gemm_ = resolve_gemm_precision(o.gemm, ft && ft->as_int() != 0);
  n_stages_ = int(cfg_.upsample_rates.size());
  n_kernels_ = int(cfg_.resblock_kernels.size());
  timing_.ups.assign(size_t(n_stages_), 0.0);
  timing_.source_branch.assign(size_t(n_stages_), 0.0);
  timing_.resblocks.assign(size_t(n_stages_), 0.0);
  spf_ = 1;
  for (int32_t u : cfg_.upsample_rates) spf_ *= u;
  spf_ *= cfg_.hop;

  // The stage lengths must meet the source STFT's frames (T = 1 and T = max checked; every
  // length is affine in T).
  for (int64_t T : {int64_t(1), max_frames_}) {
    HiftLengths l = lengths(cfg_, T);
    CBX_CHECK(l.L[n_stages_ - 1] == l.F,
              "hift: the last stage gives %lld samples for T = %lld, the source STFT %lld frames",
              (long long)l.L[n_stages_ - 1], (long long)T, (long long)l.F);
    for (int i = 0; i < n_stages_; ++i) {
      const SourceDown sd = source_down(cfg_, size_t(i));
      Conv1dParams p;
      p.stride = sd.stride;
      p.pad_left = p.pad_right = sd.pad;
      const int64_t n = conv1d_out_len(l.F, sd.kernel, p);
      CBX_CHECK(n == l.L[size_t(i)], "hift: stage %d has %lld frames, its source branch %lld (T = %lld)", i,
                (long long)l.L[size_t(i)], (long long)n, (long long)T);
    }
  }

  // scipy get_window("hann", n_fft, fftbins=True): 0.5 - 0.5 cos(2 pi n / N), in double.
  window_.resize(size_t(cfg_.n_fft));
  for (int i = 0; i < cfg_.n_fft; ++i)
    window_[size_t(i)] = float(0.5 - 0.5 * std::cos(2.0 * M_PI * double(i) / double(cfg_.n_fft)));
  for (int i = 0; i < pool_.size(); ++i) {
    ffts_.push_back(std::make_unique<RealFft>(cfg_.n_fft));
    fft_bufs_.emplace_back(size_t(cfg_.n_fft + 2 * (cfg_.n_fft / 2 + 1)));
  }

  if (gemm_ == GemmPrecision::BF16) {
    for (const Tensor& uw : w_.ups_w) ups_packs_.push_back(conv_transpose1d_pack(pool_, uw));
    conv_packs_.add(pool_, w_.conv_pre_w, w_.conv_pre_b);
    for (const auto* rbs : {&w_.resblocks, &w_.source_resblocks})
      for (const HiftResBlockWeights& rb : *rbs)
        for (size_t j = 0; j < rb.dilations.size(); ++j) {
          conv_packs_.add(pool_, rb.conv1_w[j], rb.conv1_b[j]);
          conv_packs_.add(pool_, rb.conv2_w[j], rb.conv2_b[j]);
        }
  }

  // The arenas: the persistent buffers, then forward()'s at max_frames with each conv's scratch
  // as it takes it (with its packed weights, in its precision scope).
  const HiftLengths L = lengths(cfg_, max_frames_);
  const int64_t H1 = cfg_.nb_harmonics + 1;
  auto persistent = [&](auto& a) {
    gen_noise_ = a.alloc(DType::F32, {H1, L.N}, "hift generator noise");
    cycles_ = a.alloc(DType::F32, {H1, L.N}, "hift harmonic cycles");
    wave_buf_ = a.alloc(DType::F32, {L.N}, "hift wave");
  };
  ArenaPlan keep;
  persistent(keep);
  ArenaPlan call = o.work ? ArenaPlan() : keep;
  alloc_call(call, cfg_, L);
  const int nt = pool_.size();
  auto conv = [&](const Tensor& w, int64_t t_in, const Conv1dParams& p) {
    call.scratch(conv1d_scratch_bytes(w, t_in, p, nt));
  };
  {
    GemmPrecisionScope exact(GemmPrecision::F32);  // f0_predict and conv_post run in f32
    Conv1dParams p;
    p.pad_left = p.pad_right = 1;
    for (const Tensor& fw : w_.f0_w) conv(fw, L.T, p);
    p.pad_left = p.pad_right = (w_.conv_post_w.shape[2] - 1) / 2;
    conv(w_.conv_post_w, L.L[size_t(n_stages_ - 1)], p);
  }
  GemmPrecisionScope scope(gemm_);
  Conv1dParams pre;
  pre.pad_left = pre.pad_right = (cfg_.conv_pre_kernel - 1) / 2;
  pre.packed = conv_packs_.find(w_.conv_pre_w);
  conv(w_.conv_pre_w, L.T, pre);
  for (int i = 0; i < n_stages_; ++i) {
    const int64_t Li = L.L[size_t(i)];
    ConvTranspose1dParams pu;
    pu.stride = cfg_.upsample_rates[size_t(i)];
    pu.padding = (cfg_.upsample_kernels[size_t(i)] - cfg_.upsample_rates[size_t(i)]) / 2;
    if (!ups_packs_.empty()) pu.packed = &ups_packs_[size_t(i)];
    call.scratch(conv_transpose1d_scratch_bytes(w_.ups_w[size_t(i)], i ? L.L[size_t(i - 1)] : L.T, pu, nt));
    const SourceDown sd = source_down(cfg_, size_t(i));
    Conv1dParams ps;
    ps.stride = sd.stride;
    ps.pad_left = ps.pad_right = sd.pad;
    conv(w_.source_downs_w[size_t(i)], L.F, ps);
    auto resblock = [&](const HiftResBlockWeights& rb) {
      for (size_t j = 0; j < rb.dilations.size(); ++j) {
        Conv1dParams p1, p2;
        p1.dilation = rb.dilations[j];
        p1.pad_left = p1.pad_right = p1.dilation * (rb.kernel - 1) / 2;
        p1.packed = conv_packs_.find(rb.conv1_w[j]);
        p2.pad_left = p2.pad_right = (rb.kernel - 1) / 2;
        p2.packed = conv_packs_.find(rb.conv2_w[j]);
        conv(rb.conv1_w[j], Li, p1);
        conv(rb.conv2_w[j], Li, p2);
      }
    };
    resblock(w_.source_resblocks[size_t(i)]);
    for (int j = 0; j < n_kernels_; ++j) resblock(w_.resblocks[size_t(i * n_kernels_ + j)]);
  }
  work_ = reserve_stage_arenas(arena_, o.work, keep, call);
  persistent(arena_);
  gen_phases_.assign(size_t(H1), 0.f);
  last_f0_.reserve(size_t(max_frames_));
  call_mark_ = arena_.mark();
  work_base_ = o.work ? 0 : call_mark_;
}

// out = ResBlock(in); in may be out. The first residual add writes out = in + ..., so the
// input need not be copied first.
void HiftVocoder::run_resblock(const HiftResBlockWeights& rb, const Tensor& in, Tensor& out, Tensor& t1, Tensor& t2) {
  const int64_t k = rb.kernel;
  for (size_t j = 0; j < rb.dilations.size(); ++j) {
    const Tensor& x = j == 0 ? in : out;
    const int64_t d = rb.dilations[j];
    Conv1dParams p1;
    p1.dilation = d;
    p1.pad_left = p1.pad_right = d * (k - 1) / 2;
    p1.packed = conv_packs_.find(rb.conv1_w[j]);
    Conv1dParams p2;
    p2.pad_left = p2.pad_right = (k - 1) / 2;
    p2.packed = conv_packs_.find(rb.conv2_w[j]);
    if (conv1d_snake_fused(rb.conv1_w[j].shape[0], p1) && conv1d_snake_fused(rb.conv2_w[j].shape[0], p2)) {
      // Same bits as the composed ops below, without three passes over the activations.
      conv1d_snake(pool_, x, rb.alpha1[j], rb.conv1_w[j], rb.conv1_b[j], Tensor{}, t2, p1, work_);
      conv1d_snake(pool_, t2, rb.alpha2[j], rb.conv2_w[j], rb.conv2_b[j], x, out, p2, work_);
      continue;
    }
    snake(pool_, x, rb.alpha1[j], t1);
    conv1d(pool_, t1, rb.conv1_w[j], rb.conv1_b[j], t2, p1, work_);
    snake(pool_, t2, rb.alpha2[j], t2);
    conv1d(pool_, t2, rb.conv2_w[j], rb.conv2_b[j], t1, p2, work_);
    add(pool_, x, t1, out);
  }
}

const Tensor& HiftVocoder::forward(const Tensor& mel, const HiftDraws* draws) {
  const auto t_start = Clock::now();
  GemmPrecisionScope gemm_scope(gemm_);
  CBX_CHECK(mel.dtype == DType::F32 && mel.ndim == 2 && mel.shape[0] == cfg_.in_channels,
            "hift: mel must be f32 [%d, T], got %s %s", cfg_.in_channels, dtype_name(mel.dtype),
            mel.shape_str().c_str());
  const int64_t T = mel.shape[1];
  CBX_CHECK(T >= 1 && T <= max_frames_, "hift: %lld mel frames, this vocoder takes 1..%lld", (long long)T,
            (long long)max_frames_);
  CBX_CHECK(draws == nullptr || (draws->phases && draws->noise), "hift: injected draws need phases and noise");
  const HiftLengths L = lengths(cfg_, T);
  const int64_t N = L.N, F = L.F, C0 = cfg_.base_channels;
  const int64_t nf = cfg_.n_fft + 2, bins = cfg_.n_fft / 2 + 1;
  work_->rewind(work_base_);
  timing_.f0 = timing_.source = timing_.stft = timing_.conv_pre = timing_.istft = timing_.total = 0;

  HiftCallBufs cb = alloc_call(*work_, cfg_, L);
  Tensor &f0 = cb.f0, &src = cb.src, &s_stft = cb.s_stft;
  float** slab = cb.slab;
  const size_t slab_bytes = size_t(L.slab) * 4;
  auto view = [&](int i, int64_t C, int64_t len) { return make_tensor(DType::F32, {C, len}, slab[i], slab_bytes); };

  // 1. f0.
  auto t0 = Clock::now();
  {
    Tensor h0 = view(0, cfg_.f0_channels, T), h1 = view(1, cfg_.f0_channels, T);
    GemmPrecisionScope exact(GemmPrecision::F32);  // f0 drives the sine phases (cumulative)
    f0_predict(mel, h0, h1, f0);
  }
  timing_.f0 = ms_since(t0);
  emit("f0", -1, f0);
  last_f0_.assign(f0.ptr<float>(), f0.ptr<float>() + T);

  // 2. source.
  t0 = Clock::now();
  const float* phases;
  const float* noise;
  int64_t noise_stride = N;
  const double* cycle_start = nullptr;
  int64_t cycle_frame = 0;
  if (draws) {
    phases = draws->phases;
    noise = draws->noise;
    if (draws->noise_stride) noise_stride = draws->noise_stride;
    CBX_CHECK(noise_stride >= N, "hift: noise row stride %lld < %lld samples", (long long)noise_stride, (long long)N);
    cycle_start = draws->cycle_start;
    cycle_frame = draws->cycle_frame;
    CBX_CHECK(cycle_frame >= 0 && cycle_frame <= T, "hift: cycle_frame %lld outside 0..%lld", (long long)cycle_frame,
              (long long)T);
  } else {
    generate_draws(N);
    phases = gen_phases_.data();
    noise = gen_noise_.ptr<float>();
  }
  make_source(f0, phases, noise, noise_stride, cycle_start, cycle_frame, N, src);
  timing_.source = ms_since(t0);
  emit("source", -1, src);

  // 3. source STFT: re at [k, f], im at [bins + k, f].
  t0 = Clock::now();
  source_stft(src.ptr<float>(), N, s_stft.ptr<float>());
  timing_.stft = ms_since(t0);
  emit("s_stft", -1, s_stft);

  // 4. decode. Slab roles per stage: cur = x; up = upsampled x; acc = resblock sum;
  // x's slab is reused for the source branch and the later resblock outputs; two temporaries.
  t0 = Clock::now();
  int cur = 0;
  {
    Tensor x = view(cur, C0, T);
    Conv1dParams p;
    p.pad_left = p.pad_right = (cfg_.conv_pre_kernel - 1) / 2;
    p.packed = conv_packs_.find(w_.conv_pre_w);
    conv1d(pool_, mel, w_.conv_pre_w, w_.conv_pre_b, x, p, work_);
    emit("conv_pre", -1, x);
  }
  timing_.conv_pre = ms_since(t0);
  int64_t Lx = T;
  for (int i = 0; i < n_stages_; ++i) {
    const int64_t Cin = C0 >> i, C = C0 >> (i + 1), Li = L.L[size_t(i)];
    const bool last = i + 1 == n_stages_;
    int others[4], no = 0;
    for (int s = 0; s < 5; ++s)
      if (s != cur) others[no++] = s;
    const int up = others[0], acc_i = others[1], ta = others[2], tb = others[3];

    t0 = Clock::now();
    Tensor x = view(cur, Cin, Lx);
    leaky_relu(pool_, x, x, cfg_.lrelu_slope);
    Tensor xu = view(up, C, Li);
    {
      Tensor y = last ? slice(xu, 1, 1, Li - 1) : xu;
      ConvTranspose1dParams p;
      p.stride = cfg_.upsample_rates[size_t(i)];
      p.padding = (cfg_.upsample_kernels[size_t(i)] - cfg_.upsample_rates[size_t(i)]) / 2;
      if (!ups_packs_.empty()) p.packed = &ups_packs_[size_t(i)];
      conv_transpose1d(pool_, x, w_.ups_w[size_t(i)], w_.ups_b[size_t(i)], y, p, work_);
      if (last) {  // ReflectionPad1d((1, 0)): out[0] = in[1]
        for (int64_t c = 0; c < C; ++c) {
          float* r = static_cast<float*>(xu.row(c));
          r[0] = r[2];
        }
      }
    }
    timing_.ups[size_t(i)] = ms_since(t0);
    emit("ups", i, xu);

    t0 = Clock::now();
    Tensor t1 = view(ta, C, Li), t2 = view(tb, C, Li);
    Tensor sb = view(cur, C, Li);
    {
      const SourceDown sd = source_down(cfg_, size_t(i));
      Conv1dParams p;
      p.stride = sd.stride;
      p.pad_left = p.pad_right = sd.pad;
      conv1d(pool_, s_stft, w_.source_downs_w[size_t(i)], w_.source_downs_b[size_t(i)], sb, p, work_);
      run_resblock(w_.source_resblocks[size_t(i)], sb, sb, t1, t2);
    }
    emit("source_branch", i, sb);
    add(pool_, xu, sb, xu);
    timing_.source_branch[size_t(i)] = ms_since(t0);

    t0 = Clock::now();
    Tensor acc = view(acc_i, C, Li);
    run_resblock(w_.resblocks[size_t(i * n_kernels_)], xu, acc, t1, t2);
    for (int j = 1; j < n_kernels_; ++j) {
      run_resblock(w_.resblocks[size_t(i * n_kernels_ + j)], xu, sb, t1, t2);
      add(pool_, acc, sb, acc);
    }
    scale(pool_, acc, acc, 1.f / float(n_kernels_));
    timing_.resblocks[size_t(i)] = ms_since(t0);
    emit("stage", i, acc);
    cur = acc_i;
    Lx = Li;
  }

  // 5. conv_post, spectrum, iSTFT, clamp.
  t0 = Clock::now();
  const int a = (cur + 1) % 5, b = (cur + 2) % 5;
  Tensor x = view(cur, C0 >> n_stages_, Lx);
  leaky_relu(pool_, x, x, kPostLreluSlope);
  Tensor o = view(a, nf, F);
  {
    Conv1dParams p;
    p.pad_left = p.pad_right = (w_.conv_post_w.shape[2] - 1) / 2;
    GemmPrecisionScope exact(GemmPrecision::F32);  // log-magnitudes: exp() turns errors relative
    conv1d(pool_, x, w_.conv_post_w, w_.conv_post_b, o, p, work_);
  }
  emit("conv_post", -1, o);
  float* re = slab[b];
  float* im = slab[b] + bins * F;
  {
    const float* op = o.ptr<float>();
    pool_.run([&](int ith, int nth) {
      int64_t r0, r1;
      ThreadPool::split(bins * F, ith, nth, &r0, &r1);
      for (int64_t i = r0; i < r1; ++i) {
        const float mag = std::min(std::exp(op[i]), kMaxMagnitude);
        const float ph = std::sin(op[bins * F + i]);
        re[i] = mag * std::cos(ph);
        im[i] = mag * std::sin(ph);
      }
    });
  }
  wave_ = make_tensor(DType::F32, {N}, wave_buf_.data, wave_buf_.nbytes());
  istft(re, im, F, slab[cur], wave_.ptr<float>());
  clamp(pool_, wave_, wave_, -cfg_.audio_limit, cfg_.audio_limit);
  timing_.istft = ms_since(t0);
  emit("wave", -1, wave_);
  timing_.total = ms_since(t_start);
  return wave_;
}

void hift_trim_fade(float* wave, int64_t n, int64_t n_trim) {
  if (n_trim <= 0) return;
  for (int64_t i = 0; i < std::min(n, n_trim); ++i) wave[i] = 0.f;
  for (int64_t i = 0; i < n_trim && n_trim + i < n; ++i) {
    // torch.linspace(pi, 0, n): start + i * (end - start) / (n - 1)
    const double ang = n_trim == 1 ? M_PI : M_PI - M_PI * double(i) / double(n_trim - 1);
    wave[n_trim + i] *= float((std::cos(ang) + 1.0) / 2.0);
  }
}

}  // namespace cbx
