// Non-matmul kernels (elementwise, norms, softmax, RoPE, conv GEMM tiles, attention,
// LSTM gates): one table of function pointers per ISA. Kernels work on raw contiguous
// rows; shapes, strides, threading and validation live in the op front-ends (src/ops/).
// nn_generic.cpp is the reference; nn_avx2.cpp / nn_avx512.cpp instantiate the shared
// SIMD templates in nn_simd_*.h with 8- and 16-lane vectors.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace cbx {

// y = f(x) elementwise; p0/p1 are the op's parameters (see each entry).
enum class Unary : int {
  Copy,       // y = x
  Scale,      // y = p0 * x
  Affine,     // y = p0 * x + p1   (eval BatchNorm, add a scalar with p0 = 1)
  Relu,       // max(x, 0)
  LeakyRelu,  // x >= 0 ? x : p0 * x
  Elu,        // x > 0 ? x : p0 * (exp(x) - 1)
  Gelu,       // exact: 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   ("gelu_new")
  Silu,       // x * sigmoid(x)
  Mish,       // x * tanh(softplus(x))
  Tanh,
  Sigmoid,
  Softplus,  // log(1 + exp(x)); x for x > 20 (PyTorch threshold)
  Exp,
  Sin,
  Clamp,  // min(max(x, p0), p1)
  Abs,
  Count
};

enum class Binary : int { Add, Sub, Mul, Count };

// C[m, n] += A[m, k] * B[k, n] over a tile. A may be strided either way (its elements are
// broadcast one at a time); row kk of B starts at b + (b_off ? b_off[kk] : kk * b_rs) and
// its n elements are contiguous; C rows are contiguous with stride c_rs (floats).
struct GemmTile {
  const float* a = nullptr;
  int64_t a_rs = 0, a_cs = 1;
  const float* b = nullptr;
  const int64_t* b_off = nullptr;
  int64_t b_rs = 0;
  float* c = nullptr;
  int64_t c_rs = 0;
  int64_t m = 0, n = 0, k = 0;
};

// One attention head: queries [tq, d] (row stride q_rs floats), keys/values [tk, d] (row
// strides in elements of kv_dtype, F32 or F16), output [tq, d]. Query row i sees keys
// j < tk, and, when causal, j <= q_offset + i. mask (optional) adds mask[i * mask_rs + j].
// A query that sees no key (or only -inf scores) gets a zero output row.
struct AttnHead {
  const float* q = nullptr;
  int64_t q_rs = 0;
  const void* k = nullptr;
  int64_t k_rs = 0;
  const void* v = nullptr;
  int64_t v_rs = 0;
  DType kv_dtype = DType::F32;
  float* o = nullptr;
  int64_t o_rs = 0;
  const float* mask = nullptr;
  int64_t mask_rs = 0;
  int64_t tq = 0, tk = 0, d = 0;
  float scale = 1.f;
  bool causal = false;
  int64_t q_offset = 0;
  // Optional copy of K transposed to F32 [d, kt_rs], kt_rs a multiple of kAttnKeyTile
  // >= tk, zero past tk. SIMD kernels use it for several queries at once (scores become
  // broadcast-FMAs instead of horizontal sums); the generic kernel ignores it.
  const float* kt = nullptr;
  int64_t kt_rs = 0;
  // Optional second key/value segment (one query only, no kt): keys j < split are rows j of
  // k / v, keys j >= split rows j - split of k2 / v2 (row strides k2_rs / v2_rs). A batched
  // decode keeps a shared voice prefix in one buffer and each sequence's own keys in another;
  // the result has the bits of one segment holding both (same tiles, same order).
  const void* k2 = nullptr;
  int64_t k2_rs = 0;
  const void* v2 = nullptr;
  int64_t v2_rs = 0;
  int64_t split = 0;
};
constexpr int64_t kAttnKeyTile = 64;
constexpr int64_t kAttnQueryBlock = 4;
// Floats of scratch attn needs (per calling thread).
constexpr int64_t attn_scratch_floats(int64_t d) { return kAttnQueryBlock * (kAttnKeyTile + 2 * d + 4) + 64; }
// attn_multi works on groups of up to this many queries (per-query scores, accumulators
// and scaled queries in scratch; more would not fit the registers of one key row's FMAs).
constexpr int kAttnMultiGroup = 4;
// Floats of scratch attn_multi needs (per calling thread).
constexpr int64_t attn_multi_scratch_floats(int64_t d) { return kAttnMultiGroup * (kAttnKeyTile + 2 * d) + 64; }

struct NnKernels {
  Isa isa;
  void (*unary)(Unary op, const float* x, float* y, int64_t n, float p0, float p1);
  // y = a (op) b, all n long; or b broadcast as one scalar when b_scalar.
  void (*binary)(Binary op, const float* a, const float* b, float* y, int64_t n, bool b_scalar);
  // Snake: y = x + sin^2(alpha x) / (alpha + 1e-9), one alpha for the row.
  void (*snake)(const float* x, float* y, int64_t n, float alpha);
  // (x - mean) / sqrt(var + eps) * w + b over n; w and/or b may be null (1 / 0).
  void (*layer_norm)(const float* x, float* y, int64_t n, const float* w, const float* b, float eps);
  // x / sqrt(mean(x^2) + eps) * w; w may be null.
  void (*rms_norm)(const float* x, float* y, int64_t n, const float* w, float eps);
  void (*softmax)(const float* x, float* y, int64_t n);  // y may alias x
  // NeoX rotate-half on one row of 2*half: (x_i, x_{i+half}) rotated by angle i.
  void (*rope)(const float* x, float* y, int64_t half, const float* cos, const float* sin);
  void (*gemm)(const GemmTile& t);
  // Rows [q0, q1) of one head; scratch holds attn_scratch_floats(d) floats.
  void (*attn)(const AttnHead& h, int64_t q0, int64_t q1, float* scratch);
  // nq single queries of one head (row 0 of each h[r]: its q, o, q_offset, causal, tk, scale
  // and second segment k2 / v2 / k2_rs / v2_rs) that share the first segment: the same k,
  // v, k_rs, v_rs, split, kv_dtype and d, no mask, no kt. Query r's output has the bits
  // attn(h[r], 0, 1) gives; the shared rows are loaded (and widened) once for the group.
  // scratch holds attn_multi_scratch_floats(d) floats.
  void (*attn_multi)(const AttnHead* h, int nq, float* scratch);
  // PyTorch LSTM step from the gate pre-activations g [4H] (i, f, g, o):
  // c = sig(f) c + sig(i) tanh(g); h = sig(o) tanh(c).
  void (*lstm_gates)(const float* g, float* h, float* c, int64_t hidden);
  float (*dot)(const float* a, const float* b, int64_t n);
  // y = x rounded to f16 (to nearest even), the bits of core f32_to_f16 for every non-NaN
  // value (a NaN stays a NaN, its payload may differ).
  void (*to_f16)(const float* x, uint16_t* y, int64_t n);
  // One head's keys k [tk, d] (F32 or F16, rows k_rs elements apart) -> kt [d, kt_rs] F32,
  // the AttnHead::kt copy: kt[c * kt_rs + j] = k[j * k_rs + c], zero for j in [tk, kt_rs).
  // Dims [c0, c1) only (callers split the rows). Exact (f16 -> f32 widening is lossless).
  void (*kv_transpose)(const void* k, DType dt, int64_t k_rs, int64_t tk, int64_t c0, int64_t c1, float* kt,
                       int64_t kt_rs);
};

const NnKernels& nn_kernels(Isa isa);
const NnKernels& nn_kernels_generic();
const NnKernels& nn_kernels_avx2();
const NnKernels& nn_kernels_avx512();

}  // namespace cbx
