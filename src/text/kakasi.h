// Japanese kanji readings from KAKASI (Debian: libkakasi2 + kakasi-dic), the C program that
// upstream's pykakasi re-implements. The library is loaded at run time (dlopen), so a machine
// without it, or without its dictionary, still runs: the text then passes through unchanged, as
// upstream's does without pykakasi, and a warning is printed once. KAKASI keeps global state,
// so every call goes through one process-wide lock; it is initialised once, on first use.
#pragma once
#include <string>
#include <vector>

namespace cbx {

// A piece of the input. `converted`: KAKASI read it as a word with kanji and gave `reading`
// (hiragana, possibly empty); otherwise the piece is text KAKASI leaves alone (kana, Latin,
// digits, punctuation, and characters it cannot encode). The origs concatenate to the input.
struct JaSegment {
  std::string orig;
  std::string reading;
  bool converted = false;
};

// Whether KAKASI is usable here (loads it on the first call; thread-safe).
bool kakasi_available();
// One line for `chatterbox languages` / `system-info`: "KAKASI (libkakasi.so.2, dictionary
// /usr/share/kakasi/kanwadict)" or "pass-through (KAKASI unavailable: <why>)".
std::string ja_frontend_description();
// "KAKASI" or "pass-through": the short form, for `chatterbox languages`.
const char* ja_frontend_name();

// text: valid UTF-8, NFC (KAKASI's dictionary has composed kana). Runs of kana and kanji that
// EUC-JP (JIS X 0208) can hold go through KAKASI's kanji -> hiragana conversion (-JH) in
// furigana mode, which marks each word it read; everything else is a pass-through segment.
// Without KAKASI the whole text is one pass-through segment (and a warning is printed once).
std::vector<JaSegment> kakasi_segments(const std::string& text);

}  // namespace cbx
