// Chinese: segmentation (ICU word BreakIterator in place of pkuseg) and Cangjie codes.
#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <memory>
#include <mutex>

#include "core/error.h"
#include "text/mtl_lang.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {

CangjieTable::CangjieTable(const std::vector<std::string>& entries, const std::string& what) {
  // Upstream: word2cj[word] = code (the last entry wins); cj2word[code] lists the words in file
  // order (repeats included) and the suffix is the first index of the word in that list.
  std::unordered_map<std::string, std::string> word_code;
  std::unordered_map<std::string, size_t> code_count;
  std::unordered_map<std::string, size_t> first_index;  // key: code + '\t' + word
  word_code.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    const size_t tab = e.find('\t');
    CBX_CHECK(tab != std::string::npos, "%s: Cangjie entry %zu ('%s') has no tab", what.c_str(), i, e.c_str());
    const size_t tab2 = e.find('\t', tab + 1);
    std::string word = e.substr(0, tab);
    std::string code = e.substr(tab + 1, tab2 == std::string::npos ? std::string::npos : tab2 - tab - 1);
    size_t& n = code_count[code];
    first_index.emplace(code + '\t' + word, n);
    ++n;
    word_code[word] = std::move(code);
  }
  codes_.reserve(word_code.size());
  for (auto& [word, code] : word_code) {
    const size_t k = first_index.at(code + '\t' + word);
    codes_.emplace(word, k > 0 ? code + std::to_string(k) : code);
  }
}

const std::string* CangjieTable::find(const std::string& glyph) const {
  auto it = codes_.find(glyph);
  return it == codes_.end() ? nullptr : &it->second;
}

namespace {

// The word BreakIterator is expensive to create (dictionary load): one prototype, never given
// text, cloned per call under a lock (ICU iterators are not thread-safe; clones are independent).
std::unique_ptr<icu::BreakIterator> new_word_breaker() {
  static std::unique_ptr<icu::BreakIterator> proto;
  static std::once_flag once;
  static std::mutex mu;
  std::call_once(once, [] {
    UErrorCode st = U_ZERO_ERROR;
    proto.reset(icu::BreakIterator::createWordInstance(icu::Locale("zh"), st));
    if (U_FAILURE(st)) proto.reset();
  });
  CBX_CHECK(proto != nullptr, "text: ICU word BreakIterator for 'zh' unavailable");
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<icu::BreakIterator> bi(proto->clone());
  CBX_CHECK(bi != nullptr, "text: cannot clone the ICU word BreakIterator");
  return bi;
}

void segment_fragment(const std::string& frag, icu::BreakIterator& bi, std::string& out) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(frag);
  bi.setText(u);
  int32_t b = bi.first();
  for (int32_t e = bi.next(); e != icu::BreakIterator::DONE; b = e, e = bi.next()) {
    std::string w;
    u.tempSubStringBetween(b, e).toUTF8String(w);
    if (w.empty()) continue;
    if (!out.empty()) out.push_back(' ');
    out += w;
  }
}

}  // namespace

std::string zh_segment(const std::string& text) {
  const std::unique_ptr<icu::BreakIterator> bi = new_word_breaker();
  std::string out, frag;
  for (size_t i = 0; i <= text.size();) {
    char32_t cp = 0;
    size_t n = 0;
    if (i < text.size()) {
      n = utf8_next(text, i, &cp);
      CBX_ASSERT(n > 0);
    }
    if (i == text.size() || py_isspace(cp)) {
      if (!frag.empty()) segment_fragment(frag, *bi, out);
      frag.clear();
      if (i == text.size()) break;
    } else {
      frag.append(text, i, n);
    }
    i += n;
  }
  return out;
}

std::string zh_cangjie(const std::string& text, const CangjieTable& table) {
  if (table.empty()) return text;
  std::string out;
  out.reserve(text.size() * 2);
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(text, i, &cp);
    CBX_ASSERT(n > 0);
    const std::string glyph = text.substr(i, n);
    i += n;
    const std::string* code = is_other_letter(cp) ? table.find(glyph) : nullptr;
    if (!code) {
      out += glyph;
      continue;
    }
    for (size_t k = 0; k < code->size();) {
      char32_t c = 0;
      const size_t m = utf8_next(*code, k, &c);
      CBX_CHECK(m > 0, "text: Cangjie code of '%s' is not valid UTF-8", glyph.c_str());
      out += "[cj_";
      out.append(*code, k, m);
      out += ']';
      k += m;
    }
    out += "[cj_.]";
  }
  return out;
}

}  // namespace cbx
