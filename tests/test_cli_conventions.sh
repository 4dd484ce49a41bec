#!/bin/bash
# The conventions every `chatterbox` command keeps: --version (and the same line in system-info),
# an aligned command list (--help: stdout, exit 0; no arguments: stderr, exit 1), every command's
# --help on stdout with exit 0, one "chatterbox CMD: error: " prefix per error, `voice list`, and
# the progress line of convert / quantize / voice create (off when stderr is not a terminal,
# forced on by CBX_PROGRESS=1, silenced by -q).
# Usage: test_cli_conventions.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_cli_conventions.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-cli-conventions
unset CBX_PROGRESS

# --version: "chatterbox.cpp X.Y.Z (git HASH[-dirty]|unknown) COMPILER BUILD_TYPE", exit 0.
ver=$("$B" --version 2> "$T/err.txt") || fail "--version exited $?"
[ -s "$T/err.txt" ] && fail "--version wrote to stderr: $(cat "$T/err.txt")"
grep -Eq '^chatterbox\.cpp [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]{7,}(-dirty)?|unknown)\) [^ ]+ .+$' <<< "$ver" ||
  fail "--version printed '$ver'"
[ "$("$B" system-info | head -n 1)" = "$ver" ] || fail "system-info does not start with the version line"

# The command list: --help on stdout (exit 0), no arguments on stderr (exit 1); every summary
# starts in the same column, past the longest name.
"$B" --help > "$T/help.txt" 2> "$T/err.txt" || fail "--help exited $?"
[ -s "$T/err.txt" ] && fail "--help wrote to stderr"
if "$B" > "$T/out.txt" 2> "$T/noargs.txt"; then fail "no arguments: exit 0"; fi
[ -s "$T/out.txt" ] && fail "no arguments: usage on stdout"
cmp -s "$T/help.txt" "$T/noargs.txt" || fail "no arguments: not the --help text"
sed -n '/^commands:/,/^$/p' "$T/help.txt" | sed '1d;$d' > "$T/list.txt"
[ "$(wc -l < "$T/list.txt")" -ge 10 ] || fail "command list too short: $(cat "$T/list.txt")"
cols=$(awk '{ match($0, /^  [^ ]+ +/); print RLENGTH }' "$T/list.txt" | sort -u)
[ "$(wc -l <<< "$cols")" = 1 ] || { cat "$T/list.txt"; fail "summaries start in columns $cols"; }
longest=$(awk '{ if (length($1) > n) n = length($1) } END { print n }' "$T/list.txt")
[ "$cols" -ge $((longest + 3)) ] || fail "summary column $cols is not past the longest name ($longest)"
grep -q '^  debug-mtl-audio  ' "$T/list.txt" || fail "debug-mtl-audio is not listed aligned"

# Every command's --help (and the subcommands'): usage on stdout, nothing on stderr, exit 0.
mapfile -t cmds < <(awk '{ print $1 }' "$T/list.txt")
for c in "${cmds[@]}" "voice create" "voice info" "voice list" "debug ve"; do
  # shellcheck disable=SC2086  # "voice create" is two words
  "$B" $c --help > "$T/out.txt" 2> "$T/err.txt" || fail "'$c --help' exited $?"
  grep -q "usage: chatterbox" "$T/out.txt" || fail "'$c --help' printed no usage on stdout"
  [ -s "$T/err.txt" ] && fail "'$c --help' wrote to stderr: $(cat "$T/err.txt")"
done
"$B" voice --help | grep -q "voice list DIR" || fail "voice --help does not mention voice list"
"$B" convert --help | grep -q -- "-q, --quiet" || fail "convert --help has no -q"

# Errors: one prefix, "chatterbox CMD: error: ", naming the command as typed.
one_prefix() {  # EXPECTED-START -- CMD...: stderr's first line starts with it; no repeated command
  local want=$1
  shift 2
  if "$@" > /dev/null 2> "$T/err.txt"; then fail "accepted: $*"; fi
  head -n 1 "$T/err.txt" | grep -qF -- "$want" || { cat "$T/err.txt"; fail "'$want' does not start the error of: $*"; }
  [ "$(head -n 1 "$T/err.txt" | grep -o 'error:' | wc -l)" = 1 ] || fail "two 'error:' in: $(head -n 1 "$T/err.txt")"
  if head -n 1 "$T/err.txt" | grep -Eq 'error: (languages|tokenize|voice|quantize|convert|debug)[a-z -]*: '; then
    fail "repeated command prefix: $(head -n 1 "$T/err.txt")"
  fi
}
one_prefix "chatterbox languages: error: -m MODEL.gguf is required" -- "$B" languages
one_prefix "chatterbox tokenize: error: -m MODEL.gguf is required" -- "$B" tokenize hello
one_prefix "chatterbox voice create: error: -m MODEL.gguf is required" -- "$B" voice create "$T/ref.wav"
one_prefix "chatterbox voice: error: unknown subcommand 'bogus'" -- "$B" voice bogus
one_prefix "chatterbox debug ve: error: unknown option '--bogus'" -- "$B" debug ve --bogus
one_prefix "chatterbox debug-ve: error: unknown option '--bogus'" -- "$B" debug-ve --bogus
one_prefix "chatterbox convert: error: $T/none: not a directory" -- "$B" convert "$T/none" -o "$T/x.gguf"
one_prefix "chatterbox quantize: error: $T/x.gguf: cannot open" -- \
  "$B" quantize "$T/x.gguf" "$T/y.gguf" --type q8_0
one_prefix "chatterbox ckpt-dump: error: " -- "$B" ckpt-dump "$T/none.pt"
one_prefix "chatterbox: error: unknown command 'bogus'" -- "$B" bogus

# Progress: convert with stderr not a terminal prints nothing there; CBX_PROGRESS=1 forces the
# line ("convert: tensor I/N (NAME)", carriage returns, one final newline); -q wins.
"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt"
"$B" convert "$T/ckpt" -o "$T/m.gguf" > /dev/null 2> "$T/err.txt" || fail "convert"
[ -s "$T/err.txt" ] && fail "convert printed on a non-terminal stderr: $(head -c 300 "$T/err.txt")"
CBX_PROGRESS=1 "$B" convert "$T/ckpt" -o "$T/m2.gguf" > /dev/null 2> "$T/err.txt" || fail "convert (progress)"
grep -q $'\r' "$T/err.txt" || fail "convert progress has no carriage return"
tr '\r' '\n' < "$T/err.txt" > "$T/lines.txt"
grep -q '^convert: reading t3_turbo_v1.safetensors' "$T/lines.txt" || fail "no 'reading' line"
n=$(sed -n 's|^convert: tensor \([0-9]*\)/\([0-9]*\) (.*)\( *\)$|\1 \2|p' "$T/lines.txt" | tail -n 1)
[ -n "$n" ] && [ "${n% *}" = "${n#* }" ] || fail "last tensor line is not N/N: '$n'"
[ "${n% *}" -gt 100 ] || fail "only $n tensors reported"
grep -q '^convert: tensor 1/' "$T/lines.txt" || fail "no 'tensor 1/N' line"
[ "$(tail -c 1 "$T/err.txt" | od -An -c | tr -d ' ')" = '\n' ] || fail "progress does not end with a newline"
cmp -s "$T/m.gguf" "$T/m2.gguf" || fail "progress changed the output"
CBX_PROGRESS=1 "$B" convert "$T/ckpt" -o "$T/m3.gguf" -q > /dev/null 2> "$T/err.txt" || fail "convert -q"
[ -s "$T/err.txt" ] && fail "convert -q printed progress"

"$B" quantize "$T/m.gguf" "$T/q.gguf" -t q8_0 > /dev/null 2> "$T/err.txt" || fail "quantize"
[ -s "$T/err.txt" ] && fail "quantize printed on a non-terminal stderr"
CBX_PROGRESS=1 "$B" quantize "$T/m.gguf" "$T/q2.gguf" -t q8_0 > /dev/null 2> "$T/err.txt" || fail "quantize (progress)"
tr '\r' '\n' < "$T/err.txt" | grep -Eq '^quantize: tensor ([0-9]+)/\1 \(' || fail "quantize: no final tensor N/N line"
CBX_PROGRESS=1 "$B" quantize "$T/m.gguf" "$T/q3.gguf" --type q8_0 --quiet > /dev/null 2> "$T/err.txt" || fail "quantize -q"
[ -s "$T/err.txt" ] && fail "quantize --quiet printed progress"

# voice create: the stages, forced on; off on a non-terminal (only the summary line); -q: nothing.
/usr/bin/python3 - "$T/ref.wav" << 'PY' || fail "reference wav"
import math, struct, sys, wave
rate, n = 16000, 16000 * 7
with wave.open(sys.argv[1], 'wb') as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate)
    w.writeframes(b''.join(struct.pack('<h', int(8000 * (0.5 + 0.5 * math.sin(8 * math.pi * i / rate)) *
                                              math.sin(2 * math.pi * 140 * i / rate))) for i in range(n)))
PY
mkdir "$T/voices"
CBX_PROGRESS=1 "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/voices/alice.voice" -t 2 > /dev/null \
  2> "$T/err.txt" || { cat "$T/err.txt"; fail "voice create (progress)"; }
tr '\r' '\n' < "$T/err.txt" > "$T/lines.txt"
for s in "loading $T/m.gguf" "step 1/7 (decoding audio)" "step 4/7 (voice encoder)" "step 6/7 (CAMPPlus)" \
  "step 7/7 (S3 tokenizer (S3Gen prompt))"; do
  grep -qF "voice create: $s" "$T/lines.txt" || { cat "$T/lines.txt"; fail "voice create progress: no '$s'"; }
done
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/voices/bob.voice" --threads 2 > /dev/null 2> "$T/err.txt" ||
  fail "voice create"
grep -q "step" "$T/err.txt" && fail "voice create printed progress on a non-terminal stderr"
grep -q "voice create: .*ref.wav -> .*bob.voice" "$T/err.txt" || fail "voice create: no summary line"
CBX_PROGRESS=1 "$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/carol.voice" -q > /dev/null 2> "$T/err.txt" ||
  fail "voice create -q"
[ -s "$T/err.txt" ] && fail "voice create -q printed: $(cat "$T/err.txt")"

# voice list: one line per .voice (sorted, under a header); a broken file is listed with the
# reason; other files are ignored; an empty directory says so; a missing one is an error.
echo "not a voice" > "$T/voices/broken.voice"
echo "x" > "$T/voices/notes.txt"
"$B" voice list "$T/voices" > "$T/list.txt" 2> "$T/err.txt" || { cat "$T/err.txt"; fail "voice list"; }
[ "$(wc -l < "$T/list.txt")" = 4 ] || { cat "$T/list.txt"; fail "voice list: not header + 3 lines"; }
head -n 1 "$T/list.txt" | grep -q "^NAME *VARIANT" || fail "voice list: no header"
sed -n 2p "$T/list.txt" | grep -Eq '^alice +turbo +[0-9]+\.[0-9]{2} +[0-9]+ \+ [0-9]+ +[0-9.]+ kB +ref\.wav$' ||
  { cat "$T/list.txt"; fail "voice list: alice line"; }
sed -n 3p "$T/list.txt" | grep -q '^bob ' || fail "voice list: bob not second"
sed -n 4p "$T/list.txt" | grep -q "^broken *unreadable: .*broken.voice" || { cat "$T/list.txt"; fail "voice list: broken"; }
grep -q notes "$T/list.txt" && fail "voice list listed a .txt file"
mkdir "$T/empty"
[ "$("$B" voice list "$T/empty")" = "no .voice files in $T/empty" ] || fail "voice list: empty directory"
one_prefix "chatterbox voice list: error: '$T/none' is not a directory" -- "$B" voice list "$T/none"
# The debug stages parse numbers strictly, as say does: no silent 0 from "abc" or a huge value.
expect_error "--threads" "abc" -- "$B" debug ve -m x.gguf --threads abc
expect_error "--threads must be 1 .. 1024, got 0" -- "$B" debug cfm -m x.gguf --threads 0
expect_error "--seed" "-5" -- "$B" debug hift -m x.gguf --seed -5
expect_error "--temperature" "nan" -- "$B" debug t3-mtl -m x.gguf --temperature nan
expect_error "--steps" "99999999999" -- "$B" debug t3-mtl -m x.gguf --steps 99999999999
echo "test_cli_conventions: ok"
