// Strict UTF-8 decoding/encoding shared by the text front-end and the pipeline:
// no overlongs, no surrogates, nothing above U+10FFFF.
#pragma once
#include <cstddef>
#include <string>

namespace cbx {

// Throws cbx::Error("text: invalid UTF-8 at byte N") where N is the 0-based offset of the
// first byte of the first malformed sequence.
void utf8_check(const std::string& s);

// Decodes one code point at s[i]. On success returns its byte length (1..4) and sets *cp;
// on a malformed sequence returns 0 and sets *bad_len to the length of the maximal
// ill-formed subpart (>= 1), the unit Python's errors="replace" replaces with one U+FFFD.
size_t utf8_next(const std::string& s, size_t i, char32_t* cp, size_t* bad_len = nullptr);

// Appends the UTF-8 encoding of a valid scalar value.
void utf8_append(std::string& out, char32_t cp);

}  // namespace cbx
