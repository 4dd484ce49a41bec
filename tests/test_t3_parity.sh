#!/usr/bin/env bash
# T3 Turbo and Nano parity against a PyTorch reference (tests/t3_reference.py, torch primitives
# only) on tiny synthetic checkpoints (chatterbox-mkckpt --variant turbo|nano --size tiny; Nano's
# T3 differs in depth, width and heads), converted to f32 GGUFs. Checks, per variant, with a
# 150-token voice prompt and 23 text tokens:
#   1. greedy (full processor chain, then argmax), F32 KV cache: logits of every position
#      within rel. 1e-4 (max|diff| / max|ref|) and 51 identical tokens (prefill + 50 steps);
#   2. the sampler chain (temperature, top-k, top-p, repetition penalty) on the C++ raw
#      logits and token history of a seeded sampled run: same kept sets, values within 1e-6,
#      every sampled token allowed;
#      (defaults, and a sharper setting where top-k and top-p cut deep);
#   3. the same seed gives the same tokens;
#   4. F16 KV cache: prefill logits within rel. 1e-2.
# usage: test_t3_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-t3-parity
REF=$SRC/tests/t3_reference.py

parity() {
  local W=$TMP/$1
  CK=$W/ckpt
  IN=$W/in
  mkdir -p "$IN" "$W/dump"

  tiny_gguf "$1" 11 "$CK" "$W/m.gguf"
  "$PY" "$REF" inputs "$CK" "$IN" --seed 3 --n-text 23 --n-prompt 150

  common=(-m "$W/m.gguf" --text-ids "$IN/text.npy" --speaker-emb "$IN/speaker.npy"
          --prompt-tokens "$IN/prompt.npy" --threads 2)

  echo "== $1: 1. greedy, f32 KV cache, 50 steps"
  "$CLI" debug t3 "${common[@]}" --steps 50 --greedy --kv-type f32 \
    --out-logits "$W/g_logits.npy" --out-tokens "$W/g_tokens.npy" --dump-dir "$W/dump"
  "$PY" "$REF" greedy "$CK" "$IN" --steps 50 --logits "$W/g_logits.npy" --tokens "$W/g_tokens.npy" \
    --rtol 1e-4 --min-tokens 51 --dump-dir "$W/dump"

  echo "== $1: 2. sampler chain (seed 5, defaults 0.8 / 1000 / 0.95 / 1.2)"
  "$CLI" debug t3 "${common[@]}" --steps 40 --seed 5 --kv-type f32 \
    --out-logits "$W/s_logits.npy" --out-tokens "$W/s_tokens.npy" --out-processed "$W/s_proc.npy"
  "$PY" "$REF" sampler "$CK" "$IN" --logits "$W/s_logits.npy" --tokens "$W/s_tokens.npy" \
    --processed "$W/s_proc.npy"

  echo "== $1: 2b. sampler chain, sharper: temperature 0.15, top-k 40, top-p 0.7, penalty 1.5"
  sharp=(--temperature 0.15 --top-k 40 --top-p 0.7)
  "$CLI" debug t3 "${common[@]}" --steps 40 --seed 9 --kv-type f32 "${sharp[@]}" --rep-penalty 1.5 \
    --out-logits "$W/p_logits.npy" --out-tokens "$W/p_tokens.npy" --out-processed "$W/p_proc.npy"
  "$PY" "$REF" sampler "$CK" "$IN" --logits "$W/p_logits.npy" --tokens "$W/p_tokens.npy" \
    --processed "$W/p_proc.npy" "${sharp[@]}" --rep 1.5

  echo "== $1: 3. determinism (same seed twice)"
  "$CLI" debug t3 "${common[@]}" --steps 40 --seed 5 --kv-type f32 --out-tokens "$W/s_tokens2.npy" > /dev/null
  cmp "$W/s_tokens.npy" "$W/s_tokens2.npy" || { echo "FAIL: seeded sampling is not deterministic"; exit 1; }

  echo "== $1: 4. f16 KV cache, prefill logits"
  "$CLI" debug t3 "${common[@]}" --steps 0 --greedy --kv-type f16 --out-logits "$W/h_logits.npy"
  "$PY" "$REF" prefill "$CK" "$IN" --logits "$W/h_logits.npy" --rtol 1e-2
}

for variant in turbo nano; do
  parity $variant
done
echo "PASS"
