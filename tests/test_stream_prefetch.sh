#!/usr/bin/env bash
# The decode's streaming dot kernels prefetch into L1 or L2 (core/cpu.h stream_prefetch_level:
# L1 on AMD family 1Ah and later, L2 elsewhere; CBX_DEBUG_STREAM_PREFETCH=l1|l2 forces one).
#   - `chatterbox system-info` reports a level (l1 or l2), follows the variable both ways, and fails
#     with one message naming a bad value (core/debug_env.h);
#   - the matmul and planar (q4p / q8p) kernel tests pass under both forced levels (the dot
#     kernels of each level against the generic ones; the planar test also compares the two
#     levels bit for bit).
# usage: test_stream_prefetch.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
CLI="$BUILD/bin/chatterbox"
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
default=$(env -u CBX_DEBUG_STREAM_PREFETCH "$CLI" system-info | sed -n 's/.*stream_prefetch=\([a-z0-9]*\).*/\1/p')
case "$default" in l1|l2) ;; *) echo "FAIL: system-info printed no stream_prefetch=l1|l2"; exit 1 ;; esac
for l in l1 l2; do
  got=$(CBX_DEBUG_STREAM_PREFETCH=$l "$CLI" system-info | sed -n 's/.*stream_prefetch=\([a-z0-9]*\).*/\1/p')
  [ "$got" = "$l" ] || { echo "FAIL: CBX_DEBUG_STREAM_PREFETCH=$l gave stream_prefetch=$got"; exit 1; }
done
# A bad value is one error (core/debug_env.h), not a silent fallback.
if err=$(CBX_DEBUG_STREAM_PREFETCH=l3 "$CLI" system-info 2>&1 >/dev/null); then
  echo "FAIL: CBX_DEBUG_STREAM_PREFETCH=l3 was accepted"; exit 1
fi
want="chatterbox system-info: error: environment variable CBX_DEBUG_STREAM_PREFETCH=l3 is not one of l1, l2"
want+=" (a debugging switch; unset it for the default)"
[ "$err" = "$want" ] || { echo "FAIL: message for CBX_DEBUG_STREAM_PREFETCH=l3: $err"; exit 1; }
for t in test_kernels_matmul test_kernels_planar; do
  [ -x "$BUILD/bin/$t" ] || { echo "FAIL: $BUILD/bin/$t not built"; exit 1; }
  for l in l1 l2; do
    echo "== CBX_DEBUG_STREAM_PREFETCH=$l $t"
    CBX_DEBUG_STREAM_PREFETCH=$l "$BUILD/bin/$t" --gtest_brief=1
  done
done
echo "PASS"
