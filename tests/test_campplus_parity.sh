#!/usr/bin/env bash
# CAMPPlus x-vector parity (S3Gen.embed_ref's `embedding`: Kaldi fbank 80 + mean normalisation +
# CAMPPlus) against a PyTorch reference (tests/campplus_reference.py: nn.Conv2d / Conv1d /
# BatchNorm in eval mode on the upstream s3gen_meanflow.safetensors / s3gen.pt; kaldi.fbank
# written out) on tiny synthetic checkpoints (chatterbox-mkckpt --size tiny: head 8 channels,
# init 32, growth 16, 2 layers per block, embedding 64) converted to f32 GGUFs.
# Tolerance: rel. error max|ours - ref| / max|ref| <= 1e-4 on the embedding and on every
# intermediate (fbank, head, tdnn, block1..3, transit1..3, stats; measured ~1e-7 .. 2e-5, the
# fbank's log of small powers being the loosest).
#   1. speech (espeak-ng when installed, else a synthetic voiced signal), 3-5 s: several context
#      segments of 100 frames, the last one partial;
#   2. the network alone on our fbank (--fbank);
#   3. the shortest input: 720 samples = 3 fbank frames -> 2 frames after the tdnn;
#   4. an odd length (4 s + 77 samples) on the Multilingual checkpoint (s3gen.pt);
#   5. 1 and 2 threads give bit-identical x-vectors;
#   6. a reference too short (1 fbank frame) is refused with a message saying so.
# CBX_NO_ESPEAK=1 forces the synthetic signal.
# usage: test_campplus_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-campplus-parity
REF=$SRC/tests/campplus_reference.py
tiny_gguf turbo 21 "$TMP/ck" "$TMP/m.gguf"

SPEECH=synthetic
if [ -z "${CBX_NO_ESPEAK:-}" ] && command -v espeak-ng > /dev/null 2>&1 &&
   espeak-ng -w "$TMP/sp.wav" "A speaker embedding for the flow decoder, taken from the first ten seconds." \
     > /dev/null 2>&1; then
  SPEECH=espeak-ng
fi
"$PY" - "$TMP" "$SPEECH" <<'PYEOF'
import sys, wave
import numpy as np
tmp, speech = sys.argv[1], sys.argv[2]

def voiced(n, seed):
    r = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 180 + 30 * np.sin(2 * np.pi * 1.1 * t)
    ph = 2 * np.pi * np.cumsum(f0) / 16000
    y = sum((0.25 / k) * np.sin(k * ph + 0.5 * k) for k in range(1, 30) if k * 210 < 8000)
    return (y * (0.6 + 0.4 * np.sin(2 * np.pi * 1.7 * t)) + 0.01 * r.standard_normal(n)).astype(np.float32)

if speech == "espeak-ng":
    w = wave.open(f"{tmp}/sp.wav")
    sr = w.getframerate()
    x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64) / 32768
    n = int(len(x) * 16000 / sr)
    sp = np.interp(np.arange(n) * sr / 16000, np.arange(len(x)), x).astype(np.float32)
else:
    sp = voiced(5 * 16000, 1)
np.save(f"{tmp}/speech.npy", sp)
np.save(f"{tmp}/min.npy", voiced(720, 2))
np.save(f"{tmp}/odd.npy", voiced(4 * 16000 + 77, 3))
np.save(f"{tmp}/tiny.npy", voiced(500, 4))
PYEOF

run_case() {  # name, gguf, ckpt dir, input kind (wav|fbank), input
  local name=$1 gguf=$2 ck=$3 kind=$4 in=$5
  mkdir -p "$TMP/$name"
  echo "== $name"
  "$CLI" debug campplus -m "$gguf" --$kind "$in" -o "$TMP/$name/emb.npy" --dump-dir "$TMP/$name" --threads 2
  "$PY" "$REF" compare "$ck" --$kind "$in" --ours "$TMP/$name/emb.npy" --dump-dir "$TMP/$name" --rtol 1e-4
}

echo "== signal: $SPEECH speech"
run_case speech "$TMP/m.gguf" "$TMP/ck" wav "$TMP/speech.npy"
run_case fbank "$TMP/m.gguf" "$TMP/ck" fbank "$TMP/speech/fbank.npy"
run_case min "$TMP/m.gguf" "$TMP/ck" wav "$TMP/min.npy"

echo "== multilingual checkpoint (s3gen.pt)"
tiny_gguf mtl 22 "$TMP/ckm" "$TMP/mtl.gguf"
run_case mtl "$TMP/mtl.gguf" "$TMP/ckm" wav "$TMP/odd.npy"

echo "== 1 vs 2 threads"
"$CLI" debug campplus -m "$TMP/m.gguf" --wav "$TMP/speech.npy" -o "$TMP/emb1.npy" --threads 1
cmp "$TMP/emb1.npy" "$TMP/speech/emb.npy" || { echo "FAIL: 1 and 2 threads differ"; exit 1; }
echo "ok   identical"

echo "== too short"
if out=$("$CLI" debug campplus -m "$TMP/m.gguf" --wav "$TMP/tiny.npy" -o "$TMP/x.npy" 2>&1); then
  echo "FAIL: a 500-sample reference was accepted"; exit 1
fi
grep -q "campplus: reference too short: 500 samples" <<< "$out" || { echo "FAIL: unexpected error: $out"; exit 1; }
echo "ok   $out"
echo "PASS"
