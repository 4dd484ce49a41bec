#!/usr/bin/env bash
# S3Gen flow front + UpsampleConformerEncoder parity against a PyTorch reference
# (tests/flow_reference.py, torch primitives only) on a tiny synthetic Turbo checkpoint
# (chatterbox-mkckpt --size tiny: d 128, 2 heads, 2 + 1 conformer layers) converted to an f32
# GGUF. Checks mu [80, 2L], spks [80] and every named intermediate within rel. 1e-4
# (max|diff| / max|ref|), and cond (prompt_feat^T then zeros) exactly:
#   1. 25 prompt tokens + 40 generated, 50 prompt frames (the tiny conds.pt sizes);
#   2. no prompt (Tp = Tm = 0) and a single token (L = 1: the rel_shift degenerate case);
#   3. the built-in voice of the GGUF (voice.prompt_token / prompt_feat / embedding);
#   4. an out-of-range token is refused with its value and position.
# usage: test_flow_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-flow-parity
REF=$SRC/tests/flow_reference.py
CK=$TMP/ckpt
tiny_gguf turbo 7 "$CK" "$TMP/m.gguf"

run_case() {  # name, then extra args for `inputs`
  local name=$1; shift
  local IN=$TMP/$name
  mkdir -p "$IN/dump"
  "$PY" "$REF" inputs "$CK" "$IN" "$@"
  "$CLI" debug flow -m "$TMP/m.gguf" --tokens "$IN/tokens.npy" --prompt-tokens "$IN/prompt_tokens.npy" \
    --prompt-feat "$IN/prompt_feat.npy" --embedding "$IN/embedding.npy" --threads 2 \
    --out-mu "$IN/mu.npy" --out-cond "$IN/cond.npy" --out-spks "$IN/spks.npy" --dump-dir "$IN/dump"
  "$PY" "$REF" compare "$CK" "$IN" --mu "$IN/mu.npy" --cond "$IN/cond.npy" --spks "$IN/spks.npy" \
    --dump-dir "$IN/dump" --rtol 1e-4
}

echo "== 1. 25 prompt + 40 tokens, 50 prompt frames"
run_case prompt --seed 3 --n-tokens 40 --n-prompt 25 --n-frames 50

echo "== 2a. no prompt, 17 tokens"
run_case noprompt --seed 4 --n-tokens 17 --n-prompt 0 --n-frames 0

echo "== 2b. one token"
run_case one --seed 5 --n-tokens 1 --n-prompt 0 --n-frames 0

echo "== 3. built-in voice (GGUF voice.*), 30 tokens"
IN=$TMP/voice
"$PY" "$REF" inputs "$CK" "$IN" --seed 6 --n-tokens 30 --n-prompt 0 --n-frames 0
"$CLI" debug flow -m "$TMP/m.gguf" --tokens "$IN/tokens.npy" --threads 2 \
  --out-mu "$IN/mu_voice.npy" --out-cond "$IN/cond_voice.npy" --out-spks "$IN/spks_voice.npy"
"$PY" "$REF" voice-inputs "$CK" "$IN"
"$PY" "$REF" compare "$CK" "$IN" --mu "$IN/mu_voice.npy" --cond "$IN/cond_voice.npy" \
  --spks "$IN/spks_voice.npy" --rtol 1e-4

echo "== 4. errors name the offending input"
"$PY" -c "import numpy as np; np.save('$IN/bad.npy', np.array([5, 6561, 7], dtype=np.int32))"
if out=$("$CLI" debug flow -m "$TMP/m.gguf" --tokens "$IN/bad.npy" 2>&1); then
  echo "FAIL: token 6561 was accepted"; exit 1
fi
grep -q "speech token 6561 at 1 is outside \[0, 6561)" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   $out"

echo "PASS"
