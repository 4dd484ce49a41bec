#include "text/unicode_text.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include "core/error.h"
#include "text/utf8.h"

namespace cbx {
namespace {

icu::UnicodeString to_icu(const std::string& s) { return icu::UnicodeString::fromUTF8(s); }

std::string from_icu(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace

std::string py_lower(const std::string& utf8) {
  if (utf8.empty()) return utf8;
  icu::UnicodeString u = to_icu(utf8);
  // Root locale (""): no Turkish/Lithuanian tailoring, like Python. ICU applies the Unicode
  // Final_Sigma condition as CPython's str.lower does.
  u.toLower(icu::Locale::getRoot());
  return from_icu(u);
}

std::string rust_lower(const std::string& utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(utf8, i, &cp);
    CBX_ASSERT(n > 0);
    i += n;
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? char(cp + 32) : char(cp));
      continue;
    }
    // One character alone: full mapping without context.
    icu::UnicodeString u(static_cast<UChar32>(cp));
    u.toLower(icu::Locale::getRoot());
    u.toUTF8String(out);
  }
  return out;
}

std::string unicode_normalize(const std::string& utf8, UnicodeForm form) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::NFC:
      n = icu::Normalizer2::getNFCInstance(st);
      break;
    case UnicodeForm::NFD:
      n = icu::Normalizer2::getNFDInstance(st);
      break;
    case UnicodeForm::NFKC:
      n = icu::Normalizer2::getNFKCInstance(st);
      break;
    case UnicodeForm::NFKD:
      n = icu::Normalizer2::getNFKDInstance(st);
      break;
  }
  CBX_CHECK(U_SUCCESS(st) && n, "text: ICU normalizer unavailable (%s)", u_errorName(st));
  const icu::UnicodeString out = n->normalize(to_icu(utf8), st);
  CBX_CHECK(U_SUCCESS(st), "text: ICU normalization failed (%s)", u_errorName(st));
  return from_icu(out);
}

bool py_isspace(char32_t c) {
  if (u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR) return true;
  const UCharDirection d = u_charDirection(static_cast<UChar32>(c));
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

std::string py_strip(const std::string& utf8) {
  size_t begin = utf8.size(), end = 0;
  for (size_t i = 0; i < utf8.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(utf8, i, &cp);
    CBX_ASSERT(n > 0);
    if (!py_isspace(cp)) {
      if (begin == utf8.size()) begin = i;
      end = i + n;
    }
    i += n;
  }
  return begin < end ? utf8.substr(begin, end - begin) : std::string();
}

bool rust_whitespace(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

bool rust_word_char(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool hf_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  return u_ispunct(static_cast<UChar32>(c));
}

bool rust_numeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_other_letter(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_OTHER_LETTER; }

bool is_mark(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

}  // namespace cbx
