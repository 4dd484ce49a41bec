# Helpers the CLI script tests share (sourced; not a test itself: ctest runs tests/*.sh).
#   cli_test_init BUILD_DIR NAME   sets B (chatterbox), MK (chatterbox-mkckpt) and T (a temporary
#                                  directory removed on exit); exits 77 (skip) when not built
#   fail MSG...                    prints FAIL: MSG and exits 1
#   expect_error NEEDLE... -- CMD  CMD must fail and its stderr must hold every NEEDLE
#   wav_samples FILE               samples of a 16-bit mono WAV written by chatterbox say

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
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$T/err.txt" || { cat "$T/err.txt"; fail "'$n' not in the error of: $*"; }
  done
}

wav_samples() { echo $(( ($(stat -c %s "$1") - 44) / 2 )); }
