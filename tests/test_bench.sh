#!/bin/bash
# chatterbox-bench turbo / mtl / t3 on tiny synthetic models (and bench peak): each prints its one line with the
# fields docs/benchmarks.md quotes, the stream reference sampled between the decode steps
# (stream_samples = 1 before every --sample-every steps + 1 after the last), finite ratios; bad
# options are refused with the bench named. Figures are not checked (tests never assert on time).
# Usage: test_bench.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_bench.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-bench-sh
CLI=$B
bench_test_init "$BUILD"

tiny_gguf turbo 3 "$T/turbo" "$T/turbo.gguf"
tiny_gguf mtl 3 "$T/mtl" "$T/mtl.gguf"

# 9 forced tokens = 8 decode steps; a sample before steps 0, 3, 6 and one after the last: 4.
out=$("$BENCH" turbo -m "$T/turbo.gguf" --tokens 9 --threads 2 --sample-mb 4 --sample-every 3 --mb 8 2>&1) ||
  { echo "$out"; fail "bench turbo"; }
line=$(printf '%s\n' "$out" | grep '^bench turbo ') || { echo "$out"; fail "no bench turbo line"; }
[ "$(field stream_samples "$line")" = 4 ] || fail "bench turbo: stream_samples is not 4: $line"
for f in t3_prefill_ms t3_tok_s decode_gbps stream_gbps stream_lo_gbps stream_hi_gbps stream_after_gbps \
  decode_bw_ratio flow_ms cfm_ms s3gen_ms hift_ms rtf peak_rss_mb rtf_cold clock_ghz clock_after_ghz \
  fma_per_cycle fma_after_per_cycle; do
  positive "$f" "$line"
done
awk -v lo="$(field stream_lo_gbps "$line")" -v m="$(field stream_gbps "$line")" \
  -v hi="$(field stream_hi_gbps "$line")" 'BEGIN { exit !(lo <= m && m <= hi) }' ||
  fail "bench turbo: the sample mean is outside [lo, hi]: $line"

out=$("$BENCH" mtl -m "$T/mtl.gguf" --tokens 7 --threads 2 --sample-mb 4 --sample-every 2 --mb 8 2>&1) ||
  { echo "$out"; fail "bench mtl"; }
line=$(printf '%s\n' "$out" | grep '^bench mtl ') || { echo "$out"; fail "no bench mtl line"; }
# generate's step callback fires for steps 0..6 (the last one samples no decode after it):
# samples at steps 0, 2, 4, 6 and one after generate.
[ "$(field stream_samples "$line")" = 5 ] || fail "bench mtl: stream_samples is not 5: $line"
for f in t3_tok_s stream_gbps decode_bw_ratio cfm_ms hift_ms rtf cpu_rtf peak_rss_mb clock_ghz clock_after_ghz \
  fma_per_cycle fma_after_per_cycle; do
  positive "$f" "$line"
done

# --stream (turbo and mtl share the code): streamed against non-streamed in one run; the same
# length is checked inside (the bench fails otherwise); the fields docs/streaming.md quotes.
for v in turbo mtl; do
  out=$("$BENCH" "$v" --stream -m "$T/$v.gguf" --tokens 30 --threads 2 --reps 1 --first 10 --chunk 8 2>&1) ||
    { echo "$out"; fail "bench $v --stream"; }
  line=$(printf '%s\n' "$out" | grep "^bench $v-stream ") || { echo "$out"; fail "no bench $v-stream line"; }
  for f in ttfa_ms ttfa_cfm_ms rtf rtf_nonstream rtf_ratio runs cfm_frames cfm_frames_nonstream dist_else; do
    positive "$f" "$line"
  done
  [ "$(field runs "$line")" -ge 3 ] || fail "bench $v --stream: fewer than 3 S3Gen runs: $line"
done
expect_error "bench mtl" "--reps" -- "$BENCH" mtl --stream -m "$T/mtl.gguf" --reps 0
expect_error "first_tokens" -- "$BENCH" mtl --stream -m "$T/mtl.gguf" --first 0

out=$("$BENCH" t3 -m "$T/turbo.gguf" --steps 25 --prompt 4 --text 3 --mb 4 2>&1) || { echo "$out"; fail "bench t3"; }
line=$(printf '%s\n' "$out" | grep '^bench t3 ') || { echo "$out"; fail "no bench t3 line"; }
for f in t3_tok_s decode_gbps stream_gbps decode_bw_ratio cpu_ms_per_tok clock_ghz fma_per_cycle; do positive "$f" "$line"; done

# bench t3-batch --mtl: one line per batch size, tokens/s summed over the requests, each round's
# ratio to the same round's one-row run, and the stream reads taken before the runs.
out=$("$BENCH" t3-batch -m "$T/mtl.gguf" --mtl --batch 1,2 --steps 6 --prompt 4 --text 3 --rounds 1 --sample-mb 4 2>&1) ||
  { echo "$out"; fail "bench t3-batch --mtl"; }
for n in 1 2; do
  line=$(printf '%s\n' "$out" | grep "^bench t3-batch mtl .* batch=$n ") || { echo "$out"; fail "no t3-batch mtl batch=$n line"; }
  for f in t3_tok_s_total speedups stream_gbps run_stream_gbps; do positive "$f" "$line"; done
done
printf '%s\n' "$out" | grep -q "batch=1 .* speedups=1.00 " || { echo "$out"; fail "t3-batch: one row's own ratio is not 1.00"; }
expect_error "bench t3-batch: --sample-mb must be an integer in [1, 65536], got '0'" -- \
  "$BENCH" t3-batch -m "$T/mtl.gguf" --mtl --sample-mb 0
expect_error "bench t3-batch: --batch must be an integer in [1, 64], got '4x'" -- \
  "$BENCH" t3-batch -m "$T/mtl.gguf" --mtl --batch 1,4x
expect_error "bench t3: --steps must be an integer in [1, 100000], got '10x'" -- \
  "$BENCH" t3 -m "$T/turbo.gguf" --steps 10x
expect_error "bench t3: --seed must be an unsigned 64-bit integer, got ' -5'" -- \
  "$BENCH" t3 -m "$T/turbo.gguf" --seed " -5"

# bench peak: one line per instruction, positive rates where the CPU has it, "missing" otherwise,
# and the ratios when both of a pair ran.
out=$("$BENCH" peak --reps 1 2>&1) || { echo "$out"; fail "bench peak"; }
for op in vfmadd231ps vdpbf16ps vpdpbusd; do
  line=$(printf '%s\n' "$out" | grep "^peak op=$op ") || { echo "$out"; fail "bench peak: no $op line"; }
  case "$line" in
    *missing) ;;
    *) positive zmm_per_ns "$line"; positive macs_per_ns "$line" ;;
  esac
done
if ! printf '%s\n' "$out" | grep -q "op=vpdpbusd missing" && ! printf '%s\n' "$out" | grep -q "op=vdpbf16ps missing"; then
  positive int8_over_bf16 "$(printf '%s\n' "$out" | grep '^peak int8_over_bf16=')"
fi
expect_error "usage: chatterbox-bench peak" -- "$BENCH" peak --bogus

expect_error "bench turbo" "--sample-every" -- "$BENCH" turbo -m "$T/turbo.gguf" --sample-every 0
expect_error "bench mtl" "--sample-mb" -- "$BENCH" mtl -m "$T/mtl.gguf" --sample-mb -1
expect_error "unknown option '--bogus'" -- "$BENCH" turbo -m "$T/turbo.gguf" --bogus
# Every bench answers --help with its usage on stdout and exit status 0 (the list from the top-level help).
benches=$("$BENCH" --help 2>&1 | awk '/^benches:/ {on = 1; next} on && NF {print $1}')
[ "$(printf '%s\n' "$benches" | wc -l)" -ge 10 ] || fail "chatterbox-bench --help lists too few benches: $benches"
for b in $benches; do
  help=$("$BENCH" "$b" --help 2> "$T/help.err") || fail "bench $b --help: exit status $? ($(cat "$T/help.err"))"
  case "$help" in
    *"usage: chatterbox-bench $b"*) ;;
    *) fail "bench $b --help printed no usage line: $help" ;;
  esac
done
expect_error "-m MODEL.gguf is required" -- "$BENCH" t3-batch --batch 1
echo "PASS"
