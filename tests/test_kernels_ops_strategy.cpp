// The kernel decisions the ops layer makes for the models (models state what they compute, the
// ops pick how), checked against their rules with the active ISA (CBX_DEBUG_FORCE_ISA, one ctest
// entry per ISA; tests/test_kernels_no_amx.sh runs it again without AMX):
//   - row_prefill_max_rows: row kernels for prefills of 2 .. N rows only when every layer
//     matrix is Q8_0 / Q4_0 / Q4_K; N = the caller's limit, else 64 unless the bf16 GEMM runs on
//     AMX tiles (then 0: the GEMM); capped at the caller's row count;
//   - RowLinearOptions: the re-laid-out copy exists exactly where the active ISA has a planar /
//     q4kp kernel and repack is on, and is what the explicit-ISA constructor makes;
//   - attention_kernel: the fused bf16 attention only at the BF16 precision where a bf16 GEMM
//     runs on AVX-512 (AMX or vdpbf16ps) and for a supported head dim; the in-kernel relative
//     position term only on the vdpbf16ps kernel;
//   - resolve_packed_precision: Auto with lossy weights picks Int8 only where the VNNI int8
//     GEMM runs and no GemmPrecisionScope is held.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/matvec_q4k.h"
#include "kernels/matvec_q4p.h"
#include "ops/attention_bf16.h"
#include "ops/matmul.h"
#include "ops/row_linear.h"

using namespace cbx;

namespace {

// A [m, k] weight of type t with zeroed storage (only its type, shape and layout matter here).
struct Weight {
  std::vector<uint8_t> bytes;
  Tensor t;
  Weight(DType type, int64_t m, int64_t k) : bytes(size_t(m) * dtype_row_bytes(type, k)) {
    t = make_tensor(type, {m, k}, bytes.data(), bytes.size());
  }
};

bool amx_gemm() { return std::strcmp(gemm_bf16_kind(), "amx") == 0; }

TEST(RowPrefillStrategy, QuantizedWeightsTakeTheRowKernels) {
  for (DType q : {DType::Q4_0, DType::Q8_0, DType::Q4_K}) {
    Weight a(q, 8, 256), b(DType::Q4_0, 16, 256);
    const std::vector<const Tensor*> ws{&a.t, &b.t};
    EXPECT_EQ(row_prefill_max_rows(ws, -1, 1000, /*amx_gemm=*/false), kRowPrefillAutoRows) << dtype_name(q);
    EXPECT_EQ(row_prefill_max_rows(ws, -1, 1000, /*amx_gemm=*/true), 0) << dtype_name(q);
    // The caller's limit wins over the automatic one, AMX or not; 0 and 1 mean the GEMM.
    for (bool amx : {false, true}) {
      EXPECT_EQ(row_prefill_max_rows(ws, 100, 1000, amx), 100);
      EXPECT_EQ(row_prefill_max_rows(ws, 1, 1000, amx), 0);
      EXPECT_EQ(row_prefill_max_rows(ws, 0, 1000, amx), 0);
    }
    // Capped at the rows a call can have.
    EXPECT_EQ(row_prefill_max_rows(ws, -1, 20, false), 20);
    EXPECT_EQ(row_prefill_max_rows(ws, 100, 50, true), 50);
  }
}

TEST(RowPrefillStrategy, AnyFloatWeightKeepsTheGemm) {
  for (DType f : {DType::F32, DType::F16, DType::BF16}) {
    Weight a(DType::Q8_0, 8, 256), b(f, 16, 256);
    const std::vector<const Tensor*> ws{&a.t, &b.t};
    for (bool amx : {false, true}) {
      EXPECT_EQ(row_prefill_max_rows(ws, -1, 1000, amx), 0) << dtype_name(f);
      EXPECT_EQ(row_prefill_max_rows(ws, 100, 1000, amx), 0) << dtype_name(f);
    }
  }
}

TEST(RowPrefillStrategy, AutomaticChoiceFollowsTheBf16GemmOfThisCpu) {
  Weight a(DType::Q4_0, 8, 256);
  const std::vector<const Tensor*> ws{&a.t};
  EXPECT_EQ(row_prefill_max_rows(ws, -1, 1000), amx_gemm() ? 0 : kRowPrefillAutoRows) << gemm_bf16_kind();
  EXPECT_EQ(row_prefill_max_rows(ws, 7, 1000), 7);
  // AMX tiles only on the AVX-512 ISA, never with CBX_DEBUG_NO_AMX=1.
  if (active_isa() != Isa::Avx512) {
    EXPECT_FALSE(amx_gemm());
  }
  const char* no_amx = std::getenv("CBX_DEBUG_NO_AMX");
  if (no_amx && std::strcmp(no_amx, "1") == 0) {
    EXPECT_FALSE(amx_gemm());
    EXPECT_EQ(row_prefill_max_rows(ws, -1, 1000), kRowPrefillAutoRows);
  }
}

TEST(RowLinearOptions, RepackFollowsTheActiveIsa) {
  const Isa isa = active_isa();
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F32, DType::F16}) {
    Weight w(t, 6, 512);
    size_t want = 0;
    if (t == DType::Q4_K)
      want = q4kp_dot(isa) && q4kp_shape_ok(512) ? 6 * q4kp_row_bytes(512) : 0;
    else if (planar_dot(t, isa))
      want = planar_matrix_bytes(t, 6, 512);
    EXPECT_EQ(RowLinear::pack_bytes(w.t, RowLinearOptions{true}), want) << dtype_name(t);
    EXPECT_EQ(RowLinear::pack_bytes(w.t, RowLinearOptions{false}), 0u) << dtype_name(t);
    for (bool repack : {true, false}) {
      const RowLinear by_options(w.t, Tensor{}, "test", RowLinearOptions{repack}, nullptr);
      const RowLinear by_isa(w.t, Tensor{}, "test", isa, repack);
      EXPECT_EQ(by_options.packed_bytes(), repack ? want : 0u) << dtype_name(t);
      EXPECT_EQ(by_options.act_bytes(), by_isa.act_bytes()) << dtype_name(t);
      EXPECT_TRUE(by_options.same_act(by_isa)) << dtype_name(t);
    }
  }
  // Quantized weights are re-laid out on AVX-512 (its planar kernels exist for both).
  if (isa == Isa::Avx512) {
    Weight w(DType::Q4_0, 6, 512);
    EXPECT_GT(RowLinear::pack_bytes(w.t, RowLinearOptions{}), 0u);
  }
}

TEST(AttentionStrategy, Bf16KernelOnlyWhereTheBf16GemmRunsOnAvx512) {
  const char* kind = gemm_bf16_kind();
  const bool fused = active_isa() == Isa::Avx512 && std::strcmp(kind, "none") != 0;
  const bool relpos = fused && std::strcmp(kind, "vdpbf16ps") == 0;
  for (int64_t D : {32, 64, 128}) {
    EXPECT_EQ(attention_kernel(GemmPrecision::F32, D), AttentionKernel::F32);
    EXPECT_EQ(attention_kernel(GemmPrecision::F32, D, true), AttentionKernel::F32);
    EXPECT_EQ(attention_kernel(GemmPrecision::Int8, D), AttentionKernel::F32);
    EXPECT_EQ(attention_kernel(GemmPrecision::BF16, D), fused ? AttentionKernel::Bf16 : AttentionKernel::F32)
        << "D " << D << ", bf16 GEMM " << kind;
    const AttentionKernel with_relpos = relpos  ? AttentionKernel::Bf16Relpos
                                        : fused ? AttentionKernel::Bf16
                                                : AttentionKernel::F32;
    EXPECT_EQ(attention_kernel(GemmPrecision::BF16, D, true), with_relpos) << "D " << D << ", bf16 GEMM " << kind;
  }
  // Head dims the kernel does not take stay f32.
  for (int64_t D : {16, 48, 80, 256})
    EXPECT_EQ(attention_kernel(GemmPrecision::BF16, D, true), AttentionKernel::F32) << "D " << D;
  EXPECT_STREQ(attention_kernel_name(AttentionKernel::Bf16Relpos), "bf16_relpos");
}

TEST(PackedPrecision, Int8OnlyForAutoLossyWeightsWithVnni) {
  EXPECT_EQ(resolve_packed_precision(GemmPrecision::Auto, true, true), GemmPrecision::Int8);
  EXPECT_EQ(resolve_packed_precision(GemmPrecision::Auto, true, false), GemmPrecision::BF16);
  EXPECT_EQ(resolve_packed_precision(GemmPrecision::Auto, false, true), GemmPrecision::F32);
  for (GemmPrecision p : {GemmPrecision::F32, GemmPrecision::BF16, GemmPrecision::Int8})
    for (bool vnni : {false, true}) EXPECT_EQ(resolve_packed_precision(p, true, vnni), p);
  {
    // A thread's precision scope turns the int8 default off.
    GemmPrecisionScope scope(GemmPrecision::F32);
    EXPECT_EQ(resolve_packed_precision(GemmPrecision::Auto, true, true), GemmPrecision::BF16);
  }
  const bool vnni = std::strcmp(gemm_int8_kind(), "vpdpbusd") == 0;
  EXPECT_EQ(resolve_packed_precision(GemmPrecision::Auto, true), vnni ? GemmPrecision::Int8 : GemmPrecision::BF16);
}

}  // namespace
