#!/bin/bash
# Voice cloning end to end on tiny synthetic models: `chatterbox voice create / info` and
# `say --voice` with a stereo 44.1 kHz reference (espeak-ng + sox when present, else a synthetic
# voiced signal): deterministic per seed, a saved .voice gives byte-identical audio to the
# reference itself, a cloned voice differs from the built-in one; bad input (too short, silent,
# clipped, corrupt, unsupported, a voice of the wrong variant, a model given as a voice).
# Usage: test_voice.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_voice.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-voice-sh

# synth_wav OUT SECONDS RATE CHANNELS KIND: 16-bit WAV from Python's standard library (no sox
# needed). KIND: voice (a harmonic tone with vibrato and syllable-like envelope), silent, clipped.
synth_wav() {
  /usr/bin/python3 - "$@" << 'EOF'
import math, struct, sys, wave
out, secs, rate, ch, kind = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
n = int(secs * rate)
frames = bytearray()
phase = 0.0
for i in range(n):
    t = i / rate
    f0 = 120 + 20 * math.sin(2 * math.pi * 3 * t)
    phase += 2 * math.pi * f0 / rate
    env = 0.5 + 0.5 * math.sin(2 * math.pi * 4 * t)
    x = env * sum(0.3 / k * math.sin(k * phase) for k in range(1, 8))
    if kind == "silent":
        x = 0.0
    elif kind == "clipped":
        x = max(-1.0, min(1.0, 8 * x))
    v = int(max(-32767, min(32767, round(x * 32767))))
    frames += struct.pack('<h', v) * ch
with wave.open(out, 'wb') as w:
    w.setnchannels(ch); w.setsampwidth(2); w.setframerate(rate); w.writeframes(bytes(frames))
EOF
}

"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/turbo" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/turbo" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert turbo"

# The reference: stereo, 44.1 kHz, about 8 s.
if command -v espeak-ng > /dev/null && command -v sox > /dev/null; then
  espeak-ng -w "$T/speech.wav" "Hello there. This is a reference recording for the voice cloning test. \
It is longer than five seconds, so I keep on talking for a little while longer." || fail "espeak-ng"
  sox -R "$T/speech.wav" -r 44100 -c 2 "$T/ref.wav" || fail "sox"  # -R: the same dither every run
  echo "reference: espeak-ng speech"
else
  synth_wav "$T/ref.wav" 8 44100 2 voice || fail "synthetic reference"
  echo "reference: synthetic voiced signal (espeak-ng or sox missing)"
fi
ch=$(/usr/bin/python3 -c "import wave,sys; w=wave.open(sys.argv[1]); print(w.getnchannels(), w.getframerate())" "$T/ref.wav")
[ "$ch" = "2 44100" ] || fail "reference is not stereo 44.1 kHz ($ch)"

SAY=("$B" say -m "$T/m.gguf" --max-tokens 30 --threads 2)
TEXT="Hello world."

# voice create / info.
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/a.voice" --threads 2 -v 2> "$T/create.err" ||
  { cat "$T/create.err"; fail "voice create"; }
for k in decode_ms= resample_24k_ms= loudness_ms= ve_ms= campplus_ms= s3tok_t3_ms= s3tok_s3gen_ms= clone_ms=; do
  grep -qF "$k" "$T/create.err" || { cat "$T/create.err"; fail "voice create -v lacks $k"; }
done
[ "$(head -c 4 "$T/a.voice")" = "GGUF" ] || fail "a.voice is not a GGUF file"
"$B" voice info "$T/a.voice" -m "$T/m.gguf" > "$T/info.txt" || { cat "$T/info.txt"; fail "voice info"; }
for k in "variant:            turbo" "source:             ref.wav" "44100 Hz, 2 channel(s)" "compatible" \
  "prompt_feat:        [" "LUFS"; do
  grep -qF "$k" "$T/info.txt" || { cat "$T/info.txt"; fail "voice info lacks '$k'"; }
done
"$B" voice info "$T/m.gguf" | grep -qF "source:             built-in" || fail "voice info MODEL (built-in voice)"
# A second build of the same reference gives the same file (deterministic conditionals).
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/a2.voice" --threads 2 2> /dev/null || fail "voice create 2"
cmp -s "$T/a.voice" "$T/a2.voice" || fail "two builds of the same reference differ"

# Options: no loudness normalisation (gain 1, other conditionals), a stored exaggeration.
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/n.voice" --no-norm-loudness --exaggeration 0.7 2> /dev/null ||
  fail "voice create --no-norm-loudness --exaggeration"
"$B" voice info "$T/n.voice" > "$T/ninfo.txt" || fail "voice info n.voice"
grep -q "gain 1.0000 (+0.00 dB)" "$T/ninfo.txt" || { cat "$T/ninfo.txt"; fail "--no-norm-loudness applied a gain"; }
grep -q "emotion_adv:        0.7" "$T/ninfo.txt" || { cat "$T/ninfo.txt"; fail "--exaggeration not stored"; }
grep -q "gain 1.0000" "$T/info.txt" && fail "the default build applied no loudness gain"
cmp -s "$T/a.voice" "$T/n.voice" && fail "--no-norm-loudness gave the same voice"
expect_error "max_seconds (--max-seconds) must be in [10, 600], got 5" -- \
  "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/x.voice" --max-seconds 5
expect_error "exaggeration (--exaggeration) must be in [0, 100], got -2" -- \
  "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/x.voice" --exaggeration -2
expect_error "n_threads (--threads) must be in [1, 1024], got 0" -- \
  "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/x.voice" --threads 0
expect_error "--threads must be an integer, got '1.7'" -- \
  "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/x.voice" --threads 1.7

# say --voice: deterministic per seed; .voice and REF byte-identical; differs from the built-in voice.
"${SAY[@]}" "$TEXT" -o "$T/r1.wav" --seed 5 --voice "$T/ref.wav" 2> "$T/r1.err" || { cat "$T/r1.err"; fail "say --voice REF"; }
"${SAY[@]}" "$TEXT" -o "$T/r2.wav" --seed 5 --voice "$T/ref.wav" 2> /dev/null || fail "say --voice REF again"
cmp -s "$T/r1.wav" "$T/r2.wav" || fail "say --voice REF is not deterministic"
"${SAY[@]}" "$TEXT" -o "$T/v1.wav" --seed 5 --voice "$T/a.voice" 2> /dev/null || fail "say --voice .voice"
cmp -s "$T/r1.wav" "$T/v1.wav" || fail "say --voice NAME.voice and --voice REF differ"
"${SAY[@]}" "$TEXT" -o "$T/b1.wav" --seed 5 2> /dev/null || fail "say (built-in voice)"
cmp -s "$T/r1.wav" "$T/b1.wav" && fail "the cloned voice gave the built-in voice's audio"
"${SAY[@]}" "$TEXT" -o "$T/r3.wav" --seed 6 --voice "$T/a.voice" 2> /dev/null || fail "say seed 6"
cmp -s "$T/r1.wav" "$T/r3.wav" && fail "different seeds gave identical audio"
size=$(stat -c %s "$T/r1.wav")
[ "$size" -gt 44 ] || fail "empty WAV"

# Bad input.
synth_wav "$T/short.wav" 3 44100 2 voice || fail "short wav"
expect_error "short.wav" "3.00 s long" "more than 5.0 s" -- "$B" voice create "$T/short.wav" -m "$T/m.gguf" -o "$T/x.voice"
expect_error "short.wav" "3.00 s long" -- "${SAY[@]}" "$TEXT" -o "$T/x.wav" --voice "$T/short.wav"
synth_wav "$T/silent.wav" 8 22050 1 silent || fail "silent wav"
expect_error "silent.wav" "silent" "no voice to clone" -- "$B" voice create "$T/silent.wav" -m "$T/m.gguf" -o "$T/x.voice"
synth_wav "$T/clipped.wav" 8 16000 1 clipped || fail "clipped wav"
"$B" voice create "$T/clipped.wav" -m "$T/m.gguf" -o "$T/c.voice" 2> "$T/clip.err" || { cat "$T/clip.err"; fail "clipped reference refused"; }
grep -q "warning: clipped.wav: .*clipped" "$T/clip.err" || { cat "$T/clip.err"; fail "no clipping warning"; }
head -c 3000 /dev/urandom > "$T/corrupt.wav"
expect_error "corrupt.wav" -- "$B" voice create "$T/corrupt.wav" -m "$T/m.gguf" -o "$T/x.voice"
echo "this is not audio" > "$T/notes.txt"
expect_error "notes.txt" -- "${SAY[@]}" "$TEXT" -o "$T/x.wav" --voice "$T/notes.txt"
expect_error "missing.wav" -- "$B" voice create "$T/missing.wav" -m "$T/m.gguf" -o "$T/x.voice"
expect_error "not a voice file" -- "${SAY[@]}" "$TEXT" -o "$T/x.wav" --voice "$T/m.gguf"
expect_error "is a GGUF file, not reference audio" -- "$B" voice create "$T/a.voice" -m "$T/m.gguf" -o "$T/x.voice"
head -c 200 "$T/a.voice" > "$T/cut.voice"
expect_error "cut.voice" -- "${SAY[@]}" "$TEXT" -o "$T/x.wav" --voice "$T/cut.voice"
[ ! -e "$T/x.wav" ] || fail "output written after a voice error"
[ ! -e "$T/x.voice" ] || fail "a .voice written after an error"

# A Multilingual voice on a Turbo model (and the reverse) is refused.
"$MK" --variant mtl --size tiny --seed 1 --threads 1 "$T/mtl" > /dev/null 2>&1 || fail "mkckpt mtl"
"$B" convert "$T/mtl" -o "$T/mtl.gguf" --type f32 --quiet > /dev/null || fail "convert mtl"
"$B" voice create "$T/ref.wav" -m "$T/mtl.gguf" -o "$T/mtl.voice" --threads 2 2> "$T/mtl.err" ||
  { cat "$T/mtl.err"; fail "voice create (mtl)"; }
"$B" voice info "$T/mtl.voice" | grep -q "variant:            mtl" || fail "mtl voice info"
# Multilingual prompts: at most 150 T3 tokens (6 s).
p=$("$B" voice info "$T/mtl.voice" | sed -n 's/^cond_prompt_tokens: \[\([0-9]*\)\].*/\1/p')
[ -n "$p" ] && [ "$p" -le 150 ] || fail "mtl voice has $p T3 prompt tokens (max 150)"
expect_error "built for a mtl model" "turbo model" -- "${SAY[@]}" "$TEXT" -o "$T/x.wav" --voice "$T/mtl.voice"
# Multilingual: say --voice with the .voice and with the reference give the same audio.
MSAY=("$B" say -m "$T/mtl.gguf" --lang fr --max-tokens 10 --threads 2)
"${MSAY[@]}" "Bonjour." -o "$T/m1.wav" --seed 4 --voice "$T/mtl.voice" 2> "$T/m1.err" ||
  { cat "$T/m1.err"; fail "say --voice (mtl)"; }
"${MSAY[@]}" "Bonjour." -o "$T/m2.wav" --seed 4 --voice "$T/ref.wav" 2> /dev/null || fail "say --voice REF (mtl)"
cmp -s "$T/m1.wav" "$T/m2.wav" || fail "mtl: say --voice NAME.voice and --voice REF differ"
"${MSAY[@]}" "Bonjour." -o "$T/m3.wav" --seed 4 2> /dev/null || fail "say (mtl built-in voice)"
cmp -s "$T/m1.wav" "$T/m3.wav" && fail "mtl: the cloned voice gave the built-in voice's audio"
expect_error "built for a turbo model" "mtl model" -- "${MSAY[@]}" "Bonjour." -o "$T/x.wav" --voice "$T/a.voice"
expect_error "built for a turbo model" -- "$B" voice info "$T/a.voice" -m "$T/mtl.gguf"

echo "test_voice: OK"
