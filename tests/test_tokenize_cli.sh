#!/usr/bin/env bash
# chatterbox tokenize on a tiny synthetic Multilingual GGUF: ids equal the independent Python
# reference (tests/mtl_tokenizer_reference.py) on the checkpoint's tokenizer files, --prepared
# prints the pre-BPE string, --raw skips punc_norm, Japanese kanji are read by KAKASI, and bad
# usage gives clear errors. Turbo / Nano GGUFs with the real GPT-2 files give the golden ids.
# Usage: test_tokenize_cli.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: test_tokenize_cli.sh BUILD_DIR}
SRC=${CBX_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-tokenize-cli
CLI=$B
TMP=$T

"$MK" --variant mtl --size tiny --seed 3 --threads 1 "$TMP/ckpt" > /dev/null 2>&1 || fail "mkckpt"
"$CLI" convert "$TMP/ckpt" -o "$TMP/m.gguf" --type f32 > /dev/null 2>&1 || fail "convert"
tok() { "$CLI" tokenize -m "$TMP/m.gguf" "$@"; }

# Prepared string and ids, then the same through the Python reference (texts given after punc_norm
# by hand: "Bonjour: ça va" -> "Bonjour, ça va." ; the others need no change).
out=$(tok --lang FR --prepared "Bonjour: ça va")
[ "$(echo "$out" | head -1)" = $'[fr]bonjour,[SPACE]c\xcc\xa7a[SPACE]va.' ] || fail "--prepared (NFKD c + U+0327): $out"
ids_fr=$(echo "$out" | tail -1)
ids_ru=$(tok --lang ru "Привет, мир!")
ids_ko=$(tok --lang ko "안녕하세요, 만나서 반갑습니다!")
ids_el=$(tok --lang el "ΟΔΟΣ 12, Ελλάδα.")
raw_en=$(tok --lang en --raw "hello: world")
norm_en=$(tok --lang en "hello: world")
[ "$raw_en" != "$norm_en" ] || fail "--raw made no difference"

if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import regex" 2>/dev/null; then
  cat > "$TMP/req.json" <<JSON
{"tokenizer": "$TMP/ckpt/grapheme_mtl_merged_expanded_v1.json", "cangjie": "$TMP/ckpt/Cangjie5_TC.json",
 "cases": [{"lang": "fr", "text": "Bonjour, ça va."}, {"lang": "ru", "text": "Привет, мир!"},
           {"lang": "ko", "text": "안녕하세요, 만나서 반갑습니다!"}, {"lang": "el", "text": "ΟΔΟΣ 12, Ελλάδα."},
           {"lang": "en", "text": "hello: world"}]}
JSON
  /usr/bin/python3 "$SRC/tests/mtl_tokenizer_reference.py" "$TMP/req.json" "$TMP/out.json" || fail "reference"
  mapfile -t want < <(/usr/bin/python3 -c "
import json, sys
for c in json.load(open(sys.argv[1]))['cases']: print(' '.join(map(str, c['ids'])))" "$TMP/out.json")
  [ "$ids_fr" = "${want[0]}" ] || fail "fr: $ids_fr != ${want[0]}"
  [ "$ids_ru" = "${want[1]}" ] || fail "ru: $ids_ru != ${want[1]}"
  [ "$ids_ko" = "${want[2]}" ] || fail "ko: $ids_ko != ${want[2]}"
  [ "$ids_el" = "${want[3]}" ] || fail "el: $ids_el != ${want[3]}"
  [ "$raw_en" = "${want[4]}" ] || fail "en --raw: $raw_en != ${want[4]}"
else
  echo "note: /usr/bin/python3 with regex missing; reference comparison skipped"
fi

# Japanese: kanji read by KAKASI (the `kakasi -JH` command is the reference), upstream's space before
# readings starting with は; without the dictionary, kanji pass through with one warning.
if "$CLI" system-info | grep -q "^ja_frontend=KAKASI (" && command -v kakasi > /dev/null; then
  nfc() { /usr/bin/python3 -c 'import sys, unicodedata; print(unicodedata.normalize("NFC", sys.argv[1]))' "$1"; }
  for t in "今日は良い天気です。" "日本語を勉強しています。"; do
    got=$(nfc "$(tok --lang ja --prepared "$t" | head -1)")
    want="[ja]$(echo "$t" | kakasi -i utf8 -o utf8 -JH)"
    [ "$got" = "$want" ] || fail "ja --prepared '$t': $got != $want"
  done
  got=$(nfc "$(tok --lang ja --prepared "私は花が好き" | head -1)")
  [ "$got" = "[ja]わたしは[SPACE]はながすき." ] || fail "ja space before は reading: $got"
  "$CLI" languages -m "$TMP/m.gguf" | grep -qx "ja  Japanese (kanji readings: KAKASI)" || fail "languages: ja front-end"
else
  echo "note: KAKASI (libkakasi2, kakasi-dic, kakasi) missing; Japanese reading checks skipped"
fi
KANWADICTPATH="$TMP/no-such-dict" tok --lang ja --prepared "今日は" > "$TMP/out" 2> "$TMP/err" || fail "ja without dictionary failed"
[ "$(head -1 "$TMP/out")" = "[ja]今日は." ] || fail "ja pass-through: $(cat "$TMP/out")"
[ "$(grep -c "warning: ja: KAKASI unavailable" "$TMP/err")" = 1 ] || fail "ja fallback warning: $(cat "$TMP/err")"
grep -q "no-such-dict" "$TMP/err" || fail "ja fallback warning names the dictionary: $(cat "$TMP/err")"
KANWADICTPATH="$TMP/no-such-dict" "$CLI" system-info | grep -q "^ja_frontend=pass-through (KAKASI unavailable" \
  || fail "system-info without the dictionary"

# Turbo and Nano: upstream's layout with the real GPT-2 files (../shared/data/gpt2) in place of the
# synthetic tokenizer; --raw ids equal the golden tokenizations (slow HF GPT2Tokenizer), the 19 tags
# are single ids, and the default applies Turbo's punc_norm first.
GPT2=$SRC/../shared/data/gpt2
if [ -s "$GPT2/golden.jsonl" ] && [ -x /usr/bin/python3 ]; then
  for v in turbo nano; do
    "$MK" --variant $v --size tiny --seed 3 --threads 1 "$TMP/$v" > /dev/null 2>&1 || fail "mkckpt $v"
    cp "$GPT2/vocab.json" "$GPT2/merges.txt" "$GPT2/added_tokens.json" "$TMP/$v/"
    "$CLI" convert "$TMP/$v" -o "$TMP/$v.gguf" --type f32 --quiet > /dev/null 2>&1 || fail "convert $v"
    gt() { "$CLI" tokenize -m "$TMP/$v.gguf" "$@"; }
    n=0
    while IFS=$'\t' read -r text want; do
      got=$(gt --raw -- "$text") || fail "$v: tokenize --raw '$text'"
      [ "$got" = "$want" ] || fail "$v --raw '$text': $got != $want"
      n=$((n + 1))
    done < <(/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    c = json.loads(line)
    if "\t" not in c["text"] and "\n" not in c["text"]:
        print(c["text"] + "\t" + " ".join(map(str, c["ids"])))' "$GPT2/golden.jsonl")
    [ $n -ge 40 ] || fail "$v: only $n golden cases read"
    [ "$(gt "Hello [laugh] world.")" = "15496 220 50275 995 13" ] || fail "$v: [laugh] is not one id"
    out=$(gt --prepared "hello   [laugh] world")
    [ "$(echo "$out" | head -1)" = "Hello [laugh] world." ] || fail "$v --prepared: $out"
    [ "$(echo "$out" | tail -1)" = "15496 220 50275 995 13" ] || fail "$v punc_norm ids: $out"
    [ "$(gt --lang EN "Hi.")" = "$(gt "Hi.")" ] || fail "$v --lang EN"
    if gt --lang fr "Salut." 2> "$TMP/err"; then fail "$v: --lang fr accepted"; fi
    grep -q "English only" "$TMP/err" || fail "$v --lang fr message: $(cat "$TMP/err")"
  done
else
  echo "note: ../shared/data/gpt2 or /usr/bin/python3 missing; Turbo / Nano tokenize checks skipped"
fi

# Bad usage.
if tok "no language" 2> "$TMP/err"; then fail "missing --lang accepted"; fi
grep -q "supported languages: ar, da, de" "$TMP/err" || fail "missing --lang message: $(cat "$TMP/err")"
if tok --lang xx "hi" 2> "$TMP/err"; then fail "unknown language accepted"; fi
grep -q "unsupported language 'xx'" "$TMP/err" || fail "unknown language message: $(cat "$TMP/err")"
if tok --lang en $'bad \xc3\x28' 2> "$TMP/err"; then fail "invalid UTF-8 accepted"; fi
grep -q "invalid UTF-8" "$TMP/err" || fail "invalid UTF-8 message: $(cat "$TMP/err")"
if "$CLI" tokenize --lang en "x" 2> "$TMP/err"; then fail "missing -m accepted"; fi
grep -q -- "-m MODEL.gguf is required" "$TMP/err" || fail "missing -m message: $(cat "$TMP/err")"
[ "$(tok --lang en -- "-dash")" = "$(tok --lang en --raw -- "-dash.")" ] || fail "-- TEXT"
echo "ok"
