#!/bin/bash
# `chatterbox say` end to end on tiny synthetic Turbo and Nano models: determinism per seed, WAV / raw PCM
# output, text from argument / --file / stdin, text errors, a Multilingual model without --lang, long
# text split into chunks, --no-repack giving the same audio.
# Usage: test_say.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_say.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-say-sh

# Turbo, then Nano (Turbo's pipeline with a GPT-2 small T3), each in its own directory D.
for V in turbo nano; do
  D=$T/$V
  mkdir -p "$D"
  echo "== $V"
  "$MK" --variant "$V" --size tiny --seed 1 --threads 1 "$D/ckpt" > /dev/null 2>&1 || fail "mkckpt $V"
  "$B" convert "$D/ckpt" -o "$D/m.gguf" --type f32 --quiet > /dev/null || fail "convert $V"
  # Random weights rarely sample EOS: cap each generation so the test stays short.
  SAY=("$B" say -m "$D/m.gguf" --max-tokens 40 --threads 2)

  "$B" say --help | grep -q "NOT ported" || fail "--help does not mention the watermark"

  "${SAY[@]}" "Hello world." -o "$D/a.wav" --seed 7 2> "$D/a.err" || { cat "$D/a.err"; fail "say a"; }
  "${SAY[@]}" "Hello world." -o "$D/b.wav" --seed 7 2> /dev/null || fail "say b"
  cmp -s "$D/a.wav" "$D/b.wav" || fail "same seed gave different WAVs"
  "${SAY[@]}" "Hello world." -o "$D/c.wav" --seed 8 2> /dev/null || fail "say c"
  cmp -s "$D/a.wav" "$D/c.wav" && fail "different seeds gave identical WAVs"
  "${SAY[@]}" "Hello world." -o "$D/t1.wav" --seed 7 --threads 1 2> /dev/null || fail "say 1 thread"
  # Every op splits its work so that the bits do not depend on the thread count.
  cmp -s "$D/a.wav" "$D/t1.wav" || fail "1 and 2 threads gave different WAVs"
  # Flow, CFM and HiFT share one arena for their per-call buffers; with their own the audio is the same.
  CBX_DEBUG_S3GEN_SHARED_ARENA=0 "${SAY[@]}" "Hello world." -o "$D/own.wav" --seed 7 2> /dev/null || fail "say, own arenas"
  cmp -s "$D/a.wav" "$D/own.wav" || fail "the shared S3Gen arena changed the audio"
  # --no-repack (no planar decode copies of Q4_0 / Q8_0 matrices) gives the same bytes.
  for q in q4_0 q8_0; do
    "$B" convert "$D/ckpt" -o "$D/$q.gguf" --type $q --quiet > /dev/null || fail "convert $V $q"
    "$B" say -m "$D/$q.gguf" --max-tokens 40 --threads 2 "Hello world." -o "$D/$q.wav" --seed 7 2> /dev/null ||
      fail "say $q"
    "$B" say -m "$D/$q.gguf" --max-tokens 40 --threads 2 --no-repack "Hello world." -o "$D/${q}_nr.wav" --seed 7 \
      2> /dev/null || fail "say $q --no-repack"
    cmp -s "$D/$q.wav" "$D/${q}_nr.wav" || fail "$q: --no-repack changed the audio"
  done

  [ "$(head -c 4 "$D/a.wav")" = "RIFF" ] || fail "not a RIFF file"
  size=$(stat -c %s "$D/a.wav")
  n=$(( (size - 44) / 2 ))
  [ $n -gt 0 ] && [ $((n % 960)) -eq 0 ] || fail "WAV holds $n samples, not a positive multiple of 960"
  grep -q "warning: 1 of 1 text chunks reached the 41 speech-token limit" "$D/a.err" ||
    { cat "$D/a.err"; fail "hitting the token limit was not reported"; }

  # Raw PCM on stdout = the WAV's data; text from stdin and --file.
  "${SAY[@]}" "Hello world." -o - --seed 7 > "$D/a.pcm" 2> /dev/null || fail "say -o -"
  tail -c +45 "$D/a.wav" | cmp -s - "$D/a.pcm" || fail "raw PCM differs from the WAV data"
  echo "Hello world." | "${SAY[@]}" -o "$D/d.wav" --seed 7 2> /dev/null || fail "say from stdin"
  cmp -s "$D/a.wav" "$D/d.wav" || fail "stdin text gave different audio"
  printf 'Hello\n  world.' > "$D/text.txt"
  "${SAY[@]}" --file "$D/text.txt" -o "$D/e.wav" --seed 7 2> /dev/null || fail "say --file"
  cmp -s "$D/a.wav" "$D/e.wav" || fail "--file text gave different audio"

  # Text starting with '-' after --.
  "${SAY[@]}" -o "$D/dash.wav" -- "-5 degrees outside." 2> /dev/null || fail "say -- TEXT"
  [ -s "$D/dash.wav" ] || fail "say -- TEXT wrote nothing"

  # Verbose timings.
  "${SAY[@]}" "Hello world." -o "$D/v.wav" -v 2> "$D/v.err" || fail "say -v"
  for k in chunks=1 t3_prefill_ms= t3_decode_ms= flow_ms= cfm_ms= hift_ms= rtf= "watermark: none"; do
    grep -qF "$k" "$D/v.err" || { cat "$D/v.err"; fail "-v output lacks $k"; }
  done

  # Text errors.
  expect_error "empty" -- "${SAY[@]}" "" -o "$D/x.wav"
  expect_error "empty" -- "${SAY[@]}" "   " -o "$D/x.wav"
  expect_error "invalid UTF-8 at byte 2" -- "${SAY[@]}" $'ab\xffcd' -o "$D/x.wav"
  [ ! -e "$D/x.wav" ] || fail "output written after a text error"
  expect_error "-m MODEL.gguf" -- "$B" say "Hi." -o "$D/x.wav"
  expect_error "missing.gguf" -- "$B" say -m "$D/missing.gguf" "Hi." -o "$D/x.wav"

  # Long text: split at sentence boundaries into chunks of at most --chunk-tokens text tokens.
  LONG="The first sentence is here. A second one follows it! Is this the third? Yes, and the fourth one ends it."
  "${SAY[@]}" "$LONG" -o "$D/long1.wav" --seed 3 -v 2> "$D/long1.err" || { cat "$D/long1.err"; fail "long, one chunk"; }
  grep -q "chunks=1 " "$D/long1.err" || { cat "$D/long1.err"; fail "default chunking split a short text"; }
  "${SAY[@]}" "$LONG" -o "$D/long.wav" --seed 3 --chunk-tokens 12 -v 2> "$D/long.err" ||
    { cat "$D/long.err"; fail "long text"; }
  chunks=$(sed -n 's/.*chunks=\([0-9]*\) .*/\1/p' "$D/long.err")
  [ -n "$chunks" ] && [ "$chunks" -ge 2 ] || { cat "$D/long.err"; fail "long text was not split (chunks=$chunks)"; }
  lsize=$(stat -c %s "$D/long.wav")
  ln=$(( (lsize - 44) / 2 ))
  samples=$(sed -n 's/.*samples=\([0-9]*\) .*/\1/p' "$D/long.err")
  # The default --pause-ms 200 puts 4800 samples of silence between chunks.
  [ "$ln" = $(( samples + (chunks - 1) * 4800 )) ] ||
    fail "long WAV has $ln samples, -v reported $samples for $chunks chunks (+ 200 ms pauses)"
  [ $((ln % 960)) -eq 0 ] || fail "joined audio is not whole tokens"
  "${SAY[@]}" "$LONG" -o "$D/long2.wav" --seed 3 --chunk-tokens 12 2> /dev/null || fail "long text again"
  cmp -s "$D/long.wav" "$D/long2.wav" || fail "long text is not deterministic"
  CBX_DEBUG_S3GEN_SHARED_ARENA=0 "${SAY[@]}" "$LONG" -o "$D/long_own.wav" --seed 3 --chunk-tokens 12 2> /dev/null ||
    fail "long text, own arenas"
  cmp -s "$D/long.wav" "$D/long_own.wav" || fail "the shared S3Gen arena changed the chunked audio"
  # A single word longer than a chunk is still spoken in full (split between bytes, never dropped).
  "${SAY[@]}" "Supercalifragilisticexpialidocious antidisestablishmentarianism." -o "$D/w.wav" \
    --chunk-tokens 10 -v 2> "$D/w.err" || { cat "$D/w.err"; fail "long word"; }
  wchunks=$(sed -n 's/.*chunks=\([0-9]*\) .*/\1/p' "$D/w.err")
  [ -n "$wchunks" ] && [ "$wchunks" -ge 3 ] || { cat "$D/w.err"; fail "long word was not split (chunks=$wchunks)"; }

  # --prompt-cache: the first run writes the voice prefix, the next loads it; the audio is the same
  # bits as without a cache. A damaged cache is rewritten; a file that is not a cache is refused
  # and left alone.
  PC="$D/voice.prefix"
  "${SAY[@]}" "Hello world." -o "$D/pc1.wav" --seed 7 --prompt-cache "$PC" -v 2> "$D/pc1.err" ||
    { cat "$D/pc1.err"; fail "say --prompt-cache (write)"; }
  grep -q "prompt cache .*no such file yet" "$D/pc1.err" || { cat "$D/pc1.err"; fail "first run did not miss"; }
  [ -s "$PC" ] && [ "$(head -c 8 "$PC")" = "CBXPREFX" ] || fail "prompt cache not written"
  ls "$D" | grep -q '\.tmp-' && fail "prompt cache temporary file left behind"
  "${SAY[@]}" "Hello world." -o "$D/pc2.wav" --seed 7 --prompt-cache "$PC" -v 2> "$D/pc2.err" ||
    { cat "$D/pc2.err"; fail "say --prompt-cache (read)"; }
  grep -q "voice prefix loaded" "$D/pc2.err" || { cat "$D/pc2.err"; fail "second run did not load the cache"; }
  cmp -s "$D/a.wav" "$D/pc1.wav" && cmp -s "$D/a.wav" "$D/pc2.wav" || fail "--prompt-cache changed the audio"
  head -c 1000 "$PC" > "$D/cut.prefix"
  "${SAY[@]}" "Hello world." -o "$D/pc3.wav" --seed 7 --prompt-cache "$D/cut.prefix" -v 2> "$D/pc3.err" ||
    { cat "$D/pc3.err"; fail "say with a truncated cache"; }
  grep -q "not used, .*bytes where its header says" "$D/pc3.err" || { cat "$D/pc3.err"; fail "truncation not reported"; }
  cmp -s "$D/a.wav" "$D/pc3.wav" || fail "a truncated cache changed the audio"
  cmp -s "$PC" "$D/cut.prefix" || fail "the truncated cache was not rewritten"
  cp "$D/a.wav" "$D/keep.wav"
  # A file that is not a cache: a warning, never overwritten, and the audio still written.
  "${SAY[@]}" "Hello world." -o "$D/nc.wav" --seed 7 --prompt-cache "$D/keep.wav" 2> "$D/nc.err" ||
    { cat "$D/nc.err"; fail "say with a non-cache --prompt-cache file"; }
  grep -q "warning: .*not a chatterbox prompt cache.*not overwriting" "$D/nc.err" || { cat "$D/nc.err"; fail "no warning"; }
  cmp -s "$D/a.wav" "$D/nc.wav" || fail "a non-cache --prompt-cache file changed the audio"
  cmp -s "$D/a.wav" "$D/keep.wav" || fail "a file that is not a cache was changed"
done

# A Multilingual model needs --lang (tests/test_say_mtl.sh covers Multilingual synthesis).
"$MK" --variant mtl --size tiny --seed 1 --threads 1 "$T/mtl" > /dev/null 2>&1 || fail "mkckpt mtl"
"$B" convert "$T/mtl" -o "$T/mtl.gguf" --type f32 --quiet > /dev/null || fail "convert mtl"
expect_error "needs a language" "fr  French" -- "$B" say -m "$T/mtl.gguf" "Hello." -o "$T/x.wav"
expect_error "--prompt-cache is for Turbo models" -- \
  "$B" say -m "$T/mtl.gguf" --lang fr "Bonjour." -o "$T/x.wav" --prompt-cache "$T/m.prefix"

echo "test_say: OK"
