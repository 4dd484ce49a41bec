// GPT-2 byte-level BPE tokenizer (Chatterbox Turbo / Nano text front-end, spec §4.2).
//
// encode(text):
//   1. added tokens (the Turbo tags, any special tokens) are matched first: leftmost, then
//      longest, case-sensitive, no whitespace stripping around them;
//   2. every span between them is pre-tokenized with the GPT-2 pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (Python `regex` semantics: \s = White_Space, \p{L} = gc L*, \p{N} = gc N*),
//   3. each piece's UTF-8 bytes are mapped through bytes_to_unicode and merged by rank.
// No BOS/EOS is added (Turbo adds none).
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cbx {

class GgufFile;

struct Gpt2AddedToken {
  std::string content;  // raw UTF-8 text, e.g. "[sigh]" (not byte-level form)
  int32_t id;
};

class Gpt2Tokenizer {
 public:
  static constexpr size_t kNoMaxLength = std::numeric_limits<size_t>::max();

  // tokens:  id -> token string in byte-level form ("Ġthe"); ids 0..tokens.size()-1.
  // merges:  "a b" strings in rank order (no "#version" header).
  // added:   added/special tokens; an id may reuse a slot of `tokens` or extend past it,
  //          but the final id space must have no holes.
  // model_max_length: truncation length used by encode(text, true).
  Gpt2Tokenizer(std::vector<std::string> tokens, const std::vector<std::string>& merges,
                std::vector<Gpt2AddedToken> added = {}, size_t model_max_length = kNoMaxLength);
  ~Gpt2Tokenizer();
  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;

  // Hugging Face files. added_tokens_json / tokenizer_config_json may be "" (absent).
  // tokenizer_config.json supplies model_max_length (values >= 1e15 mean "no limit"),
  // added_tokens_decoder entries and bos/eos/unk/pad token strings (added like HF does).
  static Gpt2Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt,
                                  const std::string& added_tokens_json = "",
                                  const std::string& tokenizer_config_json = "");
  // Same, from a directory holding vocab.json + merges.txt and optionally added_tokens.json,
  // tokenizer_config.json.
  static Gpt2Tokenizer from_dir(const std::string& dir);
  // From a Turbo / Nano GGUF's metadata (tokenizer.ggml.*, chatterbox.tokenizer.*; docs/gguf-format.md).
  static Gpt2Tokenizer from_gguf(const GgufFile& f);

  // Throws cbx::Error("text: invalid UTF-8 at byte N") on malformed input. With truncate,
  // keeps the first model_max_length() ids (HF truncation_side="right").
  std::vector<int32_t> encode(const std::string& utf8, bool truncate = false) const;

  // Concatenates token bytes (added tokens verbatim); malformed UTF-8 byte runs become
  // U+FFFD as in Python bytes.decode(errors="replace"). Throws on an id out of range.
  std::string decode(const std::vector<int32_t>& ids) const;

  // len(tokenizer): base vocab + added tokens (50276 for Turbo).
  size_t size() const;
  size_t model_max_length() const;
  // -1 when absent. Looks at added tokens first, then the byte-level vocab.
  int32_t token_to_id(const std::string& token) const;
  // Byte-level form for vocab ids, raw content for added ids.
  const std::string& id_to_token(int32_t id) const;
  const std::vector<Gpt2AddedToken>& added_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
