#!/bin/bash
# One settings path (issue 26): user choices are load parameters and flags, the environment only
# holds debugging switches named CBX_DEBUG_* (src/core/debug_env.h), on a tiny synthetic Turbo model.
#   - the library reads the environment in one file (src/core/debug_env.cpp);
#   - say --gemm-precision auto|f32|bf16 is parsed strictly (one error naming the flag; no output),
#     and on an f32 GGUF auto gives the f32 bytes; serve checks the flag the same way;
#   - a bad CBX_DEBUG_* value is one error naming the variable, its value and the allowed values,
#     for say and for a command that loads no model; a good one is accepted;
#   - the old names (CBX_GEMM, CBX_FORCE_ISA, ...) are no longer read.
# Usage: test_settings.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_settings.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-settings
SRC=${CBX_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

# ---- the environment is read in one place ----
if [ -d "$SRC/src" ]; then
  readers=$(grep -rl 'getenv' "$SRC/src" | sed "s|^$SRC/||" | sort)
  [ "$readers" = "src/core/debug_env.cpp" ] || fail "getenv outside src/core/debug_env.cpp: $readers"
fi

"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
SAY=("$B" say -m "$T/m.gguf" --max-tokens 20 -t 2 -q --seed 3)

# ---- --gemm-precision: strict ----
for v in "" F32 fp16 bf16x " f32" auto,f32; do
  expect_error "chatterbox say: error: --gemm-precision must be auto, f32 or bf16, got '$v'" -- \
    "${SAY[@]}" "Hello." -o "$T/bad.wav" --gemm-precision "$v"
  [ "$(wc -l < "$T/err.txt")" = 1 ] || fail "more than one line for --gemm-precision '$v': $(cat "$T/err.txt")"
  [ ! -e "$T/bad.wav" ] || fail "output written despite --gemm-precision '$v'"
done
expect_error "--gemm-precision needs a value" -- "${SAY[@]}" "Hello." -o "$T/bad.wav" --gemm-precision
for v in auto f32 bf16; do
  "${SAY[@]}" "Hello." -o "$T/$v.wav" --gemm-precision "$v" 2> "$T/err.txt" || fail "say --gemm-precision $v: $(cat "$T/err.txt")"
  [ "$(wav_samples "$T/$v.wav")" -gt 0 ] || fail "say --gemm-precision $v: no audio"
done
"${SAY[@]}" "Hello." -o "$T/default.wav" || fail "say (default precision)"
# An f32 GGUF's default is exact f32: the same bytes (same seed, same threads).
cmp -s "$T/default.wav" "$T/f32.wav" || fail "f32 GGUF: the default precision is not f32"
cmp -s "$T/auto.wav" "$T/f32.wav" || fail "f32 GGUF: --gemm-precision auto is not f32"
# A q8_0 GGUF's default is bf16. Where a bf16 GEMM runs (system-info bf16_gemm=) the precisions
# give different audio (the flag reaches the model); elsewhere bf16 runs the f32 GEMM, same bytes.
"$B" convert "$T/ckpt" -o "$T/q.gguf" --type q8_0 --quiet > /dev/null || fail "convert q8_0"
for v in auto f32 bf16; do
  "$B" say -m "$T/q.gguf" --max-tokens 20 -t 2 -q --seed 3 "Hello." -o "$T/q-$v.wav" --gemm-precision "$v" 2> /dev/null || fail "q8_0 say $v"
done
# The default CFM precision of a lossy GGUF is int8 where the VNNI kernel runs it (system-info
# int8_gemm=vpdpbusd), else the GEMM precision; --cfm-precision reaches the estimator.
i8=$("$B" system-info | sed -n 's/.*int8_gemm=\([a-z0-9]*\).*/\1/p')
[ -n "$i8" ] || fail "system-info printed no int8_gemm="
cfm_default=bf16
[ "$i8" = vpdpbusd ] && cfm_default=int8
"$B" say -m "$T/q.gguf" --max-tokens 20 -t 2 -q --seed 3 "Hello." -o "$T/q-bf16-cfmdef.wav" --gemm-precision bf16 \
  --cfm-precision "$cfm_default" 2> /dev/null || fail "q8_0 say bf16 + cfm $cfm_default"
cmp -s "$T/q-auto.wav" "$T/q-bf16-cfmdef.wav" || fail "q8_0 GGUF: the default is not bf16 with a $cfm_default CFM"
"$B" say -m "$T/q.gguf" --max-tokens 20 -t 2 -q --seed 3 "Hello." -o "$T/q-cfm-int8.wav" --cfm-precision int8 \
  2> /dev/null || fail "q8_0 say --cfm-precision int8"
"$B" say -m "$T/q.gguf" --max-tokens 20 -t 2 -q --seed 3 "Hello." -o "$T/q-cfm-bf16.wav" --cfm-precision bf16 \
  2> /dev/null || fail "q8_0 say --cfm-precision bf16"
cmp -s "$T/q-cfm-int8.wav" "$T/q-cfm-bf16.wav" && fail "--cfm-precision int8 gave the bf16 audio"
cmp -s "$T/q-cfm-bf16.wav" "$T/q-bf16.wav" || fail "--cfm-precision bf16 is not the bf16 default"
for v in int4 INT8 ""; do
  expect_error "chatterbox say: error: --cfm-precision must be auto, f32, bf16 or int8, got '$v'" -- \
    "$B" say -m "$T/q.gguf" "Hello." -o "$T/x.wav" --cfm-precision "$v"
done
[ ! -e "$T/x.wav" ] || fail "a bad --cfm-precision wrote output"
kind=$("$B" system-info | sed -n 's/.*bf16_gemm=\([a-z0-9]*\).*/\1/p')
[ -n "$kind" ] || fail "system-info printed no bf16_gemm="
if [ "$kind" = none ]; then
  cmp -s "$T/f32.wav" "$T/bf16.wav" || fail "no bf16 GEMM here: --gemm-precision bf16 must run the f32 GEMM"
  cmp -s "$T/q-f32.wav" "$T/q-bf16.wav" || fail "no bf16 GEMM here: q8_0 bf16 must equal f32"
else
  cmp -s "$T/f32.wav" "$T/bf16.wav" && fail "bf16 GEMM ($kind): --gemm-precision bf16 gave the f32 audio"
  cmp -s "$T/q-f32.wav" "$T/q-bf16.wav" && fail "bf16 GEMM ($kind): q8_0 --gemm-precision f32 gave the bf16 audio"
fi
expect_error "chatterbox serve: error: --gemm-precision must be auto, f32 or bf16, got 'int8'" -- \
  "$B" serve -m "$T/m.gguf" --port 0 --gemm-precision int8

# ---- CBX_DEBUG_*: one error for a bad value, at load and for commands without a model ----
bad_env() {  # bad_env VAR VALUE ALLOWED
  local want="environment variable $1=$2 is not one of $3 (a debugging switch; unset it for the default)"
  expect_error "chatterbox say: error: $want" -- env "$1=$2" "${SAY[@]}" "Hello." -o "$T/bad.wav"
  [ "$(wc -l < "$T/err.txt")" = 1 ] || fail "$1=$2: more than one line: $(cat "$T/err.txt")"
  [ ! -e "$T/bad.wav" ] || fail "output written despite $1=$2"
  expect_error "chatterbox system-info: error: $want" -- env "$1=$2" "$B" system-info
}
bad_env CBX_DEBUG_FORCE_ISA avx9 "generic, avx2, avx512"
bad_env CBX_DEBUG_NO_AMX yes "0, 1"
bad_env CBX_DEBUG_VDPBF16 2 "0, 1"
bad_env CBX_DEBUG_NO_PREPACK true "0, 1"
bad_env CBX_DEBUG_S3GEN_SHARED_ARENA off "0, 1"
bad_env CBX_DEBUG_STREAM_PREFETCH l3 "l1, l2"
# Good values load and synthesise; generic kernels give audio too.
CBX_DEBUG_FORCE_ISA=generic CBX_DEBUG_NO_PREPACK=1 CBX_DEBUG_S3GEN_SHARED_ARENA=0 "${SAY[@]}" "Hello." -o "$T/dbg.wav" \
  2> "$T/err.txt" || fail "say with good CBX_DEBUG_* values: $(cat "$T/err.txt")"
[ "$(wav_samples "$T/dbg.wav")" -gt 0 ] || fail "say with CBX_DEBUG_* values: no audio"
CBX_DEBUG_FORCE_ISA=generic "$B" system-info > "$T/si.txt" || fail "system-info with CBX_DEBUG_FORCE_ISA=generic"
grep -q " active_isa=generic " "$T/si.txt" || fail "CBX_DEBUG_FORCE_ISA=generic: $(cat "$T/si.txt")"

# ---- the old names are not read any more ----
for old in CBX_GEMM CBX_FORCE_ISA CBX_NO_AMX CBX_VDPBF16 CBX_NO_PREPACK CBX_S3GEN_SHARED_ARENA CBX_STREAM_PREFETCH; do
  env "$old=garbage" "${SAY[@]}" "Hello." -o "$T/old.wav" 2> "$T/err.txt" || fail "$old=garbage was read: $(cat "$T/err.txt")"
  cmp -s "$T/old.wav" "$T/default.wav" || fail "$old=garbage changed the audio"
done
echo "PASS"
