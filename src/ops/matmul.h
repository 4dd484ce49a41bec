// Matrix multiply front-ends: validate shapes and dtypes, then run the kernels of
// kernels/matmul.h for active_isa() on the pool.
//
//   matmul:      y: [N, M] = x: [N, K] . w: [M, K]^T      (PyTorch Linear, no bias)
//   matmul_bias: the same plus bias: [M] on every row
//   gemm_f32:    c: [N, M] = a: [N, K] . b: [M, K]^T      (activations x activations, all f32)
//
// w: F32, F16, BF16, Q8_0, Q4_0 or Q4_K, 2-D, rows may be strided. x: F32, [K] or [N, K] (more
// leading dims are allowed when they collapse to one row stride), rows may be strided,
// innermost contiguous. y: F32, same leading dims as x with M columns, rows may be strided.
// Quantized weights need K a multiple of their block size (32; Q4_K: 256).
//
// Numerics: N < matmul_gemm_min_rows() takes the dot path: Q8_0/Q4_0 weights are dotted
// with x quantized to 8 bits per 32-block (integer dots); BF16 weights on AVX-512 with x
// rounded to BF16. Otherwise the GEMM path widens the weights to f32 (BF16 on AVX-512
// keeps bf16 weights and rounds x to BF16) and accumulates in f32.
//
// Scratch (converted activations, packed panels) comes from `scratch` when given (its
// mark is restored on return), otherwise from a grow-only buffer owned by the calling
// thread: no allocation once the largest shape has been seen.
//
// GEMM precision (GEMM path only; the dot path is unaffected):
//   F32   exact: the weights are widened to f32 and every product is an f32 FMA. The F32
//         parity tests run this way.
//   BF16  x and the weights are rounded to bf16 (round to nearest even, relative error
//         <= 2^-9 per element) in the packed panels; products are accumulated in f32, on
//         AMX tiles (~3x the f32 GEMM) or, on AMD Zen 4 and later, vdpbf16ps (~2x).
//         Every weight type is dequantized while packing. It runs only where such a kernel
//         exists (kernels/matmul.h, matmul_bf16_gemm_avx512; the debugging switches
//         CBX_DEBUG_NO_AMX, CBX_DEBUG_VDPBF16 of core/debug_env.h);
//         on other CPUs and ISAs a BF16 request runs the F32 GEMM.
//   BF16 weights keep their bf16 GEMM on AVX-512 in either precision (x rounded to bf16).
// The precision of one call is, in order: the calling thread's GemmPrecisionScope (when
// active and not Auto); else BF16 when the weight is lossy already (F16, BF16, Q8_0, Q4_0)
// and F32 for F32 weights. Convolutions (ops/conv.h, f32 weights) follow the scope only, so
// models resolve their precision once from their matmul weights and the user's choice
// (resolve_gemm_precision; cbx_model_params.gemm_precision, `--gemm-precision`) and hold a
// scope while they run; gemm_f32 (activations x activations, attention) runs in F32 unless
// its caller passes a precision (scopes do not reach it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/huge_buffer.h"
#include "core/tensor.h"

namespace cbx {

class Arena;
class ThreadPool;
struct MatmulKernels;

// Int8: only pre-packed weights (PackedWeight below) honour it: weights quantized per output
// channel, activations per row, exact int32 sums (kernels/matmul_int8.h). Every other GEMM
// (matmul, convolutions, a PackedWeight call with fewer than matmul_gemm_min_rows() rows) runs an
// Int8 request as BF16.
enum class GemmPrecision : int { Auto = 0, F32 = 1, BF16 = 2, Int8 = 3 };
const char* gemm_precision_name(GemmPrecision p);  // "auto", "f32", "bf16", "int8"
// "auto", "f32", "bf16" or "int8"; anything else throws an Error naming `what` and the value.
GemmPrecision parse_gemm_precision(const char* s, const char* what);
// requested unless Auto; else BF16 for lossy weights, F32 otherwise.
GemmPrecision resolve_gemm_precision(GemmPrecision requested, bool lossy_weights);
// Whether weights of type t already lost precision (anything but F32).
bool gemm_weight_is_lossy(DType t);
// The calling thread's precision while alive (scopes nest; Auto defers to the rules above).
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(GemmPrecision p);
  ~GemmPrecisionScope();
  GemmPrecisionScope(const GemmPrecisionScope&) = delete;
  GemmPrecisionScope& operator=(const GemmPrecisionScope&) = delete;

 private:
  GemmPrecision prev_;
};
GemmPrecision gemm_precision_scope();  // the calling thread's scope value (Auto when none)
// Precision a GEMM with f32 weights and no scope-free rule gets: the scope, else F32 (what
// convolutions use).
GemmPrecision gemm_precision_for_f32_weights();
// Whether a BF16 request runs the bf16 GEMM with the active ISA (else it runs in F32).
bool gemm_bf16_available();
// Which bf16 GEMM that is: "amx", "vdpbf16ps" or "none".
const char* gemm_bf16_kind();
// Which int8 GEMM an Int8 PackedWeight runs with the active ISA: "vpdpbusd" (AVX-512 VNNI, about
// twice the bf16 GEMM's products per instruction) or "generic" (scalar: correct but far slower
// than BF16; callers should offer Int8 only where this is "vpdpbusd").
const char* gemm_int8_kind();
// The precision of pre-packed linears (PackedWeight) for a requested one: resolve_gemm_precision,
// except that Auto with lossy weights and no GemmPrecisionScope on the calling thread picks Int8
// where gemm_int8_kind() is "vpdpbusd" (mel within ~36-38 dB of the f32 path on the full-size
// CFM, docs/quantization.md). The int8 choice is an ISA decision, so it is made here.
GemmPrecision resolve_packed_precision(GemmPrecision requested, bool lossy_weights);
// The rule with the int8 kernel's availability given (for tests).
GemmPrecision resolve_packed_precision(GemmPrecision requested, bool lossy_weights, bool vnni_int8);

void matmul(ThreadPool& pool, const Tensor& w, const Tensor& x, Tensor& y, Arena* scratch = nullptr);
void matmul_bias(ThreadPool& pool, const Tensor& w, const Tensor& bias, const Tensor& x, Tensor& y,
                 Arena* scratch = nullptr);
void gemm_f32(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& c, Arena* scratch = nullptr,
              GemmPrecision prec = GemmPrecision::F32);

// The same as matmul/matmul_bias (bias may be nullptr) with an explicit kernel table:
// tests compare the active ISA with matmul_kernels(Isa::Generic).
void matmul_with(const MatmulKernels& kernels, ThreadPool& pool, const Tensor& w, const Tensor* bias, const Tensor& x,
                 Tensor& y, Arena* scratch = nullptr);

// The same with an explicit precision (Auto = the rules above), for tests and benches.
void matmul_with_precision(const MatmulKernels& kernels, GemmPrecision prec, ThreadPool& pool, const Tensor& w,
                           const Tensor* bias, const Tensor& x, Tensor& y, Arena* scratch = nullptr);

// C[m, n] = bias[m] + sum_k A[m, k] B[k, n] on the BF16 GEMM (convolutions in bf16). A: f32
// rows a_rs floats apart, k contiguous; row kk of B starts at b + (b_off ? b_off[kk] :
// kk * b_rs) floats with its n columns contiguous; C rows c_rs floats apart; bias may be
// null. Returns false and does nothing when gemm_bf16_available() is false.
struct KMajorGemm {
  const float* a = nullptr;
  int64_t a_rs = 0;
  const float* b = nullptr;
  const int64_t* b_off = nullptr;
  int64_t b_rs = 0;
  float* c = nullptr;
  int64_t c_rs = 0;
  const float* bias = nullptr;
  int64_t m = 0, n = 0, k = 0;
};
bool gemm_bf16_kmajor(ThreadPool& pool, const KMajorGemm& g, Arena* scratch = nullptr);
// The scratch bytes gemm_bf16_kmajor takes from its arena, exactly (one 64-byte aligned
// block; 0 where it is unavailable). n_threads: the pool's size.
size_t gemm_bf16_kmajor_scratch_bytes(int64_t m, int64_t k, int n_threads);

// ---- Pre-packed weights and fused epilogues (repeated GEMMs of one model) ----
//
// A PackedWeight is one or more [M_i, K] weight parts stacked along M (to_q | to_k | to_v as
// one [3 inner, K] weight: the activations are packed once for all three). The parts are
// referenced, not copied (they must outlive it). When the weights' GEMM precision resolves to
// BF16 and the bf16 GEMM exists, pack_weight also converts them once into that GEMM's weight
// panels: [ceil(M / mr)][kp][mr] bf16 pairs (kp = K rounded up to 32), M * kp * 2 bytes, made
// by the same packer the per-call path runs, so the products are bit for bit the same.
//
// matmul_packed: y = act(LN(x) . w^T + bias) + residual, where LN (optional) is a LayerNorm
// of each x row over K, bias [M] and residual (shaped like y, may alias it) are optional, and
// act is none, exact GELU or SiLU. With panels, N >= matmul_gemm_min_rows() and the call's
// precision BF16 (the thread's scope, else BF16 for lossy weights, as matmul), each
// thread normalizes and packs 32 activation rows once for all of K and applies the epilogue
// to each 32 x 32 output tile while it is in L1: one pass over x and y, one pool dispatch.
// Any other call runs layer_norm into scratch, matmul per part, then the epilogue as separate
// passes. x must not overlap y. Either way the result equals layer_norm + matmul_bias + gelu + add (same ISA and
// precision) bit for bit.
enum class MatmulAct : int { None = 0, Gelu = 1, Silu = 2 };  // exact GELU; x sigmoid(x)
struct MatmulEpilogue {
  const Tensor* bias = nullptr;      // F32 [M], contiguous
  MatmulAct act = MatmulAct::None;   // applied after the bias
  const Tensor* residual = nullptr;  // F32, y's shape; added last; may be y itself
  // Prologue: x rows layer-normed first when ln_w is set (ln_w, ln_b: F32 [K], contiguous).
  const Tensor* ln_w = nullptr;
  const Tensor* ln_b = nullptr;
  float ln_eps = 1e-5f;
};

class PackedWeight {
 public:
  PackedWeight() = default;
  PackedWeight(PackedWeight&&) noexcept = default;
  PackedWeight& operator=(PackedWeight&&) noexcept = default;

  bool empty() const { return parts_.empty(); }
  int64_t rows() const { return m_; }  // M, all parts
  int64_t cols() const { return k_; }  // K
  DType dtype() const { return dtype_; }
  bool has_panels() const { return panels_.data() != nullptr; }
  bool int8() const { return int8_; }                    // the panels are int8 (GemmPrecision::Int8)
  size_t panel_bytes() const { return panels_.size(); }  // 0 without panels
  const std::vector<Tensor>& parts() const { return parts_; }
  const std::vector<int64_t>& part_rows() const { return offs_; }  // first row of each part
  struct Tile {
    int64_t m0;  // first output column (row of the stacked weight)
    int mcols;   // <= mr (a part's last tile may be short: parts are padded separately)
    size_t off;  // byte offset of its [kp][mr] panel
  };

 private:
  friend PackedWeight pack_weight_with(const MatmulKernels&, ThreadPool&, const std::vector<const Tensor*>&,
                                       GemmPrecision, const char*);
  friend struct PackedAccess;
  std::vector<Tensor> parts_;
  std::vector<int64_t> offs_;
  int64_t m_ = 0, k_ = 0;
  DType dtype_ = DType::F32;
  const MatmulKernels* kernels_ = nullptr;  // the table whose bf16 GEMM made the panels
  int64_t kp_ = 0;
  bool int8_ = false;
  std::vector<Tile> tiles_;
  HugePiece panels_;
};

// Parts: 2-D, one dtype, one K, contiguous rows. prec is resolved as a matmul call's (Auto: the
// thread's scope, else BF16 for lossy weights); panels are made when that is BF16 and the
// active ISA's bf16 GEMM exists, or when it is Int8 (K <= 65535; every ISA: the kernel of
// kernels/matmul_int8.h, and then every call with N >= matmul_gemm_min_rows() runs the int8
// GEMM whatever the thread's precision), unless CBX_DEBUG_NO_PREPACK=1 (benchmark A/B: no panels,
// so every call takes the per-call path). `what` names the weight in errors. Packing runs on the pool.
PackedWeight pack_weight(ThreadPool& pool, const std::vector<const Tensor*>& parts, GemmPrecision prec,
                         const char* what);
// The same for an explicit kernel table (tests); panels only with that table's bf16 GEMM.
PackedWeight pack_weight_with(const MatmulKernels& kernels, ThreadPool& pool, const std::vector<const Tensor*>& parts,
                              GemmPrecision prec, const char* what);

void matmul_packed(ThreadPool& pool, const PackedWeight& w, const Tensor& x, Tensor& y, const MatmulEpilogue& e = {},
                   Arena* scratch = nullptr);
// Upper bound of the scratch bytes one matmul_packed call with n rows needs.
size_t matmul_packed_scratch_bytes(const PackedWeight& w, int64_t n, int n_threads);

// Two GEMMs in a row (an MLP): hidden = e1(x . w1^T), y = e2(hidden . w2^T) (e1 without a
// residual, e2 without a LayerNorm; w2's K = w1's M). On the panel path each thread takes whole
// 32-row tiles and keeps their hidden rows in its own scratch ([32, M1] f32 and its bf16 panel):
// hidden is neither written nor read, one pool dispatch. x may be y itself (each row tile is read
// before it is written). Otherwise two matmul_packed calls through `hidden`. Same bits either way.
void matmul_mlp(ThreadPool& pool, const PackedWeight& w1, const MatmulEpilogue& e1, const PackedWeight& w2,
                const MatmulEpilogue& e2, const Tensor& x, Tensor& hidden, Tensor& y, Arena* scratch = nullptr);
size_t matmul_mlp_scratch_bytes(const PackedWeight& w1, const PackedWeight& w2, int64_t n, int n_threads);

// Activation rows from which the GEMM path is used.
int64_t matmul_gemm_min_rows();
// Upper bound of the scratch bytes one call needs (to size an Arena).
size_t matmul_scratch_bytes(DType w_type, int64_t n, int64_t m, int64_t k, int n_threads);

}  // namespace cbx
