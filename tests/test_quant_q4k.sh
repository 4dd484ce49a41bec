#!/bin/bash
# `--type q4_k` end to end on tiny synthetic checkpoints: convert and quantize (from the f32
# GGUF, type named in llama.cpp's upper case) write the same bytes; the T3 matrices whose K is
# a multiple of 256 are q4_k, the others q8_0 (the policy's fallback), the head stays q8_0,
# S3Gen f16; info --check scans the file; the model synthesizes (Turbo: fused GPT-2 decode;
# Multilingual: Llama decode with CFG, whose tiny matrices (K = 128, 384) all take the q8_0
# fallback).
# Usage: test_quant_q4k.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_quant_q4k.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-quant-q4k

tensor_dtype() { "$B" info "$1" --tensors | awk -v n="$2" '$1 == n { print $2 }'; }
tensor_line() { "$B" info "$1" --tensors | awk -v n="$2" '$1 == n'; }

for v in turbo mtl; do
  "$MK" --variant $v --size tiny --seed 9 --threads 1 "$T/$v" > /dev/null 2>&1 || fail "mkckpt $v"
  "$B" convert "$T/$v" -o "$T/$v-f32.gguf" --quiet > /dev/null || fail "convert f32 $v"
  "$B" convert "$T/$v" -o "$T/$v-q4k.gguf" --type q4_k --quiet > /dev/null || fail "convert q4_k $v"
  "$B" quantize "$T/$v-f32.gguf" "$T/$v-q4k-r.gguf" --type Q4_K --quiet > /dev/null || fail "quantize Q4_K $v"
  cmp -s "$T/$v-q4k.gguf" "$T/$v-q4k-r.gguf" || fail "quantize --type Q4_K differs from convert --type q4_k ($v)"
  "$B" info "$T/$v-q4k.gguf" --check > "$T/info.txt" || { cat "$T/info.txt"; fail "info --check $v"; }
  grep -q '"q4_k"' "$T/info.txt" || fail "convert.type is not q4_k ($v)"
  "$B" info "$T/$v-q4k.gguf" --tensors > "$T/tensors.txt" || fail "info --tensors $v"
  # Tensor lines: "  NAME  DTYPE  [SHAPE]  BYTES".
  grep -E '^ *[^ ]+ +q4_k +\[' "$T/tensors.txt" > "$T/q4k.txt"
  [ $v = mtl ] || grep -qE '^ *t3\.' "$T/q4k.txt" || { cat "$T/tensors.txt"; fail "no q4_k T3 tensor ($v)"; }
  ! grep -qvE '^ *t3\.' "$T/q4k.txt" || { cat "$T/q4k.txt"; fail "a non-T3 tensor is q4_k ($v)"; }
done

# Turbo tiny (d = 128, MLP 512): c_fc [512, 128] has K = 128 -> q8_0; mlp c_proj [128, 512] -> q4_k.
[ "$(tensor_dtype "$T/turbo-q4k.gguf" t3.tfmr.h.0.mlp.c_proj.weight)" = q4_k ] ||
  { tensor_line "$T/turbo-q4k.gguf" t3.tfmr.h.0.mlp.c_proj.weight; fail "Turbo MLP c_proj not q4_k"; }
[ "$(tensor_dtype "$T/turbo-q4k.gguf" t3.tfmr.h.0.mlp.c_fc.weight)" = q8_0 ] ||
  { tensor_line "$T/turbo-q4k.gguf" t3.tfmr.h.0.mlp.c_fc.weight; fail "Turbo c_fc (K = 128) not the q8_0 fallback"; }
[ "$(tensor_dtype "$T/turbo-q4k.gguf" t3.speech_head.weight)" = q8_0 ] || fail "speech head not q8_0 at q4_k"
[ "$(tensor_dtype "$T/mtl-q4k.gguf" t3.tfmr.layers.0.mlp.down_proj.weight)" = q8_0 ] ||
  fail "Multilingual down_proj (K = 384) not the q8_0 fallback"
[ "$(tensor_dtype "$T/turbo-q4k.gguf" cfm.down_blocks.0.1.0.attn1.to_q.weight)" = f16 ] || fail "CFM matrix not f16 at q4_k"

"$B" say -m "$T/turbo-q4k.gguf" --max-tokens 20 --threads 2 "Hello there." -o "$T/turbo.wav" 2> "$T/say.err" ||
  { cat "$T/say.err"; fail "say with the q4_k Turbo"; }
[ -s "$T/turbo.wav" ] || fail "say with the q4_k Turbo wrote no audio"
"$B" say -m "$T/mtl-q4k.gguf" --language fr --max-tokens 20 --threads 2 "Bonjour." -o "$T/mtl.wav" 2> "$T/say.err" ||
  { cat "$T/say.err"; fail "say with the q4_k Multilingual model"; }
[ -s "$T/mtl.wav" ] || fail "say with the q4_k Multilingual model wrote no audio"

expect_error "--type 'q5_k' is not supported" -- "$B" convert "$T/turbo" -o "$T/bad.gguf" --type q5_k
echo "test_quant_q4k.sh: all checks passed"
