#!/bin/bash
# chatterbox-bench serve, throughput mode (issue 24's figures): against a tiny Turbo model on a free
# loopback port, concurrency 1 and 4, one round each (plus the warm-up round), 5 speech tokens a
# request. Checks the lines the docs quote are there and well formed: one per concurrency with
# positive rates, every request served, a stream-read figure; the batched engine's per-request
# stage times; the 4-vs-1 ratios; the server's exit status 0. No timing is asserted.
# Usage: test_bench_serve.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_bench_serve.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-bench-serve
bench_test_init "$BUILD"

CLI=$B
tiny_gguf turbo 1 "$T/ckpt" "$T/m.gguf"

expect_error "--sample-mb must be an integer in [1, 65536], got '0'" -- "$BENCH" serve -m "$T/m.gguf" --sample-mb 0

out=$("$BENCH" serve -m "$T/m.gguf" --concurrency 1,4 --rounds 1 --tokens 5 --max-batch 4 --threads 2 \
  --sample-mb 8 --request-timeout 120 2>&1) || { echo "$out"; fail "bench serve"; }
echo "$out"
for c in 1 4; do
  line=$(printf '%s\n' "$out" | grep "^concurrency=$c ") || fail "no concurrency=$c line"
  for f in audio_s_per_s t3_tok_s_total ttfa_p50_ms ttfa_p95_ms peak_rss_mb stream_gbps wall_s; do positive "$f" "$line"; done
  [ "$(field requests "$line")" = "$c" ] || fail "requests is not $c: $line"
  [ "$(field failures "$line")" = 0 ] || fail "failed requests: $line"
  eline=$(printf '%s\n' "$out" | grep "^# engine_s_per_request concurrency=$c ") || fail "no engine line for $c"
  for f in decode wall_per_request; do positive "$f" "$eline"; done
done
ratio=$(printf '%s\n' "$out" | grep '^ratio_tok_s_4_vs_1=') || fail "no ratio line"
for f in ratio_tok_s_4_vs_1 ratio_audio_4_vs_1; do positive "$f" "$ratio"; done
printf '%s\n' "$out" | grep -q '^# server exit status 0$' || fail "the server did not exit 0"
echo "ok"
