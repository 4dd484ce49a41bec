// Japanese: upstream hiragana_normalize (pykakasi). Without a reading dictionary the kanji cannot
// be converted; see docs/multilingual.md.
#include "text/mtl_lang.h"
#include "text/unicode_text.h"

namespace cbx {

std::string ja_normalize(const std::string& text) {
  // Upstream keeps every segment without kanji as it is (katakana included) and NFKD-normalises
  // the joined result. Our input is already NFKD, so this is the identity unless the text holds
  // kanji, whose hiragana readings (and the space before readings starting with は/へ) we cannot
  // produce: they pass through, as upstream does when pykakasi is missing.
  return unicode_normalize(text, UnicodeForm::NFKD);
}

}  // namespace cbx
