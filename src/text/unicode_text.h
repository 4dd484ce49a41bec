// Unicode helpers for the text front-ends (ICU underneath): case mapping and normalisation
// with Python / Rust semantics, and the character classes Python str and Rust regex use.
// All functions take and return valid UTF-8 (callers check with utf8_check first).
#pragma once
#include <string>

namespace cbx {

enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

// Python str.lower: full case mapping (SpecialCasing, e.g. U+0130 -> "i\u0307"), root locale,
// Final_Sigma in context (word-final capital sigma -> U+03C2).
std::string py_lower(const std::string& utf8);
// Rust char::to_lowercase applied to every character (HF Lowercase normalizer): full mapping,
// no context, so a capital sigma always becomes U+03C3.
std::string rust_lower(const std::string& utf8);
std::string unicode_normalize(const std::string& utf8, UnicodeForm form);

// Python str.isspace: general category Zs, or bidirectional class WS, B or S.
bool py_isspace(char32_t c);
// Python str.strip() with no argument.
std::string py_strip(const std::string& utf8);
// Rust char::is_whitespace / regex \s: the White_Space property.
bool rust_whitespace(char32_t c);
// Rust regex \w (Unicode): Alphabetic, M*, Nd, Pc, Join_Control.
bool rust_word_char(char32_t c);
// HF Punctuation pre-tokenizer: ASCII punctuation or general category P*.
bool hf_punctuation(char32_t c);
// Rust char::is_numeric: general category Nd, Nl or No.
bool rust_numeric(char32_t c);
// General category Lo (Python unicodedata.category(c) == "Lo").
bool is_other_letter(char32_t c);
// General category M* (Mn, Mc, Me).
bool is_mark(char32_t c);

}  // namespace cbx
