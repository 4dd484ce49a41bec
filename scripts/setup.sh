#!/usr/bin/env bash
# Installs the Debian packages chatterbox.cpp needs. Idempotent: packages already present are
# left alone. Run as root (or with sudo).
#   bash scripts/setup.sh                 everything: build, run, test, benchmark, fuzz (CI)
#   bash scripts/setup.sh --runtime-only  only what building and running `chatterbox` needs;
#                                         configure with -DCBX_TESTS=OFF (no GoogleTest then)
#   bash scripts/setup.sh --cross-aarch64 the aarch64 cross build and qemu-user for
#                                         scripts/cross_aarch64.sh (adds dpkg's arm64 architecture)
set -euo pipefail

# Building and running the library, `chatterbox`, `chatterbox-bench` and `chatterbox-mkckpt`.
RUNTIME_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  git                                      # the commit in `chatterbox --version` ("unknown" without)
  nlohmann-json3-dev libicu-dev libcpp-httplib-dev   # libcpp-httplib: `chatterbox serve`
  libsndfile1-dev libsoxr-dev libfftw3-dev librubberband-dev
  libkakasi2-dev kakasi-dic                # Japanese kanji readings (loaded at run time; without: pass-through)
)
# Tests, parity references, benchmarks' comparisons and fuzzing only.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev                # CBX_TESTS=ON (the default)
  clang libclang-rt-14-dev                 # libFuzzer targets and sanitizers
  clang-format                             # tests/test_format.sh (scripts/check_format.sh)
  libopenblas-dev                          # only the kernels benchmark compares against it
  python3-torch python3-numpy              # PyTorch references in parity tests (/usr/bin/python3)
  python3-regex                            # Unicode classes in the MTL tokenizer reference (tests/mtl_tokenizer_reference.py)
  espeak-ng sox                            # test speech and audio checks
  kakasi                                   # the Japanese tests' reference (kakasi -JH)
  chromium                                 # tests/test_server_webui.sh: the server's web page, headless
)

# scripts/cross_aarch64.sh: Debian's cross compiler, qemu-user to run the tests, and the arm64
# (multiarch, co-installed with the amd64 ones) -dev packages of the libraries the cross-built
# library and tests link. nlohmann-json3-dev is architecture-independent (RUNTIME_PACKAGES).
CROSS_AARCH64_PACKAGES=(
  g++-aarch64-linux-gnu qemu-user
  libc6:arm64 libstdc++6:arm64             # the runtime qemu-aarch64 loads (cmake/aarch64-linux-gnu.cmake)
  libicu-dev:arm64 libsndfile1-dev:arm64 libsoxr-dev:arm64 libfftw3-dev:arm64 librubberband-dev:arm64
  libgtest-dev:arm64
)

# tests/test_server_openai.sh drives `chatterbox serve` with the openai npm package: node and npm.
# A Node.js from elsewhere (e.g. NodeSource) brings its own npm, which Debian's npm conflicts with.
command -v npm > /dev/null 2>&1 || TEST_PACKAGES+=(nodejs npm)

case "${1:-}" in
  "") PACKAGES=("${RUNTIME_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --runtime-only) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
  --cross-aarch64) PACKAGES=("${CROSS_AARCH64_PACKAGES[@]}") ;;
  -h|--help)
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  *) echo "setup: unknown option '$1' (--runtime-only, --cross-aarch64 or none)" >&2; exit 2 ;;
esac
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ "${1:-}" = --cross-aarch64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup: adding the arm64 architecture (dpkg --add-architecture arm64)"
  $SUDO dpkg --add-architecture arm64
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
