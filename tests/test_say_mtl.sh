#!/bin/bash
# `chatterbox say --lang` and `chatterbox languages` on a tiny synthetic Multilingual model:
# several languages (incl. zh/ja/ko/ar), determinism per seed, the Multilingual options wired
# through, language errors listing the supported ones, a Turbo model given a non-English
# language, long-text chunking (also CJK text without spaces).
# Usage: test_say_mtl.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_say_mtl.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-say-mtl

"$MK" --variant mtl --size tiny --seed 1 --threads 1 "$T/mtl" > /dev/null 2>&1 || fail "mkckpt mtl"
"$B" convert "$T/mtl" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert mtl"
# Random weights rarely sample EOS: cap each generation so the test stays short.
SAY=("$B" say -m "$T/m.gguf" --max-tokens 20 --threads 2)

# languages: 23 lines "code  Name", sorted, code first.
"$B" languages -m "$T/m.gguf" > "$T/langs.txt" || fail "languages"
[ "$(wc -l < "$T/langs.txt")" -eq 23 ] || { cat "$T/langs.txt"; fail "expected 23 languages"; }
for l in "ar  Arabic" "fr  French" "zh  Chinese" "ko  Korean" "en  English" "he  Hebrew"; do
  grep -qxF "$l" "$T/langs.txt" || { cat "$T/langs.txt"; fail "languages lacks '$l'"; }
done
grep -qx "ja  Japanese (kanji readings: \(KAKASI\|pass-through\))" "$T/langs.txt" || { cat "$T/langs.txt"; fail "languages: ja line"; }
sort -c "$T/langs.txt" || fail "languages output is not sorted"
"$B" languages --help | grep -q "say --lang" || fail "languages --help"
"$B" say --help | grep -q -- "--lang" || fail "say --help does not document --lang"

# Several languages, scripts included; samples are whole tokens (tail trim keeps (N-1) x 960).
declare -A TXT=(
  [en]="Hello world."
  [fr]="Bonjour tout le monde, comment ça va ?"
  [de]="Guten Tag! Wie geht es Ihnen?"
  [ru]="Привет, как дела?"
  [zh]="你好，世界。今天天气很好！"
  [ja]="こんにちは、世界。カタカナもある。"
  [ko]="안녕하세요, 세계!"
  [ar]="مرحبا بالعالم، كيف حالك؟"
  [he]="שלום עולם."
  [hi]="नमस्ते दुनिया।"
)
for l in "${!TXT[@]}"; do
  "${SAY[@]}" --lang "$l" "${TXT[$l]}" -o "$T/$l.wav" --seed 5 -v 2> "$T/$l.err" ||
    { cat "$T/$l.err"; fail "say --lang $l"; }
  [ "$(head -c 4 "$T/$l.wav")" = "RIFF" ] || fail "$l: not a RIFF file"
  n=$(wav_samples "$T/$l.wav")
  [ $((n % 960)) -eq 0 ] || fail "$l: $n samples, not whole tokens"
  grep -q "language $l," "$T/$l.err" || { cat "$T/$l.err"; fail "$l: -v does not name the language"; }
  tokens=$(sed -n 's/.*speech_tokens=\([0-9]*\) .*/\1/p' "$T/$l.err")
  [ -n "$tokens" ] || { cat "$T/$l.err"; fail "$l: no speech_tokens in -v output"; }
  if [ "$tokens" -gt 0 ]; then
    expect=$(( (tokens > 1 ? tokens - 1 : 1) * 960 ))
    [ "$n" -eq "$expect" ] || fail "$l: $n samples for $tokens speech tokens (tail trim: $expect)"
  fi
done
# The language changes the tokens and so the audio.
cmp -s "$T/fr.wav" "$T/de.wav" && fail "fr and de gave identical audio"

# Same seed -> byte-identical; another seed -> different; the language code is case-insensitive.
for l in zh ar; do
  "${SAY[@]}" --lang "$l" "${TXT[$l]}" -o "$T/${l}2.wav" --seed 5 2> /dev/null || fail "say $l again"
  cmp -s "$T/$l.wav" "$T/${l}2.wav" || fail "$l: same seed gave different WAVs"
done
"${SAY[@]}" --lang FR "${TXT[fr]}" -o "$T/FR.wav" --seed 5 2> /dev/null || fail "say --lang FR"
cmp -s "$T/fr.wav" "$T/FR.wav" || fail "--lang FR and --lang fr differ"
"${SAY[@]}" --lang fr "${TXT[fr]}" -o "$T/fr6.wav" --seed 6 2> /dev/null || fail "say seed 6"
cmp -s "$T/fr.wav" "$T/fr6.wav" && fail "different seeds gave identical WAVs"

# The Multilingual options reach the model: each one changes the audio.
for opt in "--exaggeration 1.5" "--cfg-weight 0" "--min-p 0.3" "--temperature 0.5" "--repetition-penalty 2" \
  "--top-p 0.5"; do
  # shellcheck disable=SC2086
  "${SAY[@]}" --lang fr "${TXT[fr]}" -o "$T/opt.wav" --seed 5 $opt 2> "$T/opt.err" ||
    { cat "$T/opt.err"; fail "say $opt"; }
  cmp -s "$T/fr.wav" "$T/opt.wav" && fail "$opt did not change the audio"
done
expect_error "min_p" -- "${SAY[@]}" --lang fr "Salut." -o "$T/x.wav" --min-p 2
expect_error "cfg_weight" -- "${SAY[@]}" --lang fr "Salut." -o "$T/x.wav" --cfg-weight 1000
"${SAY[@]}" --lang fr "Salut." -o "$T/k.wav" --top-k 5 2> "$T/k.err" || fail "say --top-k on mtl"
grep -q "top-k is ignored" "$T/k.err" || { cat "$T/k.err"; fail "--top-k on mtl not reported as ignored"; }

# Raw PCM on stdout = the WAV's data.
"${SAY[@]}" --lang fr "${TXT[fr]}" -o - --seed 5 > "$T/fr.pcm" 2> /dev/null || fail "say -o -"
tail -c +45 "$T/fr.wav" | cmp -s - "$T/fr.pcm" || fail "raw PCM differs from the WAV data"

# Language errors list the supported languages.
expect_error "'xx' is not supported" "fr  French" "zh  Chinese" -- "${SAY[@]}" --lang xx "Hi." -o "$T/x.wav"
expect_error "needs a language" "ar  Arabic" "sw  Swahili" -- "${SAY[@]}" "Hi." -o "$T/x.wav"
[ ! -e "$T/x.wav" ] || fail "output written after a language error"
expect_error "empty" -- "${SAY[@]}" --lang fr "  " -o "$T/x.wav"

# Long text: split into chunks; deterministic; CJK without spaces splits at 。！？.
LONG="La première phrase est ici. Une deuxième la suit ! Est-ce la troisième ? Oui, et la quatrième termine."
"${SAY[@]}" --lang fr "$LONG" -o "$T/long.wav" --seed 3 --chunk-tokens 30 -v 2> "$T/long.err" ||
  { cat "$T/long.err"; fail "long text"; }
chunks=$(sed -n 's/.*chunks=\([0-9]*\) .*/\1/p' "$T/long.err")
[ -n "$chunks" ] && [ "$chunks" -ge 2 ] || { cat "$T/long.err"; fail "long text was not split (chunks=$chunks)"; }
samples=$(sed -n 's/.*samples=\([0-9]*\) .*/\1/p' "$T/long.err")
# The default --pause-ms 200 puts 4800 samples of silence between chunks.
[ "$(wav_samples "$T/long.wav")" = $(( samples + (chunks - 1) * 4800 )) ] ||
  fail "long WAV length differs from -v samples=$samples + $chunks chunks' 200 ms pauses"
"${SAY[@]}" --lang fr "$LONG" -o "$T/long2.wav" --seed 3 --chunk-tokens 30 2> /dev/null || fail "long again"
cmp -s "$T/long.wav" "$T/long2.wav" || fail "long text is not deterministic"
ZH="今天天气很好。我们去公园散步吧！你觉得怎么样？好的，走吧。"
"${SAY[@]}" --lang zh "$ZH" -o "$T/zh_long.wav" --seed 3 --chunk-tokens 40 -v 2> "$T/zh_long.err" ||
  { cat "$T/zh_long.err"; fail "long zh text"; }
zc=$(sed -n 's/.*chunks=\([0-9]*\) .*/\1/p' "$T/zh_long.err")
[ -n "$zc" ] && [ "$zc" -ge 2 ] || { cat "$T/zh_long.err"; fail "zh text without spaces was not split (chunks=$zc)"; }

# A Turbo model: English only.
"$MK" --variant turbo --size tiny --seed 1 --threads 1 "$T/turbo" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/turbo" -o "$T/t.gguf" --type f32 --quiet > /dev/null || fail "convert turbo"
[ "$("$B" languages -m "$T/t.gguf")" = "en  English" ] || fail "turbo languages is not 'en  English'"
expect_error "English only" "'fr'" -- "$B" say -m "$T/t.gguf" --max-tokens 10 --lang fr "Bonjour." -o "$T/x.wav"
"$B" say -m "$T/t.gguf" --max-tokens 10 --lang en "Hello." -o "$T/t_en.wav" 2> /dev/null || fail "turbo --lang en"
"$B" say -m "$T/t.gguf" --max-tokens 10 "Hello." -o "$T/t_none.wav" 2> /dev/null || fail "turbo without --lang"
cmp -s "$T/t_en.wav" "$T/t_none.wav" || fail "turbo --lang en differs from no --lang"
"$B" say -m "$T/t.gguf" --max-tokens 10 --cfg-weight 0.3 "Hello." -o "$T/t_cfg.wav" 2> "$T/t_cfg.err" ||
  fail "turbo --cfg-weight"
grep -q "ignored by Turbo" "$T/t_cfg.err" || { cat "$T/t_cfg.err"; fail "--cfg-weight on turbo not reported"; }

# --stream: audio while T3 decodes; the same length (tail trim included) and, per seed, the same
# file every time; -v gives the time to first audio; -o - writes the same samples.
"${SAY[@]}" --max-tokens 60 --lang fr "Bonjour tout le monde." -o "$T/fr_ns.wav" --seed 3 -q || fail "fr (no stream)"
"${SAY[@]}" --max-tokens 60 --lang fr "Bonjour tout le monde." -o "$T/fr_st.wav" --seed 3 --stream -v \
  2> "$T/fr_st.err" || { cat "$T/fr_st.err"; fail "--stream with a Multilingual model"; }
[ "$(wav_samples "$T/fr_st.wav")" -eq "$(wav_samples "$T/fr_ns.wav")" ] || fail "--stream changed the length"
grep -q "ttfa_ms=[0-9.]* (call to first audio, streamed)" "$T/fr_st.err" || { cat "$T/fr_st.err"; fail "no ttfa"; }
"${SAY[@]}" --max-tokens 60 --lang fr "Bonjour tout le monde." -o "$T/fr_st2.wav" --seed 3 --stream -q ||
  fail "--stream again"
cmp -s "$T/fr_st.wav" "$T/fr_st2.wav" || fail "--stream is not deterministic per seed"
"${SAY[@]}" --max-tokens 60 --lang fr "Bonjour tout le monde." -o - --seed 3 --stream -q > "$T/fr_st.pcm" ||
  fail "--stream -o -"
[ $(( $(stat -c %s "$T/fr_st.pcm") / 2 )) -eq "$(wav_samples "$T/fr_ns.wav")" ] || fail "--stream -o - length"

echo "test_say_mtl: OK"
