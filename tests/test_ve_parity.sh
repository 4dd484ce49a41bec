#!/usr/bin/env bash
# Voice encoder parity (T3's speaker_emb: embeds_from_wavs + the batch mean) against a PyTorch
# reference (tests/ve_reference.py: nn.LSTM / nn.Linear on the upstream ve.safetensors / ve.pt,
# librosa trim and mel written out) on tiny synthetic checkpoints (chatterbox-mkckpt --size
# tiny: LSTM 40 -> 64 x 3, embedding 64) converted to f32 GGUFs.
# Tolerance: rel. error max|ours - ref| / max|ref| <= 1e-4 on the embedding, the mel and the
# partial embeddings (measured ~1e-7 .. 3e-7); the trimmed sample range must be equal.
#   1. speech (espeak-ng when installed, else a synthetic voiced signal) between quiet stretches
#      that the silence trim cuts, 4-5 s: several partials, every intermediate compared;
#   2. 1 s: one partial, zero-padded to 160 frames;
#   3. the min_coverage threshold: 205 mel frames (last partial covers exactly 0.8: kept, 2
#      partials) and 204 frames (0.79: dropped, 1 partial);
#   4. the Multilingual checkpoint (ve.pt);
#   5. 1 and 2 threads give bit-identical embeddings;
#   6. a reference too short for one mel frame (150 samples) is refused with a message saying so.
# CBX_NO_ESPEAK=1 forces the synthetic signal.
# usage: test_ve_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-ve-parity
REF=$SRC/tests/ve_reference.py
tiny_gguf turbo 11 "$TMP/ck" "$TMP/m.gguf"

# Test signals (16 kHz float32 .npy). Speech: espeak-ng at its own rate, resampled by linear
# interpolation (any voice-like 16 kHz signal will do: both sides read the same samples).
SPEECH=synthetic
if [ -z "${CBX_NO_ESPEAK:-}" ] && command -v espeak-ng > /dev/null 2>&1 &&
   espeak-ng -w "$TMP/sp.wav" "The quick brown fox jumps over the lazy dog, then a voice encoder listens." \
     > /dev/null 2>&1; then
  SPEECH=espeak-ng
fi
"$PY" - "$TMP" "$SPEECH" <<'PYEOF'
import sys, wave
import numpy as np
tmp, speech = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(5)

def voiced(n, seed):
    r = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 120 + 25 * np.sin(2 * np.pi * 0.9 * t)
    ph = 2 * np.pi * np.cumsum(f0) / 16000
    y = sum((0.25 / k) * np.sin(k * ph + 0.3 * k) for k in range(1, 30) if k * 145 < 8000)
    return (y * (0.7 + 0.3 * np.sin(2 * np.pi * 2.1 * t)) + 0.005 * r.standard_normal(n)).astype(np.float32)

if speech == "espeak-ng":
    w = wave.open(f"{tmp}/sp.wav")
    sr = w.getframerate()
    x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64) / 32768
    n = int(len(x) * 16000 / sr)
    core = np.interp(np.arange(n) * sr / 16000, np.arange(len(x)), x).astype(np.float32)
else:
    core = voiced(5 * 16000, 1)
quiet = lambda n: (1e-4 * rng.standard_normal(n)).astype(np.float32)
np.save(f"{tmp}/speech.npy", np.concatenate([quiet(9000), core, quiet(11000)]))
np.save(f"{tmp}/short.npy", voiced(16000, 2))
# A steady signal is never trimmed, so T = 1 + n / 160 mel frames exactly.
np.save(f"{tmp}/cov205.npy", voiced(204 * 160, 3))
np.save(f"{tmp}/cov204.npy", voiced(203 * 160 + 17, 4))
np.save(f"{tmp}/tiny.npy", voiced(150, 5))
PYEOF

run_case() {  # name, gguf, ckpt dir, wav
  local name=$1 gguf=$2 ck=$3 wav=$4
  mkdir -p "$TMP/$name"
  echo "== $name"
  "$CLI" debug ve -m "$gguf" --wav "$wav" -o "$TMP/$name/emb.npy" --dump-dir "$TMP/$name" --threads 2
  "$PY" "$REF" compare "$ck" "$wav" --ours "$TMP/$name/emb.npy" --dump-dir "$TMP/$name" --rtol 1e-4
}

partials() { "$PY" -c "import numpy as np; print(np.load('$1').shape[0])"; }

echo "== signal: $SPEECH speech"
run_case speech "$TMP/m.gguf" "$TMP/ck" "$TMP/speech.npy"
run_case short "$TMP/m.gguf" "$TMP/ck" "$TMP/short.npy"
[ "$(partials "$TMP/short/partials.npy")" = 1 ] || { echo "FAIL: 1 s should give 1 partial"; exit 1; }
run_case cov205 "$TMP/m.gguf" "$TMP/ck" "$TMP/cov205.npy"
[ "$(partials "$TMP/cov205/partials.npy")" = 2 ] || { echo "FAIL: 205 frames should give 2 partials"; exit 1; }
run_case cov204 "$TMP/m.gguf" "$TMP/ck" "$TMP/cov204.npy"
[ "$(partials "$TMP/cov204/partials.npy")" = 1 ] || { echo "FAIL: 204 frames should give 1 partial"; exit 1; }

echo "== multilingual checkpoint (ve.pt)"
tiny_gguf mtl 12 "$TMP/ckm" "$TMP/mtl.gguf"
run_case mtl "$TMP/mtl.gguf" "$TMP/ckm" "$TMP/speech.npy"

echo "== 1 vs 2 threads"
"$CLI" debug ve -m "$TMP/m.gguf" --wav "$TMP/speech.npy" -o "$TMP/emb1.npy" --threads 1
cmp "$TMP/emb1.npy" "$TMP/speech/emb.npy" || { echo "FAIL: 1 and 2 threads differ"; exit 1; }
echo "ok   identical"

echo "== too short"
if out=$("$CLI" debug ve -m "$TMP/m.gguf" --wav "$TMP/tiny.npy" -o "$TMP/x.npy" 2>&1); then
  echo "FAIL: a 150-sample voice was accepted"; exit 1
fi
grep -q "voice encoder: reference too short" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   $out"
echo "PASS"
