#!/usr/bin/env bash
# The matmul, conv and attention kernel tests and the ops' kernel decisions (test_kernels_ops_strategy)
# again without AMX on the AVX-512 path, both ways the bf16 GEMM precision can go there:
#   CBX_DEBUG_NO_AMX=1 CBX_DEBUG_VDPBF16=0: no bf16 GEMM; a BF16 request must fall back to the exact f32
#     GEMM (the tests check it bit for bit), the BF16-weight GEMM uses vdpbf16ps, and the fused
#     bf16 attention must report itself unavailable and refuse to run;
#   CBX_DEBUG_NO_AMX=1 CBX_DEBUG_VDPBF16=1: the vdpbf16ps bf16 GEMM, conv and fused attention, forced on
#     (they are chosen by default on AMD only), checked against their bounds.
# The ctest entries of those binaries (one per ISA) run with what the CPU picks by default.
# Exit 77 without AVX-512 (the AVX-512 ISA requires AVX-512-BF16).
# usage: test_kernels_no_amx.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
tests="test_kernels_matmul test_kernels_matmul_packed test_kernels_nn_conv test_kernels_attention_amx test_kernels_ops_strategy"
for t in $tests; do
  [ -x "$BUILD/bin/$t" ] || { echo "SKIP: $BUILD/bin/$t not built"; exit 77; }
done
grep -qw avx512f /proc/cpuinfo 2>/dev/null || { echo "SKIP: no AVX-512"; exit 77; }
for vdp in 0 1; do
  for t in $tests; do
    echo "== CBX_DEBUG_NO_AMX=1 CBX_DEBUG_VDPBF16=$vdp $t"
    CBX_DEBUG_NO_AMX=1 CBX_DEBUG_VDPBF16=$vdp CBX_DEBUG_FORCE_ISA=avx512 "$BUILD/bin/$t" --gtest_brief=1
  done
done
echo "PASS"
