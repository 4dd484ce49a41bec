#!/bin/bash
# `chatterbox say` as a person uses it (issue 27), on a tiny synthetic Turbo model: strict flags
# (each reproduction of the issue is an error naming the flag and its range), output formats by
# extension / --format (decoded back with the right length), --lines speaking each line before
# the next is written, --batch, --speed / --pause-ms / --volume / --normalize, -t / -f / -q,
# --file -, --voices, progress and summary, one error prefix.
# Usage: test_say_cli.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_say_cli.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-say-cli
PY=/usr/bin/python3
"$PY" -c "import numpy" 2> /dev/null || { echo "skip: $PY cannot import numpy"; exit 77; }

"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
SAY=("$B" say -m "$T/m.gguf" --max-tokens 30 -t 2)

# samples FILE: mono samples of any audio file, decoded by libsndfile (read_audio).
samples() {
  "$B" debug-frontend --kind decode --in "$1" --out "$T/dec.npy" > /dev/null 2>&1 || fail "cannot decode $1"
  "$PY" -c "import numpy, sys; print(numpy.load(sys.argv[1]).shape[-1])" "$T/dec.npy"
}
# peak FILE: max |sample| as decoded.
peak() {
  "$B" debug-frontend --kind decode --in "$1" --out "$T/dec.npy" > /dev/null 2>&1 || fail "cannot decode $1"
  "$PY" -c "import numpy, sys; print('%.5f' % abs(numpy.load(sys.argv[1])).max())" "$T/dec.npy"
}
near() {  # near A B TOL: |A - B| <= TOL
  local d=$(( $1 - $2 )); d=${d#-}
  [ "$d" -le "$3" ]
}

# ---- strict flags: every reproduction of the issue is an error naming the flag and range ----
bad() {  # bad NEEDLE FLAGS...: say with FLAGS fails, the message holds NEEDLE, no output written
  local needle=$1; shift
  expect_error "$needle" -- "${SAY[@]}" "Hello." -o "$T/bad.wav" "$@"
  [ ! -e "$T/bad.wav" ] || fail "output written despite $*"
  grep -q "^chatterbox say: error: say:" "$T/err.txt" && fail "doubled error prefix: $(cat "$T/err.txt")"
  [ "$(grep -c "error" "$T/err.txt")" -eq 1 ] || { cat "$T/err.txt"; fail "not one error line for $*"; }
}
bad "temperature (--temperature) must be in (0, 10], got -1" --temperature -1
bad "--temperature must be a finite decimal number, got 'nan'" --temperature nan
bad "top_p (--top-p) must be in (0, 1], got -0.5" --top-p -0.5
bad "top_k (--top-k) must be in [0, 100000], got -5" --top-k -5
bad "repetition_penalty (--repetition-penalty)" --repetition-penalty -2
bad "cfg_weight (--cfg-weight)" --cfg-weight -1
bad "exaggeration (--exaggeration)" --exaggeration -3
bad "--seed" --seed abc
bad "--seed" --seed -5
bad "--threads" --threads 1e12
bad "--threads" --threads 1.7
bad "n_threads (--threads) must be in [1, 1024], got 0" --threads 0
bad "max_new_tokens (--max-tokens)" --max-tokens 0
bad "max_chunk_tokens (--chunk-tokens)" --chunk-tokens 0
bad "--speed must be in [0.5, 2]" --speed 3
bad "--pause-ms" --pause-ms -1
bad "volume (--volume)" --volume 0
bad "unknown option '--bogus'" --bogus
bad "English only" --lang fr
expect_error "its extension says mp3 but --format says wav" -- "${SAY[@]}" "Hello." -o "$T/x.mp3" --format wav
expect_error ".xyz" -- "${SAY[@]}" "Hello." -o "$T/x.xyz"
[ ! -e "$T/x.xyz" ] && [ ! -e "$T/x.mp3" ] || fail "output written for a bad format"
expect_error "--normalize needs the whole audio" -- "${SAY[@]}" "Hello." -o - --normalize
# The C API rejects the same values with the same message (tests/test_c_api.c prints each one).
if [ -x "$BUILD/bin/test_c_api" ]; then
  "$BUILD/bin/test_c_api" "$BUILD" > "$T/capi.txt" 2>&1 || { tail "$T/capi.txt"; fail "test_c_api"; }
  for fv in "--temperature -1" "--top-p -0.5" "--top-k -5" "--repetition-penalty -2" "--cfg-weight -1" \
            "--exaggeration -3" "--chunk-tokens 0" "--threads 0" "--max-tokens 0" "--lang de"; do
    # shellcheck disable=SC2086
    "${SAY[@]}" "Hello." -o "$T/bad.wav" $fv 2> "$T/cli.err" && fail "accepted $fv"
    msg=$(sed -n 's/^chatterbox say: error: //p' "$T/cli.err")
    grep -qxF "invalid: $msg" "$T/capi.txt" || { cat "$T/cli.err"; fail "the C API does not say '$msg' for $fv"; }
  done
fi
# Language codes in any case.
"${SAY[@]}" "Hello." -o "$T/en.wav" --seed 3 --lang en -q || fail "--lang en"
"${SAY[@]}" "Hello." -o "$T/EN.wav" --seed 3 --lang EN -q || fail "--lang EN"
"${SAY[@]}" "Hello." -o "$T/En.wav" --seed 3 --lang En -q || fail "--lang En"
cmp -s "$T/en.wav" "$T/EN.wav" && cmp -s "$T/en.wav" "$T/En.wav" || fail "--lang case changed the audio"

# ---- threads from the machine: the default follows the affinity mask; more than that warns ----
if command -v taskset > /dev/null && taskset -c 0 true 2> /dev/null; then
  taskset -c 0 "$B" say -m "$T/m.gguf" --max-tokens 5 "Hi." -o "$T/t.wav" -v 2> "$T/aff.err" || fail "taskset say"
  grep -q "1 threads" "$T/aff.err" || { cat "$T/aff.err"; fail "default threads ignore the affinity mask"; }
  taskset -c 0 "$B" say -m "$T/m.gguf" --max-tokens 5 -t 2 "Hi." -o "$T/t.wav" 2> "$T/aff2.err" || fail "taskset -t 2"
  grep -q "warning: n_threads (--threads) 2 is more than the 1 CPU" "$T/aff2.err" || { cat "$T/aff2.err"; fail "no warning for more threads than CPUs"; }
fi

# ---- formats: by extension, decoded back with the right length ----
"${SAY[@]}" "Hello world." -o "$T/ref.wav" --seed 7 -q || fail "say wav"
nref=$(samples "$T/ref.wav")
[ "$nref" -gt 0 ] || fail "empty WAV"
for spec in "flac 0" "ogg 0" "opus 1920" "mp3 2304"; do
  set -- $spec
  "${SAY[@]}" "Hello world." -o "$T/out.$1" --seed 7 -q || fail "say .$1"
  m=$(samples "$T/out.$1")
  near "$m" "$nref" "$2" || fail ".$1 decodes to $m samples, the WAV to $nref (tolerance $2)"
done
"${SAY[@]}" "Hello world." -o "$T/f.wav" --seed 7 --float -q || fail "say --float"
[ "$(samples "$T/f.wav")" -eq "$nref" ] || fail "float WAV length"
"${SAY[@]}" "Hello world." -o "$T/raw.bin" --format pcm --seed 7 -q || fail "say --format pcm"
[ $(( $(stat -c %s "$T/raw.bin") / 2 )) -eq "$nref" ] || fail "--format pcm length"
# -o - raw PCM (as before) and --format wav -o - (a streamable WAV: unknown-length header).
"${SAY[@]}" "Hello world." -o - --seed 7 -q > "$T/stdout.pcm" || fail "say -o -"
cmp -s "$T/stdout.pcm" "$T/raw.bin" || fail "-o - differs from --format pcm"
"${SAY[@]}" "Hello world." -o - --format wav --seed 7 -q > "$T/stream.wav" || fail "say --format wav -o -"
[ "$(head -c 4 "$T/stream.wav")" = "RIFF" ] || fail "streamed WAV has no RIFF header"
[ "$(od -An -tx1 -j4 -N4 "$T/stream.wav" | tr -d ' ')" = "ffffffff" ] || fail "streamed WAV size is not 'unknown'"
[ "$(samples "$T/stream.wav")" -eq "$nref" ] || fail "streamed WAV length"

# ---- --stream: audio while T3 decodes; the same length as without; -v gives the time to first audio ----
"${SAY[@]}" "Hello world." -o "$T/st.wav" --seed 7 --stream -v 2> "$T/st.err" || { cat "$T/st.err"; fail "--stream"; }
[ "$(samples "$T/st.wav")" -eq "$nref" ] || fail "--stream changed the length"
grep -q "ttfa_ms=[0-9.]* (call to first audio, streamed)" "$T/st.err" || { cat "$T/st.err"; fail "no ttfa with -v"; }
"${SAY[@]}" "Hello world." -o - --seed 7 --stream -q > "$T/st.pcm" || fail "--stream -o -"
[ $(( $(stat -c %s "$T/st.pcm") / 2 )) -eq "$nref" ] || fail "--stream -o - length"

# ---- -f, --file -, -q, summary, progress ----
echo "Hello world." > "$T/t.txt"
"${SAY[@]}" -f "$T/t.txt" -o "$T/f1.wav" --seed 7 -q 2> "$T/q.err" || fail "-f"
cmp -s "$T/f1.wav" "$T/ref.wav" || fail "-f gave other audio"
grep -q "s of audio in\|chunk 1/1" "$T/q.err" && { cat "$T/q.err"; fail "-q still printed a summary or progress"; }
"${SAY[@]}" -f - -o "$T/f2.wav" --seed 7 < "$T/t.txt" 2> "$T/s.err" || fail "--file -"
cmp -s "$T/f2.wav" "$T/ref.wav" || fail "--file - gave other audio"
grep -q "s of audio in .* (RTF .*real time) -> $T/f2.wav" "$T/s.err" || { cat "$T/s.err"; fail "no summary"; }
grep -q "chunk 1/1" "$T/s.err" && fail "progress printed to a non-terminal"
"${SAY[@]}" "Hello world." -o "$T/p.wav" --progress 2> "$T/p.err" || fail "--progress"
grep -q "chunk 1/1, [0-9]* speech tokens" "$T/p.err" || { cat "$T/p.err"; fail "no progress line with --progress"; }
# the model load's progress on the same line: rising percentages ending at 100%
tr '\r' '\n' < "$T/p.err" | sed -n 's/^say: loading .*m\.gguf *\([0-9]*\)%.*/\1/p' > "$T/load.pct"
[ "$(wc -l < "$T/load.pct")" -ge 2 ] || { cat "$T/p.err"; fail "no load progress with --progress"; }
sort -n -c "$T/load.pct" || fail "load progress went down: $(tr '\n' ' ' < "$T/load.pct")"
[ "$(tail -n 1 "$T/load.pct")" = 100 ] || fail "load progress did not end at 100%"
grep -q "loading" "$T/s.err" && fail "load progress printed to a non-terminal"
# audio on stdout: the progress stays on stderr, stdout holds the same samples as with -q
"${SAY[@]}" "Hello world." -o - --seed 7 --progress > "$T/stdout-p.pcm" 2> /dev/null || fail "-o - --progress"
cmp -s "$T/stdout-p.pcm" "$T/stdout.pcm" || fail "stdout audio differs with --progress"

# ---- prosody: speed, pause, volume, normalize ----
LONG="The first sentence is here. A second one follows it! Is this the third? Yes, and the fourth one ends it."
"${SAY[@]}" "$LONG" --chunk-tokens 12 -o "$T/p0.wav" --seed 3 --pause-ms 0 -q || fail "pause 0"
"${SAY[@]}" "$LONG" --chunk-tokens 12 -o "$T/p5.wav" --seed 3 --pause-ms 500 -v 2> "$T/p5.err" || fail "pause 500"
chunks=$(sed -n 's/.*chunks=\([0-9]*\) .*/\1/p' "$T/p5.err")
[ "$chunks" -ge 2 ] || fail "long text not chunked"
[ $(( $(samples "$T/p5.wav") - $(samples "$T/p0.wav") )) -eq $(( (chunks - 1) * 12000 )) ] ||
  fail "--pause-ms 500 did not add 12000 samples between each of $chunks chunks"
"${SAY[@]}" "Hello world." -o "$T/fast.wav" --seed 7 --speed 1.5 -q || fail "--speed 1.5"
fast=$(samples "$T/fast.wav")
near "$fast" $(( nref * 2 / 3 )) $(( nref / 50 + 2 )) || fail "--speed 1.5: $fast samples, not ~2/3 of $nref"
"${SAY[@]}" "Hello world." -o "$T/half.wav" --seed 7 --volume 0.5 --float -q || fail "--volume 0.5"
"$PY" - "$(peak "$T/f.wav")" "$(peak "$T/half.wav")" << 'EOF' || fail "--volume 0.5 did not halve the samples"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(b - a / 2) < 1e-4 else 1)
EOF
"${SAY[@]}" "Hello world." -o "$T/db.wav" --seed 7 --volume -6dB --float -q || fail "--volume -6dB"
"$PY" - "$(peak "$T/f.wav")" "$(peak "$T/db.wav")" << 'EOF' || fail "--volume -6dB is not a gain of 10^(-6/20)"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(b - a * 10 ** (-6 / 20)) < 1e-4 else 1)
EOF
"${SAY[@]}" "Hello world." -o "$T/norm.wav" --seed 7 --normalize --float -q || fail "--normalize"
"$PY" - "$(peak "$T/norm.wav")" << 'EOF' || fail "--normalize: the peak is not -1 dBFS"
import sys
sys.exit(0 if abs(float(sys.argv[1]) - 10 ** (-1 / 20)) < 1e-3 else 1)
EOF

# ---- voices directory ----
/usr/bin/python3 - "$T/refvoice.wav" << 'EOF'
import math, struct, sys, wave
rate, n = 24000, 24000 * 7
fr = bytearray()
for i in range(n):
    t = i / rate
    x = (0.5 + 0.5 * math.sin(2 * math.pi * 4 * t)) * sum(0.3 / k * math.sin(2 * math.pi * 130 * k * t) for k in range(1, 6))
    fr += struct.pack('<h', int(x * 20000))
with wave.open(sys.argv[1], 'wb') as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate); w.writeframes(bytes(fr))
EOF
mkdir -p "$T/voices"
"$B" voice create "$T/refvoice.wav" -m "$T/m.gguf" -o "$T/voices/anna.voice" 2> /dev/null || fail "voice create"
"${SAY[@]}" "Hello." --voices "$T/voices" --voice anna -o "$T/anna.wav" --seed 1 -q || fail "--voice NAME"
"${SAY[@]}" "Hello." --voice "$T/voices/anna.voice" -o "$T/anna2.wav" --seed 1 -q || fail "--voice FILE"
cmp -s "$T/anna.wav" "$T/anna2.wav" || fail "--voices DIR --voice NAME is not DIR/NAME.voice"
expect_error "voices: anna" -- "${SAY[@]}" "Hello." --voices "$T/voices" --voice bob -o "$T/x.wav"

# ---- --batch: plain and JSON lines, the model loaded once, one file each ----
cat > "$T/batch.txt" << EOF
Hello world.

{"text": "Hello world.", "seed": 7, "out": "named.flac"}
{"text": "Hello.", "voice": "anna", "seed": 1, "lang": "EN"}
EOF
"${SAY[@]}" --batch "$T/batch.txt" --voices "$T/voices" -o "$T/bdir" --seed 7 2> "$T/b.err" || { cat "$T/b.err"; fail "--batch"; }
cmp -s "$T/bdir/0001.wav" "$T/ref.wav" || fail "batch line 1 differs from the same say"
[ "$(samples "$T/bdir/named.flac")" -eq "$nref" ] || fail "batch \"out\" flac"
cmp -s "$T/bdir/0004.wav" "$T/anna.wav" || fail "batch voice / seed line differs from the same say"
grep -q "batch: 3 of 3 files written" "$T/b.err" || { cat "$T/b.err"; fail "batch summary"; }
printf '{"text": "x", "colour": "red"}\n' > "$T/badbatch.txt"
expect_error "badbatch.txt:1: unknown key \"colour\"" -- "${SAY[@]}" --batch "$T/badbatch.txt" -o "$T/bdir2"
printf 'Hello.\n{"text": "Hi.", "seed": -1}\n' > "$T/badbatch.txt"
expect_error "badbatch.txt:2: \"seed\" must be" -- "${SAY[@]}" --batch "$T/badbatch.txt" -o "$T/bdir2"
printf 'Hello.\n{"text": "Hi.", "out": "a.wav"}\n{"text": "Ho.", "out": "a.wav"}\n' > "$T/badbatch.txt"
expect_error "also line 2's" -- "${SAY[@]}" --batch "$T/badbatch.txt" -o "$T/bdir2"
[ -z "$(ls "$T/bdir2" 2> /dev/null)" ] || fail "a refused batch wrote files"

# ---- --lines: each line spoken before the next is written (order of events, no timing) ----
mkfifo "$T/lines.fifo"
"${SAY[@]}" --lines -o - --seed 7 -q < "$T/lines.fifo" > "$T/lines.pcm" 2> "$T/lines.err" &
pid=$!
exec 3> "$T/lines.fifo"
echo "Hello world." >&3
seen=no
for _ in $(seq 1 600); do  # bounded: at most ~60 s for the first line's audio
  if [ -s "$T/lines.pcm" ]; then seen=yes; break; fi
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
echo "Second line here." >&3
exec 3>&-
wait "$pid" || { cat "$T/lines.err"; fail "say --lines failed"; }
[ "$seen" = yes ] || fail "no audio on stdout before the second line was written"
first=$(stat -c %s "$T/raw.bin")
[ "$(stat -c %s "$T/lines.pcm")" -gt "$first" ] || fail "the second line was not spoken"
head -c "$first" "$T/lines.pcm" | cmp -s - "$T/raw.bin" || fail "the first line's audio differs from say's"
printf 'Hello world.\n\nSecond line here.\n' | "${SAY[@]}" --lines -o "$T/lines.wav" --seed 7 -q || fail "--lines to a file"
[ "$(samples "$T/lines.wav")" -eq $(( $(stat -c %s "$T/lines.pcm") / 2 )) ] || fail "--lines file != stream"

echo "test_say_cli: all checks passed"
