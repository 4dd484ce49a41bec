#!/usr/bin/env bash
# T3 Multilingual parity against a PyTorch reference (tests/t3_mtl_reference.py, torch
# primitives, no KV cache) on a tiny synthetic checkpoint (chatterbox-mkckpt --variant mtl
# --size tiny), converted to an f32 GGUF. With a 50-token voice prompt and 21 text tokens:
#   1. the conditioning tokens (speaker, perceiver 32, emotion = 34) within rel. 1e-5;
#      without a prompt (2 tokens), exaggeration 0.9;
#   2. greedy with CFG 0.5 (full chain, then argmax), F32 KV cache: raw cond/uncond logits
#      and CFG logits of every step within rel. 1e-4 (max|diff| / max|ref|), 50 identical tokens;
#   3. cfg_weight 0 (one row is run): logits equal the cond-only reference, 30 identical tokens;
#   4. the sampler chain (CFG, repetition, temperature, min-p, top-p) on the C++ raw logits and
#      token history of seeded sampled runs: same kept sets, same values, every sampled token
#      allowed (defaults, and a sharper setting);
#   5. the same seed gives the same tokens;
#   6. F16 KV cache: prefill logits within rel. 1e-2;
#   6b. a 3-token text with a 150-token voice prompt (buffers sized for short texts): prefill
#       logits within rel. 1e-4;
#   7. bad input (text id outside the vocabulary, wrong speaker size) fails with a message;
#   8. grouped-query attention (the checkpoint's k/v projections cut to one head): greedy CFG,
#      logits within rel. 1e-4 and 30 identical tokens.
# usage: test_t3_mtl_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-t3-mtl-parity
REF=$SRC/tests/t3_mtl_reference.py
CK=$TMP/ckpt
IN=$TMP/in

tiny_gguf mtl 11 "$CK" "$TMP/m.gguf"
"$PY" "$REF" inputs "$CK" "$IN" --seed 3 --n-text 21 --n-prompt 50

common=(-m "$TMP/m.gguf" --text-ids "$IN/text.npy" --speaker-emb "$IN/speaker.npy" --threads 2)
with_prompt=("${common[@]}" --prompt-tokens "$IN/prompt.npy")

echo "== 1. conditioning tokens"
"$CLI" debug t3 "${with_prompt[@]}" --steps 1 --greedy --out-cond "$TMP/cond.npy" > /dev/null
"$PY" "$REF" cond "$CK" "$IN" --cond "$TMP/cond.npy"
"$CLI" debug t3 "${common[@]}" --prompt-tokens none --exaggeration 0.9 --steps 1 --greedy \
  --out-cond "$TMP/cond0.npy" > /dev/null
"$PY" "$REF" cond "$CK" "$IN" --no-prompt --exaggeration 0.9 --cond "$TMP/cond0.npy"

echo "== 2. greedy, CFG 0.5, f32 KV cache, 50 steps"
"$CLI" debug t3 "${with_prompt[@]}" --steps 50 --greedy --kv-type f32 --cfg-weight 0.5 \
  --out-logits "$TMP/g_logits.npy" --out-guided "$TMP/g_guided.npy" --out-tokens "$TMP/g_tokens.npy"
"$PY" "$REF" greedy "$CK" "$IN" --steps 50 --cfg-weight 0.5 --logits "$TMP/g_logits.npy" \
  --guided "$TMP/g_guided.npy" --tokens "$TMP/g_tokens.npy" --rtol 1e-4 --min-tokens 50

echo "== 3. greedy, cfg_weight 0 (one row), 30 steps"
"$CLI" debug t3 "${with_prompt[@]}" --steps 30 --greedy --kv-type f32 --cfg-weight 0 \
  --out-logits "$TMP/z_logits.npy" --out-guided "$TMP/z_guided.npy" --out-tokens "$TMP/z_tokens.npy"
"$PY" "$REF" greedy "$CK" "$IN" --steps 30 --cfg-weight 0 --logits "$TMP/z_logits.npy" \
  --guided "$TMP/z_guided.npy" --tokens "$TMP/z_tokens.npy" --rtol 1e-4 --min-tokens 30

echo "== 4. sampler chain (seed 5, defaults: cfg 0.5, temperature 0.8, min-p 0.05, top-p 1, penalty 1.2)"
"$CLI" debug t3 "${with_prompt[@]}" --steps 40 --seed 5 --kv-type f32 \
  --out-logits "$TMP/s_logits.npy" --out-tokens "$TMP/s_tokens.npy" --out-processed "$TMP/s_proc.npy"
"$PY" "$REF" sampler "$CK" "$IN" --logits "$TMP/s_logits.npy" --tokens "$TMP/s_tokens.npy" \
  --processed "$TMP/s_proc.npy"

echo "== 4b. sampler chain, sharper: cfg 1.5, temperature 0.5, min-p 0.01, top-p 0.8, penalty 2"
"$CLI" debug t3 "${with_prompt[@]}" --steps 40 --seed 9 --kv-type f32 --cfg-weight 1.5 --temperature 0.5 \
  --min-p 0.01 --top-p 0.8 --rep-penalty 2 \
  --out-logits "$TMP/p_logits.npy" --out-tokens "$TMP/p_tokens.npy" --out-processed "$TMP/p_proc.npy"
"$PY" "$REF" sampler "$CK" "$IN" --logits "$TMP/p_logits.npy" --tokens "$TMP/p_tokens.npy" \
  --processed "$TMP/p_proc.npy" --cfg-weight 1.5 --temperature 0.5 --min-p 0.01 --top-p 0.8 --rep 2

echo "== 5. determinism (same seed twice)"
"$CLI" debug t3 "${with_prompt[@]}" --steps 40 --seed 5 --kv-type f32 --out-tokens "$TMP/s_tokens2.npy" > /dev/null
cmp "$TMP/s_tokens.npy" "$TMP/s_tokens2.npy" || { echo "FAIL: seeded sampling is not deterministic"; exit 1; }

echo "== 6. f16 KV cache, prefill logits"
"$CLI" debug t3 "${with_prompt[@]}" --steps 1 --greedy --kv-type f16 --out-logits "$TMP/h_logits.npy"
"$PY" "$REF" greedy "$CK" "$IN" --prefill-only --logits "$TMP/h_logits.npy" --rtol 1e-2

echo "== 6b. 3-token text, prefill logits"
"$PY" "$REF" inputs "$CK" "$TMP/in3" --seed 4 --n-text 3 --n-prompt 150
"$CLI" debug t3 -m "$TMP/m.gguf" --text-ids "$TMP/in3/text.npy" --speaker-emb "$TMP/in3/speaker.npy" \
  --prompt-tokens "$TMP/in3/prompt.npy" --steps 1 --greedy --kv-type f32 --out-logits "$TMP/s3_logits.npy"
"$PY" "$REF" greedy "$CK" "$TMP/in3" --prefill-only --logits "$TMP/s3_logits.npy" --rtol 1e-4

echo "== 7. bad input"
"$PY" -c "import numpy as np; np.save('$TMP/bad_text.npy', np.array([3, 100000], np.int32)); \
np.save('$TMP/bad_spk.npy', np.zeros(7, np.float32))"
expect_fail() {  # expect_fail PATTERN ARGS...
  local pat=$1; shift
  if "$CLI" debug t3 "$@" > "$TMP/err.txt" 2>&1; then echo "FAIL: accepted bad input: $*"; exit 1; fi
  grep -q "$pat" "$TMP/err.txt" || { echo "FAIL: no '$pat' in:"; cat "$TMP/err.txt"; exit 1; }
}
expect_fail "text token 100000" -m "$TMP/m.gguf" --text-ids "$TMP/bad_text.npy" --steps 1
expect_fail "speaker embedding has 7 values" -m "$TMP/m.gguf" --text-ids "$IN/text.npy" \
  --speaker-emb "$TMP/bad_spk.npy" --steps 1

echo "== 8. grouped-query attention (1 key/value head)"
"$PY" "$REF" gqa "$CK" "$TMP/ckpt_gqa"
"$CLI" convert "$TMP/ckpt_gqa" -o "$TMP/gqa.gguf" --type f32 > /dev/null 2>&1
"$CLI" debug t3 -m "$TMP/gqa.gguf" --text-ids "$IN/text.npy" --speaker-emb "$IN/speaker.npy" \
  --prompt-tokens "$IN/prompt.npy" --steps 30 --greedy --kv-type f32 \
  --out-logits "$TMP/q_logits.npy" --out-guided "$TMP/q_guided.npy" --out-tokens "$TMP/q_tokens.npy"
"$PY" "$REF" greedy "$TMP/ckpt_gqa" "$IN" --steps 30 --logits "$TMP/q_logits.npy" \
  --guided "$TMP/q_guided.npy" --tokens "$TMP/q_tokens.npy" --rtol 1e-4 --min-tokens 30

echo "PASS"
