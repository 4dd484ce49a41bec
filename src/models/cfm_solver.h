// Conditional flow matching solvers of S3Gen (upstream models/s3gen/flow_matching.py,
// CausalConditionalCFM; spec §8.3). Both integrate dx/dt = estimator(x, ...) from noise at
// t = 0 to a mel at t = 1 with fixed Euler steps over t_span, then drop the prompt frames:
//
//   t_span   = linspace(0, 1, n + 1) in f32 (torch's formula: start + step i for the first half,
//              end - step (n - i) for the second); non-meanflow with the cosine scheduler:
//              t = 1 - cos(t * 0.5 * pi)
//   meanflow (Turbo, basic_euler): for (t, r) = (t_k, t_k+1):
//              x += (r - t) * estimator(x, m, mu, t, spks, cond, r)            (n = 2, no CFG)
//   otherwise (Multilingual, solve_euler): a batch of two per step, row 1 with mu, spks and cond
//              zeroed:  v = (1 + cfg) v_cond - cfg v_uncond;  x += (t_k+1 - t_k) v   (n = 10, cfg 0.7)
//   mel      = x[:, n_prompt:]
//
// Noise: z ~ N(0, 1) [80, T] over prompt + generated frames. Upstream draws it with torch (and,
// for meanflow, overwrites z[:, n_prompt:] with a second draw, which is again plain N(0, 1)),
// unseeded. It can be injected for parity; otherwise our seeded generator draws it (same seed
// and call order -> same mel, for any thread count).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/cfm_estimator.h"
#include "models/model_config.h"

namespace cbx {

struct CfmSolverOptions {
  int64_t max_frames = 3000;                 // most frames T (prompt + generated) one solve takes
  uint64_t seed = 0;                         // noise generator, used when solve gets no noise
  Arena* work = nullptr;                     // the estimator's per-call buffers (CfmEstimatorOptions::work)
  GemmPrecision gemm = GemmPrecision::Auto;  // CfmEstimatorOptions::gemm (Int8: int8 linears)
};

// Called after each Euler step k with x [80, T] (prompt frames included).
using CfmStepCapture = std::function<void(int step, const Tensor& x)>;

class CfmSolver {
 public:
  // c and w are referenced: they must outlive this object.
  CfmSolver(const CfmConfig& c, const CfmEstimatorWeights& w, ThreadPool& pool, const CfmSolverOptions& o = {});
  ~CfmSolver();
  CfmSolver(const CfmSolver&) = delete;
  CfmSolver& operator=(const CfmSolver&) = delete;

  // mu, cond: F32 [80, T] (rows may be strided); spks: F32 [80] (the projected speaker vector);
  // n_prompt: leading frames dropped from the result (0 <= n_prompt < T);
  // noise: F32 [80, T] or empty (seeded generator); mask: empty or F32 [T] ones-then-zeros.
  // -> mel F32 [80, T - n_prompt], valid until the next call.
  const Tensor& solve(const Tensor& mu, const Tensor& spks, const Tensor& cond, int64_t n_prompt,
                      const Tensor& noise = Tensor{}, const Tensor& mask = Tensor{});

  // t_0 .. t_n as the solver uses them (f32).
  std::vector<float> time_span() const;
  bool uses_cfg() const { return cfg_; }
  int n_steps() const { return c_.n_timesteps; }
  void set_seed(uint64_t seed);
  // The generator's state (seed, solves drawn since set_seed), to interleave several requests'
  // solves: set_generator(seed, calls) continues exactly where that state left off.
  uint64_t generator_seed() const { return seed_; }
  uint64_t generator_calls() const { return n_calls_; }
  void set_generator(uint64_t seed, uint64_t calls) {
    seed_ = seed;
    n_calls_ = calls;
  }
  void set_step_capture(CfmStepCapture fn) { step_capture_ = std::move(fn); }
  CfmEstimator& estimator() { return *est_; }
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }
  // The last solve's mel (valid until the next solve).
  const Tensor& last_mel() const { return mel_; }
  // Wall time of each estimator call of the last solve, in ms.
  const std::vector<double>& last_step_ms() const { return step_ms_; }

  // Draws the noise the next solve without injected noise would draw, into z [80, T], and
  // advances the generator as that solve would. A frame's noise depends only on the seed, the
  // call and its position, not on T (streaming draws it once for the longest length).
  void draw_noise(Tensor& z);

 private:
  const CfmConfig& c_;
  ThreadPool& pool_;
  bool cfg_ = false;  // batch of two with classifier-free guidance
  int64_t max_frames_ = 0;
  uint64_t seed_ = 0, n_calls_ = 0;
  std::unique_ptr<CfmEstimator> est_;
  Arena arena_;
  Tensor mel_;
  CfmStepCapture step_capture_;
  std::vector<double> step_ms_;
};

}  // namespace cbx
