#include "text/utf8.h"

#include "core/error.h"

namespace cbx {

size_t utf8_next(const std::string& s, size_t i, char32_t* cp, size_t* bad_len) {
  const size_t n = s.size();
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c0 = b(i);
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  }
  // Length and the allowed range of the second byte (Unicode Table 3-7).
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    len = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    len = 3;
    if (c0 == 0xE0) lo = 0xA0;  // no overlongs
    if (c0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    len = 4;
    if (c0 == 0xF0) lo = 0x90;  // no overlongs
    if (c0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  }
  size_t good = 1;  // bytes of a well-formed prefix seen so far
  if (len != 0) {
    for (; good < len; ++good) {
      if (i + good >= n) break;
      const unsigned char c = b(i + good);
      const unsigned char l = good == 1 ? lo : 0x80, h = good == 1 ? hi : 0xBF;
      if (c < l || c > h) break;
    }
    if (good == len) {
      char32_t v = c0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
      for (size_t k = 1; k < len; ++k) v = (v << 6) | (b(i + k) & 0x3F);
      *cp = v;
      return len;
    }
  }
  if (bad_len) *bad_len = good;
  return 0;
}

void utf8_check(const std::string& s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_next(s, i, &cp);
    if (len == 0) fail("text: invalid UTF-8 at byte %zu", i);
    i += len;
  }
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace cbx
