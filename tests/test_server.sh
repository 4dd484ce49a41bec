#!/bin/bash
# `chatterbox serve` end to end (issue 24): tests/server_test.py against a tiny Turbo model (and a
# tiny Multilingual one) on a free loopback port. Usage: test_server.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_server.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-server
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "skip: no $PY"; exit 77; }

"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
"$MK" --variant mtl --size tiny --seed 1 --threads 1 "$T/mck" > /dev/null 2>&1 || fail "mkckpt mtl"
"$B" convert "$T/mck" -o "$T/mtl.gguf" --type f32 --quiet > /dev/null || fail "convert mtl"
espeak-ng -w "$T/ref.wav" "The quick brown fox jumps over the lazy dog, and then it runs far away. It stops by the river, drinks some water and sleeps in the warm sun." 2> /dev/null ||
  sox -n -r 22050 -c 1 "$T/ref.wav" synth 8 sine 220 vol 0.5 || fail "no reference audio"
sox -n -r 24000 -c 1 -b 16 "$T/short.wav" synth 1 sine 300 vol 0.5 || fail "no short audio"
"$PY" "$(dirname "$0")/server_test.py" "$B" "$T/m.gguf" "$T/mtl.gguf" "$T/ref.wav" "$T/short.wav" "$T" || fail "server test"
