// Normalizers and pre-tokenizers of a Hugging Face tokenizer.json (see hf_tokenizer.h for the
// supported list). Strings are valid UTF-8; pieces are returned as substrings.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace cbx {

struct HfTextOp;  // one normalizer or pre-tokenizer step (hf_text_ops.cpp)

class HfNormalizer {
 public:
  HfNormalizer();
  HfNormalizer(const nlohmann::json& j, const std::string& what);  // j may be null: identity
  ~HfNormalizer();
  HfNormalizer(HfNormalizer&&) noexcept;
  HfNormalizer& operator=(HfNormalizer&&) noexcept;

  bool identity() const { return ops_.empty(); }
  std::string apply(const std::string& s) const;

 private:
  std::vector<std::unique_ptr<HfTextOp>> ops_;  // Sequence flattened
};

class HfPreTokenizer {
 public:
  HfPreTokenizer();
  HfPreTokenizer(const nlohmann::json& j, const std::string& what);  // j may be null: one piece
  ~HfPreTokenizer();
  HfPreTokenizer(HfPreTokenizer&&) noexcept;
  HfPreTokenizer& operator=(HfPreTokenizer&&) noexcept;

  // Appends the non-empty pieces of s.
  void split(const std::string& s, std::vector<std::string>& pieces) const;

 private:
  std::vector<std::unique_ptr<HfTextOp>> ops_;  // Sequence flattened; applied to every piece in turn
};

}  // namespace cbx
