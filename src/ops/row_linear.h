// Single-row building blocks for decode steps that run a whole transformer layer inside
// one ThreadPool::run: each thread computes its own share of the output rows, and the
// small per-row work around a projection (norm, activation conversion, bias, GELU,
// residual add) is done by every thread for itself instead of serially between runs.
// ops/matmul (one run per call, the serial parts on the calling thread) stays the general
// entry point; these functions never touch a pool and allocate nothing.
//
//   RowLinear:  y[m] = dot(w[m, :], x) + b[m] for rows m of [m0, m1), x: f32 [K]; same
//               numerics as ops/matmul's dot path (N < matmul_gemm_min_rows()). Q4_0 and
//               Q8_0 weights are copied once into planar row pairs (q4p / q8p,
//               kernels/matvec_q4p.h) where a SIMD kernel for them exists (AVX-512): same
//               results, faster loads, at the cost of a second copy of those weights in
//               memory (packed_bytes()); pack = false keeps the GGUF layout. Q4_K
//               weights with K % 512 == 0 likewise get q4kp rows (kernels/matvec_q4k.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cpu.h"
#include "core/tensor.h"

namespace cbx {

struct MatmulKernels;
struct DotKernel;

enum class RowEpilogue : int {
  Store,     // y[m] = w[m] . x + b[m]
  GeluTanh,  // y[m] = gelu_tanh(w[m] . x + b[m])
  AddTo,     // y[m] += w[m] . x + b[m]   (a residual stream)
};

// What a model asks of a RowLinear's weight layout; the layout itself follows the active ISA
// (the planar / q4kp copies exist only where a kernel for them runs).
struct RowLinearOptions {
  // Re-lay Q4_0 / Q8_0 / Q4_K weights out for the SIMD row kernels where that ISA has them
  // (the user's repack policy: cbx_model_params.repack, the CLI's --no-repack); false keeps the
  // GGUF layout. Same results either way.
  bool repack = true;
};

class RowLinear {
 public:
  RowLinear() = default;
  // w: [M, K] of a matmul weight type (rows contiguous, K % 32 == 0 when quantized);
  // bias: contiguous f32 [M] or empty. Errors name `name`.
  RowLinear(const Tensor& w, const Tensor& bias, const char* name, Isa isa = active_isa(), bool pack = true);
  // Same, with the planar copy (if any) written to caller-owned storage: pack_bytes(w, isa, pack)
  // bytes, 64-aligned, outliving this object (e.g. one huge-page buffer for a whole model).
  RowLinear(const Tensor& w, const Tensor& bias, const char* name, Isa isa, bool pack, uint8_t* storage);
  // The layout chosen for the active ISA under options o, the copy (if any) in caller-owned
  // storage of pack_bytes(w, o) bytes as above (nullptr: the object allocates it).
  RowLinear(const Tensor& w, const Tensor& bias, const char* name, const RowLinearOptions& o, uint8_t* storage);
  // Bytes of the re-laid-out copy a RowLinear of w would make (0: it reads w in place).
  static size_t pack_bytes(const Tensor& w, Isa isa = active_isa(), bool pack = true);
  // The same for the active ISA under options o.
  static size_t pack_bytes(const Tensor& w, const RowLinearOptions& o);

  int64_t rows() const { return m_; }
  int64_t cols() const { return k_; }
  // Bytes of the re-laid-out weight copy this object owns (0 when it reads w in place).
  size_t packed_bytes() const { return packed_bytes_; }
  // Bytes act() needs for a converted row (0 when the kernel reads f32 x in place).
  size_t act_bytes() const { return act_bytes_; }
  // Converts x (f32 [K]) for the dot kernel into buf (act_bytes() bytes, 64-aligned);
  // returns what to pass to rows() (x itself when no conversion is needed).
  const void* act(const float* x, void* buf) const;
  // Output rows [m0, m1) (0 <= m0 <= m1 <= M); y points at row 0 of the output. tmp: at
  // least m1 - m0 floats of the caller's scratch (AddTo only; may be null otherwise).
  void run(int64_t m0, int64_t m1, const void* act, float* y, RowEpilogue e, float* tmp = nullptr) const;

  // Several activation rows at once (a CFG batch): each weight row is read once for all n
  // rows, and every output equals the one-row run's exactly (the dot kernels accumulate
  // each (weight row, activation row) pair in the one-row order).
  // act_rows converts n rows of x (rows xs floats apart) into buf (n * act_bytes() bytes,
  // 64-aligned) and returns the activation rows with their stride in *as (x itself, xs * 4
  // bytes apart, when no conversion is needed).
  const void* act_rows(const float* x, int64_t xs, int64_t n, void* buf, size_t* as) const;
  // Output rows [m0, m1) for activation rows [0, n): y[r * ldy + m]. tmp: at least
  // n * (m1 - m0) floats (AddTo only).
  void run_rows(int64_t m0, int64_t m1, const void* act, size_t as, int64_t n, float* y, int64_t ldy, RowEpilogue e,
                float* tmp = nullptr) const;
  // Whether o takes the same converted activations as this (same kernel format and K), so
  // one act_rows() serves both.
  bool same_act(const RowLinear& o) const;

 private:
  // Kernel results of weight rows [m0, m1) for activation rows [0, n) (as bytes apart) into
  // out[r * ldo + (m - m0)].
  void dot(int64_t m0, int64_t m1, const void* act, size_t as, int64_t n, float* out, int64_t ldo) const;

  const uint8_t* w_ = nullptr;
  size_t ws_ = 0;
  const float* b_ = nullptr;
  int64_t m_ = 0, k_ = 0;
  const DotKernel* dot_ = nullptr;
  Isa isa_ = Isa::Generic;
  size_t act_bytes_ = 0;
  std::shared_ptr<uint8_t> packed_;  // planar copy of w (shared by copies of this object)
  size_t packed_bytes_ = 0;
  bool pairs_ = false;  // the packed copy is in row pairs (q4p / q8p; q4kp rows stand alone)
};

// Prefill strategy: the most rows a forward call through `weights` (a model's layer
// projections) runs on the row kernels (RowLinear::run_rows: activations converted as in a
// decode step, each weight row read once for all rows, every row's outputs equal to those of
// a one-row call) instead of the GEMM of ops/matmul, which dequantizes every weight per call;
// 0: every call of 2 or more rows takes the GEMM. Row kernels only when every weight is
// Q8_0, Q4_0 or Q4_K. requested >= 0 is the caller's limit (0 or 1: always the GEMM); -1
// picks it: kRowPrefillAutoRows, except where the bf16 GEMM runs on AMX tiles
// (gemm_bf16_kind() "amx"), whose GEMM is several times the vdpbf16ps one and was not measured
// against the row kernels: there the GEMM stays. The result is capped at max_rows. The row
// kernels win for short prefills because they read each quantized weight once, as a decode
// step does, where the GEMM dequantizes and packs every weight first; that fixed cost is
// repaid only over a few hundred rows.
inline constexpr int64_t kRowPrefillAutoRows = 64;
int64_t row_prefill_max_rows(const std::vector<const Tensor*>& weights, int64_t requested, int64_t max_rows);
// The rule itself, with the bf16 GEMM's kind given (for tests: the answer on a CPU with or
// without AMX).
int64_t row_prefill_max_rows(const std::vector<const Tensor*>& weights, int64_t requested, int64_t max_rows,
                             bool amx_gemm);

// Per-row helpers with the kernels of `isa` (no pool): layer norm of one row of n
// (w, b: f32 [n], either may be empty) and f32 -> f16 / f32 copies of n values (KV stores).
void row_layer_norm(const float* x, float* y, int64_t n, const Tensor& w, const Tensor& b, float eps,
                    Isa isa = active_isa());
void row_store(const float* x, void* dst, DType dst_type, int64_t n);
// RMS norm of one row (ops/norm rms_norm's kernel): y = x / sqrt(mean(x^2) + eps) * w.
void row_rms_norm(const float* x, float* y, int64_t n, const Tensor& w, float eps, Isa isa = active_isa());
// NeoX rotate-half RoPE of one row of 2 * half values in place, angles given by cos/sin
// [half] (ops/norm rope's kernel).
void row_rope(float* x, int64_t half, const float* cos, const float* sin, Isa isa = active_isa());
// SwiGLU combine as ops/elementwise silu then mul: g = silu(g) * u over n values (in place).
void row_silu_mul(float* g, const float* u, int64_t n, Isa isa = active_isa());

}  // namespace cbx
