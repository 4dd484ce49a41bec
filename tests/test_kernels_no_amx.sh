#!/usr/bin/env bash
# The matmul and conv kernel tests again with AMX disabled (CBX_NO_AMX=1) on the AVX-512
# path: the BF16 GEMM precision must then fall back to the exact f32 GEMM (the tests check
# it bit for bit) and the BF16-weight GEMM must use vdpbf16ps; the fused bf16 attention must
# report itself unavailable and refuse to run (test_kernels_attention_amx). The ctest entries
# of those binaries (one per ISA) run with AMX where the CPU has it. Exit 77 without AVX-512.
# usage: test_kernels_no_amx.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
for t in test_kernels_matmul test_kernels_nn_conv test_kernels_attention_amx; do
  [ -x "$BUILD/bin/$t" ] || { echo "SKIP: $BUILD/bin/$t not built"; exit 77; }
done
grep -qw avx512f /proc/cpuinfo 2>/dev/null || { echo "SKIP: no AVX-512"; exit 77; }
for t in test_kernels_matmul test_kernels_nn_conv test_kernels_attention_amx; do
  CBX_NO_AMX=1 CBX_FORCE_ISA=avx512 "$BUILD/bin/$t" --gtest_brief=1
done
echo "PASS"
