#!/usr/bin/env bash
# S3 tokenizer (models/s3_tokenizer.h) parity against the PyTorch reference tests/s3tok_reference.py
# (upstream's order of operations in f32) on a tiny synthetic Turbo checkpoint (chatterbox-mkckpt
# --size tiny: width 128 = 2 heads of 64, 2 blocks) converted to GGUF.
# Tokens must be IDENTICAL; the FSQ projection (project_down, before tanh) and the named
# intermediates (mel, conv1, conv2, every block) within rel. 1e-4 (max|diff| / max|ref|). The
# reference prints how many FSQ inputs lie near a rounding boundary and how many of them our
# deviation could flip (at_risk).
#   1. 5 s of espeak-ng speech (a synthetic voiced signal when espeak-ng is missing), f32 GGUF,
#      with every intermediate; then the same on the generic kernels (CBX_DEBUG_FORCE_ISA=generic);
#   2. the same wave cut to max_tokens 30 (the mel's global max still comes from the whole clip);
#   3. odd lengths: 24321 samples (152 frames -> 76 -> 38 tokens) and 16161 (101 -> 51 -> 26);
#   4. the shortest input, 201 samples (1 frame, 1 token);
#   5. an f16 GGUF against the reference with its Linear weights rounded to f16;
#   6. 31 s of audio: refused without max_tokens (upstream's > 30 s window path is not ported),
#      tokenized with max_tokens 100;
#   7. errors: 200 samples, max_tokens 0.
# usage: test_s3tok_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-s3tok-parity
REF=$SRC/tests/s3tok_reference.py
CK=$TMP/ckpt
tiny_gguf turbo 11 "$CK" "$TMP/m.gguf"

run_case() {  # name, wav, gguf, then extra args for both sides (--max-tokens N) and the reference
  local name=$1 wav=$2 gguf=$3; shift 3
  local D=$TMP/$name
  mkdir -p "$D/dump"
  local cli_args=() ref_args=()
  while [ $# -gt 0 ]; do
    case $1 in
      --max-tokens) cli_args+=("$1" "$2"); ref_args+=("$1" "$2"); shift 2 ;;
      *) ref_args+=("$1"); shift ;;
    esac
  done
  echo "== $name"
  "$CLI" debug s3tok -m "$gguf" --wav "$wav" -o "$D/tokens.npy" --out-proj "$D/proj.npy" \
    --dump-dir "$D/dump" --threads 2 "${cli_args[@]}"
  "$PY" "$REF" compare "$CK" "$wav" --tokens "$D/tokens.npy" --proj "$D/proj.npy" --dump-dir "$D/dump" \
    --rtol 1e-4 "${ref_args[@]}"
}

"$PY" "$REF" signal "$TMP/speech.npy" --seconds 5
run_case speech "$TMP/speech.npy" "$TMP/m.gguf"
CBX_DEBUG_FORCE_ISA=generic run_case speech-generic "$TMP/speech.npy" "$TMP/m.gguf"
run_case speech-cut30 "$TMP/speech.npy" "$TMP/m.gguf" --max-tokens 30

"$PY" "$REF" signal "$TMP/odd1.npy" --samples 24321 --kind synth --seed 1
run_case odd-24321 "$TMP/odd1.npy" "$TMP/m.gguf"
"$PY" "$REF" signal "$TMP/odd2.npy" --samples 16161 --kind synth --seed 2
run_case odd-16161 "$TMP/odd2.npy" "$TMP/m.gguf"
"$PY" "$REF" signal "$TMP/short.npy" --samples 201 --kind synth --seed 3
run_case shortest "$TMP/short.npy" "$TMP/m.gguf"

"$CLI" convert "$CK" -o "$TMP/m16.gguf" --type f16 > /dev/null 2>&1
run_case speech-f16 "$TMP/speech.npy" "$TMP/m16.gguf" --f16-weights

"$PY" "$REF" signal "$TMP/long.npy" --seconds 31 --kind synth --seed 4
echo "== 31 s"
if out=$("$CLI" debug s3tok -m "$TMP/m.gguf" --wav "$TMP/long.npy" -o "$TMP/long_tokens.npy" 2>&1); then
  echo "FAIL: 31 s without max_tokens was accepted"; exit 1
fi
grep -q "3100 mel frames (31.00 s) exceed 3000 (30 s)" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   refused: $out"
run_case long-cut100 "$TMP/long.npy" "$TMP/m.gguf" --max-tokens 100

echo "== errors name the offending input"
"$PY" "$REF" signal "$TMP/tiny.npy" --samples 200 --kind synth
if out=$("$CLI" debug s3tok -m "$TMP/m.gguf" --wav "$TMP/tiny.npy" -o "$TMP/x.npy" 2>&1); then
  echo "FAIL: 200 samples were accepted"; exit 1
fi
grep -q "200 samples is too short" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   $out"
if out=$("$CLI" debug s3tok -m "$TMP/m.gguf" --wav "$TMP/speech.npy" -o "$TMP/x.npy" --max-tokens 0 2>&1); then
  echo "FAIL: max_tokens 0 was accepted"; exit 1
fi
grep -q "max_tokens must be > 0" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   $out"

echo "PASS"
