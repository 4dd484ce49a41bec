#!/bin/bash
# scripts/quant_quality.py (the quality table of docs/quantization.md) on a tiny synthetic Turbo:
# it runs end to end, prints a row per type, and its fidelity figures say what the dtype policy
# implies: every type whose S3Gen stays f16 (q4_k included) renders the same mel (same S3Gen weights), an S3Gen
# stored as q4_0 renders it worse, and f16 T3 logits are closer to f32 than q4_0 ones.
# Usage: test_quant_quality.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_quant_quality.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-quant-quality
[ -x "$BUILD/bin/chatterbox-bench" ] || { echo "skip: chatterbox-bench not built"; exit 77; }
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }

python3 "$(dirname "$0")/../scripts/quant_quality.py" --build "$BUILD" --work "$T/work" --size tiny --reps 1 --tokens 30 \
  --steps 20 --keep > "$T/table.md" 2> "$T/err.txt" || { tail -20 "$T/err.txt"; fail "quant_quality.py"; }
cat "$T/table.md"
for t in f32 f16 q8_0 q4_k q4_0 'q4_0+s3q4'; do
  grep -q "^| $t | " "$T/table.md" || fail "no row for $t"
done
# Columns: | type | file | rss | tok/s | rtf | logits snr (steps) | agree | mel snr | wave snr |
col() { awk -F'|' -v t="$1" -v c="$2" '$2 == " " t " " { gsub(/ /, "", $c); print $c }' "$T/table.md"; }
mel_f16=$(col f16 9) mel_q8=$(col q8_0 9) mel_q4=$(col q4_0 9) mel_q4k=$(col q4_k 9) mel_q4s=$(col 'q4_0+s3q4' 9)
[ "$mel_f16" = "$mel_q8" ] && [ "$mel_f16" = "$mel_q4" ] && [ "$mel_f16" = "$mel_q4k" ] ||
  fail "S3Gen mel SNR differs between types that keep S3Gen f16: $mel_f16 $mel_q8 $mel_q4 $mel_q4k"
awk -v a="$mel_q4" -v b="$mel_q4s" 'BEGIN { exit !(a == "exact" || a + 0 > b + 0) }' ||
  fail "mel SNR of q4_0 ($mel_q4) not above q4_0 with a q4_0 S3Gen ($mel_q4s)"
lg_f16=$(col f16 7) lg_q4=$(col q4_0 7)
awk -v a="${lg_f16%%(*}" -v b="${lg_q4%%(*}" 'BEGIN { exit !(a == "exact" || a + 0 > b + 0) }' ||
  fail "f16 logits SNR ($lg_f16) not above q4_0's ($lg_q4)"
sz_f32=$(col f32 3) sz_q4=$(col q4_0 3) sz_q4s=$(col 'q4_0+s3q4' 3)
[ "$sz_q4s" -lt "$sz_q4" ] && [ "$sz_q4" -lt "$sz_f32" ] || fail "file sizes f32 $sz_f32, q4_0 $sz_q4, q4_0+s3q4 $sz_q4s"
echo "test_quant_quality.sh: all checks passed"
