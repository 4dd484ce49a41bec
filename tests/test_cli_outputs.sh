#!/bin/bash
# Safe outputs of every writing command (issue 27): a device node given as an output is written
# in place, never replaced; an output that is an input (model, voice, text, reference, by any
# path) is refused before any work; an unwritable output fails before the work; a failing
# --prompt-cache costs a warning, never the WAV; a killed command leaves no temporary file.
# The device node is the test's own (mknod in its temp dir; a FIFO with a reader where mknod is
# not allowed): the system's /dev is never touched.
# Usage: test_cli_outputs.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_cli_outputs.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-cli-outputs

"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
cp "$T/m.gguf" "$T/m.orig"
SAY=("$B" say -m "$T/m.gguf" --max-tokens 20 --threads 2)
espeak-ng -w "$T/ref.wav" "The quick brown fox jumps over the lazy dog, and then it runs far away. It stops by the river, drinks some water and sleeps in the warm sun." 2> /dev/null ||
  sox -n -r 22050 -c 1 "$T/ref.wav" synth 6 sine 220 vol 0.5 || fail "no reference audio"

# Our own null device; without mknod a FIFO drained by cat stands in for it.
NODE="$T/null"
is_node() { [ -c "$NODE" ] || [ -p "$NODE" ]; }
if mknod "$NODE" c 1 3 2> /dev/null; then
  drain() { :; }
else
  mkfifo "$NODE" || fail "mkfifo"
  drain() { (cat "$NODE" > /dev/null &); }
fi
no_temps() { ! ls "$T" | grep -q '\.tmp-' || { ls -la "$T"; fail "temporary files left: $*"; }; }

drain; "${SAY[@]}" "Hello." -o "$NODE" 2> "$T/e1" || { cat "$T/e1"; fail "say -o NODE"; }
is_node || fail "say -o replaced the device node"
drain; "$B" convert "$T/ckpt" -o "$NODE" --type f32 --quiet > /dev/null 2> "$T/e2" || { cat "$T/e2"; fail "convert -o NODE"; }
is_node || fail "convert -o replaced the device node"
drain; "$B" quantize "$T/m.gguf" "$NODE" --type q8_0 --quiet > /dev/null 2> "$T/e3" || { cat "$T/e3"; fail "quantize NODE"; }
is_node || fail "quantize replaced the device node"
drain; "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$NODE" 2> "$T/e4" || { cat "$T/e4"; fail "voice create -o NODE"; }
is_node || fail "voice create -o replaced the device node"
# A device node as the prompt cache: refused with a warning (not a cache), the WAV still written.
"${SAY[@]}" "Hello." -o "$T/pc.wav" --prompt-cache "$NODE" 2> "$T/e5" || { cat "$T/e5"; fail "say --prompt-cache NODE"; }
is_node || fail "--prompt-cache replaced the device node"
grep -q "warning: --prompt-cache $NODE: .*not a regular file" "$T/e5" || { cat "$T/e5"; fail "no prompt-cache warning"; }
[ -s "$T/pc.wav" ] || fail "the WAV was lost to the prompt cache"
no_temps "device outputs"

# An output that is an input: refused before any work, the input unchanged.
ln "$T/m.gguf" "$T/hard.gguf"
ln -s "$T/m.gguf" "$T/soft.gguf"
for o in "$T/m.gguf" "$T/hard.gguf" "$T/soft.gguf"; do
  expect_error "is the model" -- "${SAY[@]}" "Hello." -o "$o"
  expect_error "is the model" -- "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$o"
  expect_error "is the input" -- "$B" quantize "$T/m.gguf" "$o" --type q8_0 --quiet
done
cmp -s "$T/m.gguf" "$T/m.orig" || fail "the model was changed"
expect_error "is the reference audio" -- "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/ref.wav"
echo "Hello from a file." > "$T/text.txt"
cp "$T/text.txt" "$T/text.orig"
expect_error "is the text file" -- "${SAY[@]}" --file "$T/text.txt" -o "$T/text.txt"
cmp -s "$T/text.txt" "$T/text.orig" || fail "the text file was changed"
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/me.voice" 2> /dev/null || fail "voice create"
expect_error "is the voice" -- "${SAY[@]}" --voice "$T/me.voice" "Hello." -o "$T/me.voice"
expect_error "is the checkpoint file" -- "$B" convert "$T/ckpt" -o "$(ls "$T"/ckpt/*.safetensors | head -1)" --quiet
expect_error "is the input" -- "$B" ckpt-dump "$(ls "$T"/ckpt/*.safetensors | head -1)" \
  --save-safetensors "$(ls "$T"/ckpt/*.safetensors | head -1)"
no_temps "refused outputs"

# Unwritable outputs fail before the work: no model load (-v prints it) and no synthesis.
expect_error "cannot create a file in" -- "${SAY[@]}" -v "Hello." -o "$T/no/such/dir/x.wav"
grep -q "loaded" "$T/err.txt" && { cat "$T/err.txt"; fail "the model was loaded before the output was checked"; }
expect_error "is a directory" -- "${SAY[@]}" "Hello." -o "$T"
expect_error "cannot create a file in" -- "$B" convert "$T/ckpt" -o "$T/no/dir/m.gguf" --quiet
expect_error "cannot create a file in" -- "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/no/dir/v.voice"
# An unwritable prompt cache: a warning at the start, the WAV written all the same.
"${SAY[@]}" "Hello." -o "$T/w.wav" --prompt-cache "$T/no/dir/cache.bin" 2> "$T/e6" || { cat "$T/e6"; fail "say with an unwritable prompt cache"; }
grep -q "warning: --prompt-cache" "$T/e6" || { cat "$T/e6"; fail "no warning for an unwritable prompt cache"; }
[ -s "$T/w.wav" ] || fail "no WAV with an unwritable prompt cache"
# The prompt cache and the audio output are two files.
"${SAY[@]}" "Hello." -o "$T/same.wav" --prompt-cache "$T/same.wav" 2> "$T/e7" || { cat "$T/e7"; fail "say, cache = output"; }
grep -q "it is the audio output" "$T/e7" || { cat "$T/e7"; fail "cache = output not warned"; }
[ "$(head -c 4 "$T/same.wav")" = "RIFF" ] || fail "the prompt cache overwrote the audio output"

# A killed say leaves no temporary file and no output: it waits on stdin (text read after the
# outputs are prepared), is killed with SIGTERM, and the temporary file must be gone.
mkfifo "$T/text.fifo"
"${SAY[@]}" -o "$T/killed.wav" < "$T/text.fifo" 2> /dev/null &
pid=$!
exec 3> "$T/text.fifo"  # opens the FIFO: say's stdin is connected and stays open
for _ in $(seq 1 100); do ls "$T" | grep -q 'killed.wav.tmp-' && break; sleep 0.1; done
ls "$T" | grep -q 'killed.wav.tmp-' || fail "say made no temporary output before reading its text"
kill -TERM "$pid"
wait "$pid" 2> /dev/null
exec 3>&-
[ ! -e "$T/killed.wav" ] || fail "a killed say left an output"
no_temps "after SIGTERM"

echo "test_cli_outputs: all checks passed"
