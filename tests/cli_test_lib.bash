# Helpers the CLI script tests share (sourced; not a test itself: ctest runs tests/*.sh).
#   cli_test_init BUILD_DIR NAME   sets B (chatterbox), MK (chatterbox-mkckpt) and T (a temporary
#                                  directory removed on exit); exits 77 (skip) when not built
#   fail MSG...                    prints FAIL: MSG and exits 1
#   expect_error NEEDLE... -- CMD  CMD must fail and its stderr must hold every NEEDLE
#   wav_samples FILE               samples of a 16-bit mono WAV written by chatterbox say
#   parity_test_init BUILD_DIR NAME  for scripts checked against a torch reference: sets SRC (the
#                                  source tree, or $CBX_SOURCE_DIR), PY (/usr/bin/python3), CLI
#                                  (chatterbox), MK (chatterbox-mkckpt) and TMP (a temporary
#                                  directory removed on exit); exits 77 (skip) when PY cannot import
#                                  torch and numpy or the binaries are not built
#   tiny_gguf VARIANT SEED CKPT GGUF  mkckpt --size tiny into CKPT, converted to an f32 GGUF
#   bench_test_init BUILD_DIR      sets BENCH (chatterbox-bench); exits 77 (skip) when not built
#   field NAME LINE                the value of NAME= in a bench's key=value LINE (fails when absent)
#   positive NAME LINE             NAME= in LINE holds a finite number > 0 (fails otherwise)

cli_test_init() {
  B=$1/bin/chatterbox
  MK=$1/bin/chatterbox-mkckpt
  if [ ! -x "$B" ] || [ ! -x "$MK" ]; then
    echo "skip: $B or $MK not built"
    exit 77
  fi
  T=$(mktemp -d "/tmp/cbx-$2-XXXXXX")
  trap 'rm -rf "$T"' EXIT
}

fail() {
  echo "FAIL: $*"
  exit 1
}

expect_error() {
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  if "$@" > "$T/out.txt" 2> "$T/err.txt"; then fail "accepted: $*"; fi
  local n
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$T/err.txt" || { cat "$T/err.txt"; fail "'$n' not in the error of: $*"; }
  done
}

wav_samples() { echo $(( ($(stat -c %s "$1") - 44) / 2 )); }

parity_test_init() {
  SRC=${CBX_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  PY=/usr/bin/python3
  if ! "$PY" -c "import torch, numpy" 2> /dev/null; then
    echo "skip: $PY cannot import torch and numpy"
    exit 77
  fi
  cli_test_init "$1" "$2"
  CLI=$B
  TMP=$T
}

tiny_gguf() {
  "$MK" --variant "$1" --size tiny --seed "$2" "$3" > /dev/null 2>&1 || fail "mkckpt $1 --seed $2"
  "$CLI" convert "$3" -o "$4" --type f32 --quiet > /dev/null || fail "convert $3"
}

field() {
  local v
  v=$(printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1)
  [ -n "$v" ] || fail "no $1= in: $2"
  echo "$v"
}

positive() {
  local v
  v=$(field "$1" "$2") || exit 1
  awk -v x="$v" 'BEGIN { exit !(x == x + 0 && x > 0 && x < 1e300) }' || fail "$1=$v is not a finite positive number"
}

bench_test_init() {
  BENCH=$1/bin/chatterbox-bench
  [ -x "$BENCH" ] || { echo "skip: $BENCH not built"; exit 77; }
}
