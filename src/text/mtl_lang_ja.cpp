// Japanese: upstream hiragana_normalize (pykakasi), on KAKASI's readings (text/kakasi.h).
// See docs/multilingual.md for where the two dictionaries can differ.
#include "text/kakasi.h"
#include "text/mtl_lang.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {
namespace {

// Upstream's is_kanji: U+4E00..U+9FFF only (not 々, ヶ, extension A or compatibility ideographs).
bool has_upstream_kanji(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    char32_t c = 0;
    const size_t n = utf8_next(s, i, &c);
    if (n == 0) return false;
    if (c >= 0x4E00 && c <= 0x9FFF) return true;
    i += n;
  }
  return false;
}

}  // namespace

std::string ja_join_segments(const std::vector<JaSegment>& segments) {
  std::string out;
  for (const JaSegment& s : segments) {
    // A segment with kanji becomes its reading, with a space before one that starts with は or
    // へ. Everything else (katakana, kana, Latin, digits, punctuation) is kept as it is. A word
    // the dictionary gave no reading keeps its characters (as pykakasi does for unknown kanji).
    if (s.converted && !s.reading.empty() && has_upstream_kanji(s.orig)) {
      if (s.reading.rfind("は", 0) == 0 || s.reading.rfind("へ", 0) == 0) out += ' ';
      out += s.reading;
    } else {
      out += s.orig;
    }
  }
  return out;
}

std::string ja_normalize(const std::string& text) {
  // The text arrives NFKD (voiced kana decomposed); KAKASI's dictionary holds composed kana, so
  // it reads the NFC form. The result is NFKD'd again, as upstream does.
  const std::string nfc = unicode_normalize(text, UnicodeForm::NFC);
  return unicode_normalize(ja_join_segments(kakasi_segments(nfc)), UnicodeForm::NFKD);
}

}  // namespace cbx
