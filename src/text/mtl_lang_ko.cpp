// Korean: upstream korean_normalize.
#include "core/error.h"
#include "text/mtl_lang.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {

std::string ko_normalize(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(text, i, &cp);
    CBX_ASSERT(n > 0);
    // Upstream's range ends at U+D7AF (not the last syllable U+D7A3): the 12 unassigned code
    // points after it are decomposed by the same formula, so we do the same.
    if (cp >= 0xAC00 && cp <= 0xD7AF) {
      const char32_t s = cp - 0xAC00;
      utf8_append(out, 0x1100 + s / (21 * 28));
      utf8_append(out, 0x1161 + (s % (21 * 28)) / 28);
      if (s % 28) utf8_append(out, 0x11A7 + s % 28);
    } else {
      out.append(text, i, n);
    }
    i += n;
  }
  return py_strip(out);
}

}  // namespace cbx
