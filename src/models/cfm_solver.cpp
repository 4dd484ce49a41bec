#include "models/cfm_solver.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "models/sampler.h"
#include "ops/elementwise.h"

namespace cbx {

namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void check_mel(const Tensor& a, int64_t M, int64_t T, const char* what) {
  CBX_CHECK(a.dtype == DType::F32 && a.ndim == 2 && a.shape[0] == M && a.shape[1] == T,
            "cfm solve: %s must be f32 [%lld, %lld], got %s %s", what, (long long)M, (long long)T, dtype_name(a.dtype),
            a.shape_str().c_str());
}

}  // namespace

CfmSolver::CfmSolver(const CfmConfig& c, const CfmEstimatorWeights& w, ThreadPool& pool, const CfmSolverOptions& o)
    : c_(c), pool_(pool), seed_(o.seed) {
  CBX_CHECK(c.n_timesteps >= 1, "cfm solver: n_timesteps %d must be >= 1", c.n_timesteps);
  CBX_CHECK(c.meanflow || c.t_scheduler == "cosine" || c.t_scheduler == "linear",
            "cfm solver: unknown t_scheduler '%s'", c.t_scheduler.c_str());
  // Upstream always runs the pair for non-meanflow models; with cfg_rate 0 the pair gives
  // v_cond exactly, so one row suffices then.
  cfg_ = !c.meanflow && c.cfg_rate != 0.f;
  max_frames_ = o.max_frames;
  CfmEstimatorOptions eo;
  eo.max_frames = o.max_frames;
  eo.max_batch = cfg_ ? 2 : 1;
  eo.work = o.work;
  eo.gemm = o.gemm;
  est_ = std::make_unique<CfmEstimator>(c, w, pool, eo);
  const int64_t M = c.out_channels, T = max_frames_, B = eo.max_batch;
  // solve()'s allocations at max_frames: x; with CFG the x, mu, cond and spks pairs; the mel
  // (largest with no prompt frames).
  ArenaPlan plan;
  plan.alloc(DType::F32, {M, T});
  if (B == 2) {
    for (int i = 0; i < 3; ++i) plan.alloc(DType::F32, {2, M, T});
    plan.alloc(DType::F32, {2, M});
  }
  plan.alloc(DType::F32, {M, T});
  arena_.reserve(plan.bytes());
  step_ms_.reserve(size_t(c.n_timesteps));
}

CfmSolver::~CfmSolver() = default;

void CfmSolver::set_seed(uint64_t seed) {
  seed_ = seed;
  n_calls_ = 0;
}

std::vector<float> CfmSolver::time_span() const {
  const int64_t n = c_.n_timesteps, steps = n + 1;
  const float step = 1.f / float(n);
  std::vector<float> ts(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i)
    ts[size_t(i)] = i < steps / 2 ? step * float(i) : 1.f - step * float(steps - i - 1);
  if (!c_.meanflow && c_.t_scheduler == "cosine") {
    const float half_pi_scale = 0.5f, pi = float(M_PI);
    for (float& t : ts) t = 1.f - std::cos((t * half_pi_scale) * pi);
  }
  return ts;
}

void CfmSolver::draw_noise(Tensor& z) {
  const uint64_t key = mix64(seed_ ^ mix64(n_calls_ + 0x5EEDull));
  ++n_calls_;
  const int64_t rows = z.shape[0], T = z.shape[1];
  for (int64_t ch = 0; ch < rows; ++ch) {
    Rng rng(mix64(key ^ mix64(uint64_t(ch))));
    float* o = static_cast<float*>(z.row(ch));
    for (int64_t t = 0; t < T; t += 2) {  // Box-Muller, two normals per pair of uniforms
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      const double rad = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
      o[t] = float(rad * std::cos(a));
      if (t + 1 < T) o[t + 1] = float(rad * std::sin(a));
    }
  }
}

const Tensor& CfmSolver::solve(const Tensor& mu, const Tensor& spks, const Tensor& cond, int64_t n_prompt,
                               const Tensor& noise, const Tensor& mask) {
  const int64_t M = c_.out_channels;
  CBX_CHECK(mu.dtype == DType::F32 && mu.ndim == 2 && mu.shape[0] == M, "cfm solve: mu must be f32 [%lld, T], got %s",
            (long long)M, mu.shape_str().c_str());
  const int64_t T = mu.shape[1];
  CBX_CHECK(T >= 1 && T <= max_frames_, "cfm solve: %lld frames exceed the reserved %lld", (long long)T,
            (long long)max_frames_);
  check_mel(cond, M, T, "cond");
  if (!noise.empty()) check_mel(noise, M, T, "noise");
  CBX_CHECK(spks.dtype == DType::F32 && spks.numel() == M && spks.is_contiguous(),
            "cfm solve: spks must be a contiguous f32 [%lld], got %s", (long long)M, spks.shape_str().c_str());
  CBX_CHECK(n_prompt >= 0 && n_prompt < T, "cfm solve: n_prompt %lld must lie in [0, %lld)", (long long)n_prompt,
            (long long)T);

  arena_.reset();
  Tensor x = arena_.alloc(DType::F32, {M, T}, "cfm x");
  if (noise.empty())
    draw_noise(x);
  else
    copy_strided(noise, x);

  const std::vector<float> ts = time_span();
  step_ms_.clear();
  using Clock = std::chrono::steady_clock;
  const int B = cfg_ ? 2 : 1;
  Tensor xb, mub, condb, spkb;
  if (cfg_) {  // row 0 conditional, row 1 with mu, spks and cond zeroed
    xb = arena_.alloc(DType::F32, {2, M, T}, "cfm x pair");
    mub = arena_.alloc(DType::F32, {2, M, T}, "cfm mu pair");
    condb = arena_.alloc(DType::F32, {2, M, T}, "cfm cond pair");
    spkb = arena_.alloc(DType::F32, {2, M}, "cfm spks pair");
    std::memset(mub.data, 0, mub.nbytes());
    std::memset(condb.data, 0, condb.nbytes());
    std::memset(spkb.data, 0, spkb.nbytes());
    Tensor m0 = reshape(slice(mub, 0, 0, 1), {M, T}), c0 = reshape(slice(condb, 0, 0, 1), {M, T});
    copy_strided(mu, m0);
    copy_strided(cond, c0);
    std::memcpy(spkb.data, spks.data, size_t(M) * 4);
  }
  const float a = float(1.0 + double(c_.cfg_rate)), b = c_.cfg_rate;
  for (int k = 0; k < c_.n_timesteps; ++k) {
    const float t = ts[size_t(k)], r = ts[size_t(k) + 1], dt = r - t;
    const float tb[2] = {t, t}, rb[2] = {r, r};
    const auto t0 = Clock::now();
    if (cfg_) {
      for (int i = 0; i < B; ++i) {
        Tensor xi = reshape(slice(xb, 0, i, 1), {M, T});
        copy_strided(x, xi);
      }
      const Tensor& v = est_->forward(xb, mask, mub, tb, spkb, condb, nullptr);
      const float* v0 = v.ptr<float>();
      const float* v1 = v0 + M * T;
      float* xp = x.ptr<float>();
      for (int64_t i = 0; i < M * T; ++i) {
        const float vi = a * v0[i] - b * v1[i];
        xp[i] = xp[i] + dt * vi;
      }
    } else {
      const Tensor& v = est_->forward(x, mask, mu, tb, spks, cond, c_.meanflow ? rb : nullptr);
      const float* vp = v.ptr<float>();
      float* xp = x.ptr<float>();
      for (int64_t i = 0; i < M * T; ++i) xp[i] = xp[i] + dt * vp[i];
    }
    step_ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (step_capture_) step_capture_(k, x);
  }
  mel_ = arena_.alloc(DType::F32, {M, T - n_prompt}, "cfm mel");
  copy_strided(slice(x, 1, n_prompt, T - n_prompt), mel_);
  return mel_;
}

}  // namespace cbx
