#!/usr/bin/env bash
# Multilingual end to end after T3, against PyTorch (tests/mtl_audio_reference.py, which chains the
# flow, CFM and HiFT references on the checkpoint's s3gen.pt): T3-like tokens with an SOS, ids
# S3Gen cannot take and an EOS followed by more ids go through MtlPipeline::postprocess (must match
# upstream drop_invalid_tokens + our filter exactly), then the flow encoder, the 10-step CFG CFM,
# HiFT, the start trim/fade and the tail trim with the built-in voice; the CFM noise and HiFT draws
# are shared with the reference. Waveform within rel. L2 1e-4 (measured ~1e-5 at F32).
# usage: test_mtl_audio_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-mtl-audio-parity
REF=$SRC/tests/mtl_audio_reference.py
tiny_gguf mtl 7 "$TMP/ck" "$TMP/m.gguf"
"$PY" "$REF" inputs "$TMP/ck" "$TMP/in" --seed 3 --n-tokens 30
"$CLI" debug-mtl-audio -m "$TMP/m.gguf" --tokens "$TMP/in/tokens.npy" --out "$TMP/wave.npy" \
  --out-tokens "$TMP/speech.npy" --cfm-noise "$TMP/in/cfm_noise.npy" --phases "$TMP/in/phases.npy" \
  --hift-noise "$TMP/in/hift_noise.npy" --threads 2
"$PY" "$REF" check "$TMP/ck" "$TMP/in" --wave "$TMP/wave.npy" --speech "$TMP/speech.npy" --rtol 1e-4

# A wrong-size injected draw is refused with the expected shape.
if "$CLI" debug-mtl-audio -m "$TMP/m.gguf" --tokens "$TMP/in/tokens.npy" --out "$TMP/x.npy" \
  --cfm-noise "$TMP/in/phases.npy" --phases "$TMP/in/phases.npy" --hift-noise "$TMP/in/hift_noise.npy" \
  2> "$TMP/err.txt"; then
  echo "FAIL: a wrong-size CFM noise was accepted"; exit 1
fi
grep -q "has shape (9,)" "$TMP/err.txt" || { cat "$TMP/err.txt"; echo "FAIL: error does not give the shape"; exit 1; }
echo "PASS"
