#!/bin/bash
# CLI checks of `chatterbox convert | quantize | info` on tiny synthetic checkpoints
# (chatterbox-mkckpt), and of the error messages for corrupt or incomplete inputs.
# Usage: test_convert.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_convert.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-convert-sh

for v in turbo nano mtl; do
  "$MK" --variant $v --size tiny --seed 5 --threads 1 "$T/$v" > /dev/null 2>&1 || fail "mkckpt $v"
  "$B" convert "$T/$v" -o "$T/$v.gguf" --type q8_0 --quiet > "$T/out.txt" || fail "convert $v"
  grep -q "converted Chatterbox $v" "$T/out.txt" || fail "convert $v summary"
  "$B" info "$T/$v.gguf" --check > "$T/info.txt" || { cat "$T/info.txt"; fail "info --check $v"; }
  grep -q "variant $v" "$T/info.txt" || fail "info variant $v"
  grep -q "check: OK" "$T/info.txt" || fail "info check $v"
  grep -q "q8_0" "$T/info.txt" || fail "no q8_0 tensors in $v"
  CBX_PROGRESS=1 "$B" convert "$T/$v" -o "$T/$v-f32.gguf" 2> "$T/progress.txt" > /dev/null || fail "convert f32 $v"
  tr '\r' '\n' < "$T/progress.txt" | grep -Eq '^convert: tensor ([0-9]+)/\1 \(' || fail "no progress on stderr"
  "$B" quantize "$T/$v-f32.gguf" "$T/$v-q4.gguf" --type q4_0 --quiet > /dev/null || fail "quantize $v"
  "$B" info "$T/$v-q4.gguf" --check > "$T/info.txt" || { cat "$T/info.txt"; fail "info --check q4 $v"; }
  grep -q "q4_0" "$T/info.txt" || fail "no q4_0 tensors after quantize $v"
  grep -q '"q4_0"' "$T/info.txt" || fail "convert.type not updated by quantize"
done
grep -q "tokens 1019\|tokens [0-9]" "$T/info.txt" || fail "tokenizer summary"
# Nano: Turbo's files with t3_nano_v1 (tiny: 3 layers x 192, 3 heads; Turbo tiny: 2 x 128).
"$B" info "$T/nano.gguf" > "$T/info.txt" || fail "info nano"
grep -q 'model:.*"Chatterbox Nano", variant nano' "$T/info.txt" || { cat "$T/info.txt"; fail "info nano model line"; }
grep -qE "t3.n_layer +3$" "$T/info.txt" && grep -qE "t3.n_embd +192$" "$T/info.txt" && grep -qE "t3.n_head +3$" "$T/info.txt" ||
  { cat "$T/info.txt"; fail "info nano T3 shape"; }

# Dtype policy by role: --type q4_0 quantizes the T3 matrices and keeps S3Gen at f16;
# --s3gen-type overrides S3Gen (the layout of files converted before the policy), and that file loads.
tensor_dtype() { "$B" info "$1" --tensors | awk -v n="$2" '$1 == n { print $2 }'; }
[ "$(tensor_dtype "$T/turbo-q4.gguf" t3.tfmr.h.0.mlp.c_fc.weight)" = q4_0 ] || fail "T3 matrix not q4_0"
[ "$(tensor_dtype "$T/turbo-q4.gguf" cfm.down_blocks.0.1.0.attn1.to_q.weight)" = f16 ] || fail "CFM matrix not f16 at q4_0"
[ "$(tensor_dtype "$T/turbo-q4.gguf" flow.encoder.encoders.0.feed_forward.w_1.weight)" = f16 ] ||
  fail "flow encoder matrix not f16 at q4_0"
"$B" quantize "$T/turbo-f32.gguf" "$T/turbo-q4s.gguf" --type q4_0 --s3gen-type q4_0 --quiet > /dev/null ||
  fail "quantize --s3gen-type"
"$B" convert "$T/turbo" -o "$T/turbo-q4s-c.gguf" --type q4_0 --s3gen-type q4_0 --quiet > /dev/null ||
  fail "convert --s3gen-type"
cmp -s "$T/turbo-q4s.gguf" "$T/turbo-q4s-c.gguf" || fail "quantize --s3gen-type differs from convert --s3gen-type"
[ "$(tensor_dtype "$T/turbo-q4s.gguf" cfm.down_blocks.0.1.0.attn1.to_q.weight)" = q4_0 ] || fail "--s3gen-type ignored"
"$B" info "$T/turbo-q4s.gguf" --check > "$T/info.txt" || { cat "$T/info.txt"; fail "info --check --s3gen-type q4_0"; }
for m in turbo-q4 turbo-q4s; do
  "$B" say -m "$T/$m.gguf" --max-tokens 20 --threads 2 "Hello." -o "$T/$m.wav" 2> "$T/say.err" ||
    { cat "$T/say.err"; fail "say with $m.gguf"; }
  [ -s "$T/$m.wav" ] || fail "say with $m.gguf wrote no audio"
done
expect_error "--s3gen-type 'q3_k'" -- "$B" convert "$T/turbo" -o "$T/bad.gguf" --type q4_0 --s3gen-type q3_k

# NaN / Inf weights: info --check names the tensor and exits 1; quantize refuses to copy it.
# The file ends with its last tensor's data (voice.embedding, f32 [64]): element 63 becomes NaN.
cp "$T/turbo-f32.gguf" "$T/nan.gguf"
printf '\x00\x00\xc0\x7f' | dd of="$T/nan.gguf" bs=1 seek=$(( $(stat -c %s "$T/nan.gguf") - 4 )) conv=notrunc status=none
"$B" info "$T/nan.gguf" --check > "$T/info.txt"
rc=$?
[ $rc = 1 ] || { cat "$T/info.txt"; fail "info --check exit status $rc for a NaN weight (expected 1)"; }
grep -qF "check: tensor 'voice.embedding' (f32) has 1 NaN and 0 Inf values, the first at element 63" "$T/info.txt" ||
  { cat "$T/info.txt"; fail "info --check did not name the NaN weight"; }
grep -qF "check: FAILED: 0 layout problems, 1 tensors with non-finite values (1 NaN, 0 Inf)" "$T/info.txt" ||
  { cat "$T/info.txt"; fail "info --check summary"; }
expect_error "voice.embedding" "refusing to write a model with NaN / Inf weights" -- \
  "$B" quantize "$T/nan.gguf" "$T/bad.gguf" --type q8_0 --quiet
[ ! -e "$T/bad.gguf" ] || fail "quantize left an output with a NaN weight behind"

# Corrupt / incomplete inputs.
cp -r "$T/turbo" "$T/bad"
truncate -s 1000 "$T/bad/s3gen_meanflow.safetensors"
expect_error "s3gen_meanflow.safetensors" -- "$B" convert "$T/bad" -o "$T/bad.gguf" --quiet
[ ! -e "$T/bad.gguf" ] || fail "output left behind after an error"
rm "$T/bad/ve.safetensors"
expect_error "ve.safetensors" "Turbo" -- "$B" convert "$T/bad" -o "$T/bad.gguf" --quiet
mkdir "$T/empty"
expect_error "unknown checkpoint" -- "$B" convert "$T/empty" -o "$T/bad.gguf" --quiet
rm "$T/mtl/grapheme_mtl_merged_expanded_v1.json"
expect_error "grapheme_mtl_merged_expanded_v1.json" "Multilingual" -- "$B" convert "$T/mtl" -o "$T/bad.gguf" --quiet
expect_error "q5_k" -- "$B" convert "$T/turbo" -o "$T/bad.gguf" --type q5_k
expect_error "requantizing needs an F32/F16 source" -- "$B" quantize "$T/turbo.gguf" "$T/bad.gguf" --type q4_0
head -c 100 "$T/turbo.gguf" > "$T/short.gguf"
expect_error "short.gguf" -- "$B" info "$T/short.gguf"

echo "test_convert.sh: all checks passed"
