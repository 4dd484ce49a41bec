// Punctuation normalisation applied to user text before tokenisation (spec §4.1).
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

}  // namespace cbx
