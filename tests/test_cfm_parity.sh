#!/usr/bin/env bash
# S3Gen CFM parity against a PyTorch reference (tests/cfm_reference.py, torch primitives only) on
# tiny synthetic checkpoints (chatterbox-mkckpt --size tiny) converted to f32 GGUFs, with a
# 40-frame prompt and 60 generated frames and the noise shared with the reference:
#   1. Turbo (mean-flow, 2 Euler steps): the state after each step, the mel and every named
#      intermediate of the first estimator call within rel. 1e-4 (max|diff| / max|ref|);
#   2. Multilingual (10 cosine Euler steps, CFG 0.7 as a batch of two): the same checks;
#   3. a length mask (frames 90.. padding; upstream never pads at batch 1, but the estimator
#      takes the mask): Turbo steps and mel within rel. 1e-4;
#   4. generated noise: the same seed twice gives the same mel.
# usage: test_cfm_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-cfm-parity
REF=$SRC/tests/cfm_reference.py
"$PY" "$REF" inputs "$TMP/in" --seed 4 --prompt 40 --gen 60
inputs=(--mu "$TMP/in/mu.npy" --cond "$TMP/in/cond.npy" --spks "$TMP/in/spks.npy")

for variant in turbo mtl; do
  echo "== $variant"
  CK=$TMP/ck_$variant
  D=$TMP/dump_$variant
  mkdir -p "$D"
  tiny_gguf $variant 13 "$CK" "$TMP/$variant.gguf"
  "$CLI" debug-cfm -m "$TMP/$variant.gguf" "${inputs[@]}" --noise "$TMP/in/noise.npy" \
    --out-mel "$TMP/mel_$variant.npy" --steps-out "$TMP/step_$variant" --dump-dir "$D" --threads 2
  "$PY" "$REF" check "$CK" "$TMP/in" --steps "$TMP/step_$variant" --mel "$TMP/mel_$variant.npy" \
    --dump-dir "$D" --rtol 1e-4
done

echo "== turbo, length mask (90 of 100 frames valid)"
"$CLI" debug-cfm -m "$TMP/turbo.gguf" "${inputs[@]}" --noise "$TMP/in/noise.npy" --valid-frames 90 \
  --out-mel "$TMP/mel_mask.npy" --steps-out "$TMP/step_mask" --threads 2
"$PY" "$REF" check "$TMP/ck_turbo" "$TMP/in" --steps "$TMP/step_mask" --mel "$TMP/mel_mask.npy" --valid 90 --rtol 1e-4

echo "== generated noise: determinism"
for i in 1 2; do
  "$CLI" debug-cfm -m "$TMP/turbo.gguf" "${inputs[@]}" --seed 21 --out-mel "$TMP/gen$i.npy" --threads 2
done
cmp "$TMP/gen1.npy" "$TMP/gen2.npy" || { echo "FAIL: seeded noise is not deterministic"; exit 1; }

echo "PASS"
