#!/usr/bin/env bash
# Cross-builds chatterbox.cpp for aarch64 (Debian's g++-aarch64-linux-gnu, the arm64 multiarch
# -dev packages; install them with `bash scripts/setup.sh --cross-aarch64`) and runs its kernel
# and tiny-pipeline tests under qemu-user. Off x86 the build has no AVX2 / AVX-512 kernels
# (CBX_X86_KERNELS=0), so this checks that the portable code builds and that the generic
# kernels and the pipeline give the tested results on a 64-bit Arm CPU.
#   scripts/cross_aarch64.sh HOST_BUILD_DIR [CROSS_BUILD_DIR]
# HOST_BUILD_DIR: a native build holding bin/chatterbox and bin/chatterbox-mkckpt (CI's build/).
# The tiny-pipeline tests make their model with these programs (std::system); the test binary
# under qemu-aarch64 starts them as ordinary host programs, as nothing on this machine can run
# an aarch64 program outside qemu (binfmt_misc). The model file is the same on both.
#
# What runs under emulation (ctest -L: each GoogleTest binary is labelled with its name):
#   test_kernels_*      every kernel test except test_kernels_nn_torch (PyTorch references)
#   test_t3_decode      T3 decode on a tiny in-memory model: fused step vs op by op, planar
#   test_stream         the Turbo pipeline (T3, S3Gen flow, HiFT) on a tiny model: streamed
#                       mel equals the non-streamed one, schedule checks. Its other five tests
#                       take ~2-3 min each under emulation (a loaded 2-core host) and are left
#                       to the native runs (-E below).
#   test_core           tensors, arena, thread pool, CPU detection
# Not here: the script tests (tests/*.sh: CLI, Python/PyTorch parity, servers), test_package,
# and the other GoogleTest binaries (the main CI steps run all of them natively).
# Skips must be ones .ci/expected-skips allows, or .ci/expected-skips-generic (no SIMD kernels).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
host=${1:?usage: cross_aarch64.sh HOST_BUILD_DIR [CROSS_BUILD_DIR]}
build=${2:-$root/build-aarch64}
host=$(cd "$host" && pwd)
for tool in chatterbox chatterbox-mkckpt; do
  [ -x "$host/bin/$tool" ] || { echo "cross_aarch64.sh: $host/bin/$tool missing (build it natively first)" >&2; exit 2; }
done
for prog in aarch64-linux-gnu-g++ qemu-aarch64 aarch64-linux-gnu-pkg-config; do
  command -v "$prog" > /dev/null || { echo "cross_aarch64.sh: $prog missing: bash scripts/setup.sh --cross-aarch64" >&2; exit 2; }
done

tests=(test_kernels_matmul test_kernels_matmul_packed test_kernels_planar test_kernels_q4k
       test_kernels_nn_attention test_kernels_nn_conv test_kernels_nn_elementwise test_kernels_nn_lstm
       test_kernels_nn_norm test_kernels_attention_amx test_t3_decode test_stream test_core)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCBX_BUILD_TOOLS=OFF -DCBX_BUILD_BENCH=OFF -DCBX_INSTALL=OFF
cmake --build "$build" --target "${tests[@]}"
aarch64-linux-gnu-readelf -h "$build/bin/test_core" | grep -q "Machine:.*AArch64" || { echo "cross_aarch64.sh: not an aarch64 build" >&2; exit 1; }
mkdir -p "$build/bin"
ln -sf "$host/bin/chatterbox" "$host/bin/chatterbox-mkckpt" "$build/bin/"

labels=$(IFS='|'; echo "^(${tests[*]})\$")
slow='^Stream\.(LengthEqualsNonStreamedForEdgeCases|DeterministicPerSeed|JoinsAreContinuous|WindowedScheduleKeepsLengthAndStaysClose|SynthesizeStreamsAndAborts)$'
ctest --test-dir "$build" -L "$labels" -E "$slow" --output-on-failure -j2 --timeout 900 | tee "$build/ctest.log"
bash "$root/scripts/check_skips.sh" "$build/ctest.log" "$root/.ci/expected-skips-generic"
