// Punctuation normalisation applied to user text before tokenisation (spec §4.1), plus the
// strict UTF-8 helpers the text front-end shares.
#pragma once
#include <cstddef>
#include <string>

namespace cbx {

// Which upstream copy of punc_norm to reproduce.
//   Turbo:        tts_turbo.py (9 replacements, enders . ! ? - ,)
//   Multilingual: mtl_tts.py (12 replacements incl. "...", " - ", ";"; enders also 、 ， 。 ？ ！).
//                 tts.py (original English) has the same table; its enders are the Turbo set.
enum class PuncNormFlavor { Turbo, Multilingual };

// Python-exact reimplementation of upstream punc_norm:
//   1. ""            -> "You need to add some text for me to talk."
//   2. first code point lower-case (Python str.islower) -> full upper-case mapping (str.upper)
//   3. " ".join(text.split())   (Python str.isspace whitespace set, e.g. NBSP, \x1c..\x1f)
//   4. literal replacements in table order
//   5. rstrip(" "), then append "." unless the text ends with a sentence ender.
// Throws cbx::Error("text: invalid UTF-8 at byte N") on malformed input.
std::string punc_norm(const std::string& utf8, PuncNormFlavor flavor);

// ---- UTF-8 helpers (strict: no overlongs, no surrogates, nothing above U+10FFFF) ----

// Throws cbx::Error("text: invalid UTF-8 at byte N") where N is the 0-based offset of the
// first byte of the first malformed sequence.
void utf8_check(const std::string& s);

// Decodes one code point at s[i]. On success returns its byte length (1..4) and sets *cp;
// on a malformed sequence returns 0 and sets *bad_len to the length of the maximal
// ill-formed subpart (>= 1), the unit Python's errors="replace" replaces with one U+FFFD.
size_t utf8_next(const std::string& s, size_t i, char32_t* cp, size_t* bad_len = nullptr);

// Appends the UTF-8 encoding of a valid scalar value.
void utf8_append(std::string& out, char32_t cp);

}  // namespace cbx
