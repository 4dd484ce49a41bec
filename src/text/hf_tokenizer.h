// Hugging Face `tokenizers` JSON (tokenizer.json) interpreter: what Tokenizer.encode(text).ids
// does, for the components a character-level BPE front-end uses.
//
//   added tokens      leftmost-longest match; non-normalized ones on the raw text, then
//                     normalized ones on the normalized pieces; single_word / lstrip / rstrip
//   normalizer        null, Sequence, Lowercase, NFD, NFKD, NFC, NFKC, Strip, StripAccents,
//                     Replace (String or Regex pattern), Prepend
//   pre_tokenizer     null, Sequence, Whitespace (\w+|[^\w\s]+ with Rust regex Unicode classes),
//                     WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, Split (String or
//                     Regex pattern, all five delimiter behaviours, invert)
//   model             BPE: vocab, merges ("a b" or ["a","b"]), unk_token (absent: unknown
//                     characters are dropped, as HF does), fuse_unk, byte_fallback,
//                     continuing_subword_prefix, end_of_word_suffix, ignore_merges
//   post_processor    null, ByteLevel (no id change), TemplateProcessing (single sequence),
//                     BertProcessing, RobertaProcessing, Sequence
//   truncation        max_length and direction; padding: Fixed / BatchLongest, direction
// Anything else is rejected at load time with an error naming the component.
// BPE merging uses a rank-ordered heap (lowest rank, then leftmost first, as HF does), so a
// word of n characters costs O(n log n).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cbx {

struct HfAddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

class HfTokenizer {
 public:
  // `what` names the source in error messages (file name or GGUF key).
  static HfTokenizer from_json(const std::string& json_text, const std::string& what = "tokenizer JSON");
  ~HfTokenizer();
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;

  // Tokenizer.encode(text).ids (add_special_tokens=True: the post-processor's tokens, if any).
  // Throws cbx::Error on invalid UTF-8.
  std::vector<int32_t> encode(const std::string& utf8) const;

  int32_t token_to_id(const std::string& tok) const;  // added tokens first, then model vocab; -1
  size_t vocab_size() const;                          // highest id + 1
  const std::vector<HfAddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
