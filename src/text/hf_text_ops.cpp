#include "text/hf_text_ops.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {

using json = nlohmann::json;

enum class OpKind {
  // normalizers
  Lowercase,
  Nfd,
  Nfkd,
  Nfc,
  Nfkc,
  Strip,
  StripAccents,
  Replace,
  Prepend,
  // pre-tokenizers
  Whitespace,
  WhitespaceSplit,
  Bert,
  Punctuation,
  Digits,
  Split,
};
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct HfTextOp {
  OpKind kind = OpKind::Lowercase;
  std::string text, content;              // Replace/Split string pattern + replacement; Prepend text
  std::unique_ptr<icu::RegexPattern> re;  // Replace/Split regex pattern
  bool left = false, right = false;       // Strip
  bool individual_digits = false, invert = false;
  Behavior behavior = Behavior::Isolated;
};

namespace {

struct Seg {
  size_t b, e;
  bool match;
};

// One character per call: decodes s[i] (valid UTF-8).
char32_t next_cp(const std::string& s, size_t i, size_t* n) {
  char32_t cp = 0;
  *n = utf8_next(s, i, &cp);
  CBX_ASSERT(*n > 0);
  return cp;
}

// Pattern::find_matches of a char predicate: every matching char is its own match; the runs
// between are merged.
template <typename Pred>
void char_matches(const std::string& s, Pred pred, std::vector<Seg>& out) {
  size_t gap = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t c = next_cp(s, i, &n);
    if (pred(c)) {
      if (gap < i) out.push_back({gap, i, false});
      out.push_back({i, i + n, true});
      gap = i + n;
    }
    i += n;
  }
  if (gap < s.size()) out.push_back({gap, s.size(), false});
}

void string_matches(const std::string& s, const std::string& pat, std::vector<Seg>& out) {
  if (pat.empty()) {
    out.push_back({0, s.size(), false});
    return;
  }
  size_t gap = 0;
  for (size_t p = s.find(pat); p != std::string::npos; p = s.find(pat, p + pat.size())) {
    if (gap < p) out.push_back({gap, p, false});
    out.push_back({p, p + pat.size(), true});
    gap = p + pat.size();
  }
  if (gap < s.size()) out.push_back({gap, s.size(), false});
}

void regex_matches(const std::string& s, const icu::RegexPattern& re, std::vector<Seg>& out) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  // UTF-16 index -> byte offset.
  std::vector<size_t> off(size_t(u.length()) + 1, s.size());
  for (size_t i = 0, k = 0; i < s.size();) {
    size_t n = 0;
    const char32_t c = next_cp(s, i, &n);
    off[k] = i;
    k += c > 0xFFFF ? 2 : 1;
    i += n;
  }
  UErrorCode st = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(re.matcher(u, st));
  CBX_CHECK(U_SUCCESS(st), "tokenizer: regex matcher failed (%s)", u_errorName(st));
  size_t gap = 0;
  while (m->find(st) && U_SUCCESS(st)) {
    const size_t b = off[size_t(m->start(st))], e = off[size_t(m->end(st))];
    if (e == b) continue;  // empty matches split nothing
    if (gap < b) out.push_back({gap, b, false});
    out.push_back({b, e, true});
    gap = e;
  }
  CBX_CHECK(U_SUCCESS(st), "tokenizer: regex search failed (%s)", u_errorName(st));
  if (gap < s.size()) out.push_back({gap, s.size(), false});
}

// HF Whitespace pre-tokenizer regex \w+|[^\w\s]+: the runs of word chars and the runs of
// other non-space chars are the kept pieces (returned as non-matches: the regex is inverted).
void whitespace_segments(const std::string& s, std::vector<Seg>& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    char32_t c = next_cp(s, i, &n);
    const size_t b = i;
    const int cls = rust_word_char(c) ? 0 : rust_whitespace(c) ? 2 : 1;
    i += n;
    while (i < s.size()) {
      c = next_cp(s, i, &n);
      const int k = rust_word_char(c) ? 0 : rust_whitespace(c) ? 2 : 1;
      if (k != cls) break;
      i += n;
    }
    out.push_back({b, i, cls == 2});
  }
}

// NormalizedString::split: groups match entries by the delimiter behaviour.
void split_by(const std::string& s, std::vector<Seg>& segs, Behavior beh, bool invert,
              std::vector<std::string>& pieces) {
  if (invert)
    for (Seg& g : segs) g.match = !g.match;
  std::vector<std::pair<size_t, size_t>> keep;
  bool prev = false;
  switch (beh) {
    case Behavior::Removed:
      for (const Seg& g : segs)
        if (!g.match) keep.emplace_back(g.b, g.e);
      break;
    case Behavior::Isolated:
      for (const Seg& g : segs) keep.emplace_back(g.b, g.e);
      break;
    case Behavior::Contiguous:
      for (const Seg& g : segs) {
        if (g.match == prev && !keep.empty())
          keep.back().second = g.e;
        else
          keep.emplace_back(g.b, g.e);
        prev = g.match;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (const Seg& g : segs) {
        if (g.match && !prev && !keep.empty())
          keep.back().second = g.e;
        else
          keep.emplace_back(g.b, g.e);
        prev = g.match;
      }
      break;
    case Behavior::MergedWithNext: {
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& g = segs[k];
        if (g.match && !prev && !keep.empty())
          keep.back().first = g.b;
        else
          keep.emplace_back(g.b, g.e);
        prev = g.match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (auto& [b, e] : keep)
    if (e > b) pieces.push_back(s.substr(b, e - b));
}

Behavior parse_behavior(const json& j, const std::string& what) {
  if (!j.contains("behavior")) return Behavior::Isolated;
  const std::string b = j["behavior"].get<std::string>();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail("%s: unknown split behavior '%s'", what.c_str(), b.c_str());
}

// {"String": "..."} or {"Regex": "..."}.
void parse_pattern(const json& j, HfTextOp& op, const std::string& what) {
  CBX_CHECK(j.contains("pattern") && j["pattern"].is_object(), "%s: '%s' has no pattern", what.c_str(),
            j.value("type", std::string("?")).c_str());
  const json& p = j["pattern"];
  if (p.contains("String")) {
    op.text = p["String"].get<std::string>();
    return;
  }
  CBX_CHECK(p.contains("Regex"), "%s: pattern is neither String nor Regex", what.c_str());
  const std::string r = p["Regex"].get<std::string>();
  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  op.re.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(r), 0, pe, st));
  CBX_CHECK(U_SUCCESS(st) && op.re, "%s: regex '%s' does not compile with ICU (%s)", what.c_str(), r.c_str(),
            u_errorName(st));
}

void parse_normalizer(const json& j, std::vector<std::unique_ptr<HfTextOp>>& ops, const std::string& what) {
  if (j.is_null()) return;
  CBX_CHECK(j.is_object() && j.contains("type"), "%s: normalizer without a type", what.c_str());
  const std::string t = j["type"].get<std::string>();
  if (t == "Sequence") {
    for (const json& k : j.at("normalizers")) parse_normalizer(k, ops, what);
    return;
  }
  auto op = std::make_unique<HfTextOp>();
  if (t == "Lowercase")
    op->kind = OpKind::Lowercase;
  else if (t == "NFD")
    op->kind = OpKind::Nfd;
  else if (t == "NFKD")
    op->kind = OpKind::Nfkd;
  else if (t == "NFC")
    op->kind = OpKind::Nfc;
  else if (t == "NFKC")
    op->kind = OpKind::Nfkc;
  else if (t == "StripAccents")
    op->kind = OpKind::StripAccents;
  else if (t == "Strip") {
    op->kind = OpKind::Strip;
    op->left = j.value("strip_left", true);
    op->right = j.value("strip_right", true);
  } else if (t == "Replace") {
    op->kind = OpKind::Replace;
    parse_pattern(j, *op, what);
    op->content = j.at("content").get<std::string>();
  } else if (t == "Prepend") {
    op->kind = OpKind::Prepend;
    op->text = j.at("prepend").get<std::string>();
  } else {
    fail("%s: normalizer '%s' is not supported", what.c_str(), t.c_str());
  }
  ops.push_back(std::move(op));
}

void parse_pretokenizer(const json& j, std::vector<std::unique_ptr<HfTextOp>>& ops, const std::string& what) {
  if (j.is_null()) return;
  CBX_CHECK(j.is_object() && j.contains("type"), "%s: pre_tokenizer without a type", what.c_str());
  const std::string t = j["type"].get<std::string>();
  if (t == "Sequence") {
    for (const json& k : j.at("pretokenizers")) parse_pretokenizer(k, ops, what);
    return;
  }
  auto op = std::make_unique<HfTextOp>();
  if (t == "Whitespace")
    op->kind = OpKind::Whitespace;
  else if (t == "WhitespaceSplit")
    op->kind = OpKind::WhitespaceSplit;
  else if (t == "BertPreTokenizer")
    op->kind = OpKind::Bert;
  else if (t == "Punctuation") {
    op->kind = OpKind::Punctuation;
    op->behavior = parse_behavior(j, what);
  } else if (t == "Digits") {
    op->kind = OpKind::Digits;
    op->individual_digits = j.value("individual_digits", false);
  } else if (t == "Split") {
    op->kind = OpKind::Split;
    parse_pattern(j, *op, what);
    op->behavior = parse_behavior(j, what);
    op->invert = j.value("invert", false);
  } else {
    fail("%s: pre_tokenizer '%s' is not supported", what.c_str(), t.c_str());
  }
  ops.push_back(std::move(op));
}

std::string apply_normalizer(const HfTextOp& op, const std::string& s) {
  switch (op.kind) {
    case OpKind::Lowercase:
      return rust_lower(s);
    case OpKind::Nfd:
      return unicode_normalize(s, UnicodeForm::NFD);
    case OpKind::Nfkd:
      return unicode_normalize(s, UnicodeForm::NFKD);
    case OpKind::Nfc:
      return unicode_normalize(s, UnicodeForm::NFC);
    case OpKind::Nfkc:
      return unicode_normalize(s, UnicodeForm::NFKC);
    case OpKind::Strip: {
      size_t b = 0, e = s.size();
      std::vector<Seg> segs;
      char_matches(s, rust_whitespace, segs);
      if (op.left)
        for (const Seg& g : segs) {
          if (!g.match) break;
          b = g.e;
        }
      if (op.right)
        for (size_t k = segs.size(); k-- > 0;) {
          if (!segs[k].match || segs[k].b < b) break;
          e = segs[k].b;
        }
      return e > b ? s.substr(b, e - b) : std::string();
    }
    case OpKind::StripAccents: {
      std::string out;
      for (size_t i = 0; i < s.size();) {
        size_t n = 0;
        if (!is_mark(next_cp(s, i, &n))) out.append(s, i, n);
        i += n;
      }
      return out;
    }
    case OpKind::Replace: {
      std::vector<Seg> segs;
      if (op.re)
        regex_matches(s, *op.re, segs);
      else
        string_matches(s, op.text, segs);
      std::string out;
      for (const Seg& g : segs) {
        if (g.match)
          out += op.content;
        else
          out.append(s, g.b, g.e - g.b);
      }
      return out;
    }
    case OpKind::Prepend:
      return s.empty() ? s : op.text + s;
    default:
      CBX_ASSERT(false);
  }
  return s;
}

void apply_pretokenizer(const HfTextOp& op, const std::string& s, std::vector<std::string>& pieces) {
  std::vector<Seg> segs;
  switch (op.kind) {
    case OpKind::Whitespace:
      whitespace_segments(s, segs);
      split_by(s, segs, Behavior::Removed, false, pieces);
      return;
    case OpKind::WhitespaceSplit:
      char_matches(s, rust_whitespace, segs);
      split_by(s, segs, Behavior::Removed, false, pieces);
      return;
    case OpKind::Bert: {
      char_matches(s, rust_whitespace, segs);
      std::vector<std::string> words;
      split_by(s, segs, Behavior::Removed, false, words);
      for (const std::string& w : words) {
        segs.clear();
        char_matches(w, hf_punctuation, segs);
        split_by(w, segs, Behavior::Isolated, false, pieces);
      }
      return;
    }
    case OpKind::Punctuation:
      char_matches(s, hf_punctuation, segs);
      split_by(s, segs, op.behavior, false, pieces);
      return;
    case OpKind::Digits:
      char_matches(s, rust_numeric, segs);
      split_by(s, segs, op.individual_digits ? Behavior::Isolated : Behavior::Contiguous, false, pieces);
      return;
    case OpKind::Split:
      if (op.re)
        regex_matches(s, *op.re, segs);
      else
        string_matches(s, op.text, segs);
      split_by(s, segs, op.behavior, op.invert, pieces);
      return;
    default:
      CBX_ASSERT(false);
  }
}

}  // namespace

HfNormalizer::HfNormalizer() = default;
HfNormalizer::HfNormalizer(const json& j, const std::string& what) { parse_normalizer(j, ops_, what); }
HfNormalizer::~HfNormalizer() = default;
HfNormalizer::HfNormalizer(HfNormalizer&&) noexcept = default;
HfNormalizer& HfNormalizer::operator=(HfNormalizer&&) noexcept = default;

std::string HfNormalizer::apply(const std::string& s) const {
  std::string cur = s;
  for (const auto& op : ops_) cur = apply_normalizer(*op, cur);
  return cur;
}

HfPreTokenizer::HfPreTokenizer() = default;
HfPreTokenizer::HfPreTokenizer(const json& j, const std::string& what) { parse_pretokenizer(j, ops_, what); }
HfPreTokenizer::~HfPreTokenizer() = default;
HfPreTokenizer::HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer& HfPreTokenizer::operator=(HfPreTokenizer&&) noexcept = default;

void HfPreTokenizer::split(const std::string& s, std::vector<std::string>& pieces) const {
  if (s.empty()) return;
  if (ops_.empty()) {
    pieces.push_back(s);
    return;
  }
  std::vector<std::string> cur{s}, next;
  for (const auto& op : ops_) {
    next.clear();
    for (const std::string& p : cur) apply_pretokenizer(*op, p, next);
    cur.swap(next);
  }
  for (std::string& p : cur) pieces.push_back(std::move(p));
}

}  // namespace cbx
