// Multilingual text tokenizer (spec §4.3, upstream models/tokenizers/tokenizer.py MTLTokenizer).
//
// encode(text, lang) applies, in upstream's order, to text that already went through
// punc_norm(…, PuncNormFlavor::Multilingual):
//   1. lower-case (Python str.lower: full case mapping, root locale, final sigma),
//   2. Unicode NFKD,
//   3. the language step: zh = word segmentation + Cangjie codes, ja = katakana kept, kanji
//      passed through (no reading dictionary), ko = conjoining jamo + strip, he/ru = none
//      (upstream's optional dicta / stresser are absent by default); see docs/multilingual.md,
//   4. prepend "[xx]", 5. every ' ' -> "[SPACE]",
//   6. the Hugging Face `tokenizers` pipeline of the model's JSON (added tokens, normalizer,
//      pre-tokenizer, BPE, post-processor) and its ids.
// No SOT/EOT is added here (T3 adds them, as upstream does).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cbx {

class GgufFile;

class MtlTokenizer {
 public:
  // chatterbox.tokenizer.hf_json (+ chatterbox.tokenizer.cangjie when present).
  static MtlTokenizer from_gguf(const GgufFile& f);
  // The tokenizer JSON file and, optionally, Cangjie5_TC.json (a JSON list of "char\tcode").
  static MtlTokenizer from_files(const std::string& json_path, const std::string& cangjie_path = "");
  // In-memory forms: the JSON text and the "char\tcode" entries in file order.
  static MtlTokenizer from_json(const std::string& hf_json, const std::vector<std::string>& cangjie = {});

  ~MtlTokenizer();
  MtlTokenizer(MtlTokenizer&&) noexcept;
  MtlTokenizer& operator=(MtlTokenizer&&) noexcept;

  // Upstream MTLTokenizer.encode(text, language_id) (after punc_norm). Throws cbx::Error for an
  // unknown language (the message lists the supported ones) or invalid UTF-8. Language codes
  // are matched case-insensitively ("FR" == "fr"), as upstream lower-cases the tag.
  std::vector<int32_t> encode(const std::string& text, const std::string& lang) const;
  std::vector<std::string> languages() const;  // the codes the model supports, sorted

  // ---- stages (tests, debugging) ----
  // Steps 1-5: the exact string handed to the HF tokenizer.
  std::string prepare(const std::string& text, const std::string& lang) const;
  // Step 6 alone: HF Tokenizer.encode(s).ids.
  std::vector<int32_t> encode_prepared(const std::string& s) const;

  size_t vocab_size() const;                          // highest id + 1
  int32_t token_to_id(const std::string& tok) const;  // -1 when absent
  bool has_cangjie() const;                           // a non-empty Cangjie table was loaded

 private:
  struct Impl;
  explicit MtlTokenizer(std::unique_ptr<Impl> impl);
  static MtlTokenizer from_json_named(const std::string& hf_json, const std::vector<std::string>& cangjie,
                                      const std::string& json_what, const std::string& cj_what);
  std::unique_ptr<Impl> impl_;
};

// "fr" -> "French" for the 23 Multilingual languages; nullptr for anything else.
const char* language_name(const std::string& code);
// The 23 codes upstream's SUPPORTED_LANGUAGES lists, sorted.
const std::vector<std::string>& mtl_language_codes();

}  // namespace cbx
