#!/usr/bin/env bash
# Installs every Debian package chatterbox.cpp needs to build, test, benchmark and fuzz.
# Idempotent: packages already present are left alone. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev                 # libFuzzer targets and sanitizers
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libicu-dev
  libsndfile1-dev libsoxr-dev libfftw3-dev librubberband-dev zlib1g-dev
  libopenblas-dev                          # only the kernels benchmark compares against it
  python3-torch python3-numpy               # PyTorch references in parity tests (/usr/bin/python3)
  python3-regex                             # Unicode classes in the MTL tokenizer reference (tests/mtl_tokenizer_reference.py)
  espeak-ng sox                             # test speech and audio checks
  libkakasi2-dev kakasi-dic kakasi          # Japanese kanji readings (loaded at run time); kakasi: the tests' reference
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
