#include "text/punc_norm.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <string_view>
#include <vector>

#include "core/error.h"
#include "text/utf8.h"

namespace cbx {
namespace {

struct Replacement {
  std::string_view from, to;
};

// tts_turbo.py punc_to_replace.
constexpr Replacement kTurboTable[] = {
    {"\u2026", ", "},                    // …
    {":", ","},       {"\u2014", "-"},   // — em dash
    {"\u2013", "-"},                     // – en dash
    {" ,", ","},      {"\u201C", "\""},  // “
    {"\u201D", "\""},                    // ”
    {"\u2018", "'"},                     // ‘
    {"\u2019", "'"},                     // ’
};

// mtl_tts.py (and tts.py) punc_to_replace.
constexpr Replacement kMultilingualTable[] = {
    {"...", ", "},   {"\u2026", ", "}, {":", ","},       {" - ", ", "},    {";", ", "},     {"\u2014", "-"},
    {"\u2013", "-"}, {" ,", ","},      {"\u201C", "\""}, {"\u201D", "\""}, {"\u2018", "'"}, {"\u2019", "'"},
};

constexpr std::string_view kTurboEnders[] = {".", "!", "?", "-", ","};
constexpr std::string_view kMultilingualEnders[] = {".",      "!",      "?",      "-",     ",", "\u3001",
                                                    "\uFF0C", "\u3002", "\uFF1F", "\uFF01"};  // 、 ， 。 ？ ！

constexpr const char* kEmptyText = "You need to add some text for me to talk.";

// Python str.isspace (used by str.split()): general category Zs, or bidirectional class
// WS, B or S. Wider than White_Space on \x1c..\x1f; narrower on nothing else.
bool py_isspace(char32_t c) {
  if (u_charType(c) == U_SPACE_SEPARATOR) return true;
  const UCharDirection d = u_charDirection(c);
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

// Python str.upper of one code point: full (SpecialCasing) mapping, locale independent.
std::string py_upper(char32_t c) {
  UChar src[2];
  int32_t src_len = 0;
  UBool err_unused = false;
  U16_APPEND(src, src_len, 2, c, err_unused);
  (void)err_unused;
  UChar dst[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t dst_len = u_strToUpper(dst, 8, src, src_len, "", &status);
  CBX_ASSERT(U_SUCCESS(status) && dst_len <= 8);
  std::string out;
  for (int32_t k = 0; k < dst_len;) {
    UChar32 u;
    U16_NEXT(dst, k, dst_len, u);
    utf8_append(out, static_cast<char32_t>(u));
  }
  return out;
}

// Python str.replace: leftmost, non-overlapping. Byte-wise search is exact on valid UTF-8.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t start = 0;
  while (pos != std::string::npos) {
    out.append(s, start, pos - start);
    out.append(to);
    start = pos + from.size();
    pos = s.find(from, start);
  }
  out.append(s, start, std::string::npos);
  s.swap(out);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string punc_norm(const std::string& utf8, PuncNormFlavor flavor) {
  utf8_check(utf8);
  if (utf8.empty()) return kEmptyText;

  // 1. Capitalise the first code point (before whitespace handling, so a leading space blocks it).
  char32_t first;
  const size_t first_len = utf8_next(utf8, 0, &first);
  std::string text;
  if (u_hasBinaryProperty(static_cast<UChar32>(first), UCHAR_LOWERCASE)) {
    text = py_upper(first);
    text.append(utf8, first_len, std::string::npos);
  } else {
    text = utf8;
  }

  // 2. " ".join(text.split())
  {
    std::string joined;
    joined.reserve(text.size());
    bool pending_space = false;
    char32_t cp;
    for (size_t i = 0; i < text.size();) {
      const size_t len = utf8_next(text, i, &cp);
      CBX_ASSERT(len != 0);
      if (py_isspace(cp)) {
        pending_space = !joined.empty();
      } else {
        if (pending_space) joined += ' ';
        pending_space = false;
        joined.append(text, i, len);
      }
      i += len;
    }
    text.swap(joined);
  }

  // 3. Replacement table, in order.
  if (flavor == PuncNormFlavor::Turbo) {
    for (const auto& r : kTurboTable) replace_all(text, r.from, r.to);
  } else {
    for (const auto& r : kMultilingualTable) replace_all(text, r.from, r.to);
  }

  // 4. rstrip(" ") and terminate the sentence.
  while (!text.empty() && text.back() == ' ') text.pop_back();
  bool ended = false;
  if (flavor == PuncNormFlavor::Turbo) {
    for (auto e : kTurboEnders) ended = ended || ends_with(text, e);
  } else {
    for (auto e : kMultilingualEnders) ended = ended || ends_with(text, e);
  }
  if (!ended) text += '.';
  return text;
}

}  // namespace cbx
