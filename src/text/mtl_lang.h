// Language steps of the Multilingual tokenizer (spec §4.3 step 3, upstream tokenizer.py),
// applied after lower-casing and NFKD. Input and output are valid UTF-8.
// docs/multilingual.md says, language by language, where these differ from upstream.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "text/kakasi.h"

namespace cbx {

// Cangjie5_TC.json: "char\tcode[\t...]" entries in file order. A char that is the k-th (k > 0)
// entry of its code gets the decimal digits of k appended (upstream cj2word[code].index(char)).
class CangjieTable {
 public:
  CangjieTable() = default;
  // `what` names the source in errors; an entry without a tab is an error.
  CangjieTable(const std::vector<std::string>& entries, const std::string& what);
  bool empty() const { return codes_.empty(); }
  size_t size() const { return codes_.size(); }
  // Code plus index digits, or nullptr when the glyph is not in the table.
  const std::string* find(const std::string& glyph) const;

 private:
  std::unordered_map<std::string, std::string> codes_;
};

// zh (a): word segmentation, words joined with single spaces. Upstream uses pkuseg's default
// model; we use ICU's dictionary-based word BreakIterator. As pkuseg.cut does, the text is
// first split on (Python) whitespace; whitespace-only segments are dropped.
std::string zh_segment(const std::string& text);
// zh (b): every general-category-Lo char found in the table -> "[cj_c]..." + "[cj_.]".
std::string zh_cangjie(const std::string& text, const CangjieTable& table);

// ja: upstream hiragana_normalize. KAKASI (text/kakasi.h) segments the NFC text and reads its
// kanji; a segment with kanji (U+4E00..U+9FFF) becomes its hiragana reading, with a space before
// a reading that starts with は or へ; everything else is kept; the result is NFKD'd. Without
// KAKASI the text passes through (upstream's behaviour without pykakasi), with a warning once.
std::string ja_normalize(const std::string& text);
// Upstream's join of pykakasi segments, on KAKASI's segments (exposed for tests).
std::string ja_join_segments(const std::vector<JaSegment>& segments);
// ko: Hangul syllables U+AC00..U+D7AF -> conjoining jamo (L, V, optional T), then str.strip().
std::string ko_normalize(const std::string& text);
// he: upstream adds niqqud with dicta_onnx, an optional dependency absent by default: unchanged.
std::string he_normalize(const std::string& text);
// ru: upstream's stress marker was removed from its dependencies: unchanged.
std::string ru_normalize(const std::string& text);

}  // namespace cbx
