// Gpt2Tokenizer::from_gguf: the Turbo / Nano tokenizer from a GGUF's metadata (docs/gguf-format.md,
// "Tokenizer"), shared by the Turbo pipeline and `chatterbox tokenize`.
#include "core/error.h"
#include "core/gguf.h"
#include "text/gpt2_tokenizer.h"

namespace cbx {

Gpt2Tokenizer Gpt2Tokenizer::from_gguf(const GgufFile& f) {
  const GgufValue* model = f.find("tokenizer.ggml.model");
  CBX_CHECK(model && model->type == GgufType::STRING, "%s: no tokenizer.ggml.model", f.path().c_str());
  CBX_CHECK(model->as_string() == "gpt2", "%s: tokenizer '%s' is not the GPT-2 BPE Turbo uses", f.path().c_str(),
            model->as_string().c_str());
  std::vector<std::string> tokens = f.get("tokenizer.ggml.tokens").as_string_array();
  std::vector<std::string> merges = f.get("tokenizer.ggml.merges").as_string_array();
  std::vector<int64_t> types;
  if (const GgufValue* v = f.find("tokenizer.ggml.token_type")) types = v->as_int_array();
  std::vector<Gpt2AddedToken> added;
  std::vector<bool> is_added(tokens.size(), false);
  if (f.has("chatterbox.tokenizer.added_tokens")) {
    std::vector<std::string> at = f.get("chatterbox.tokenizer.added_tokens").as_string_array();
    std::vector<int64_t> ids = f.get("chatterbox.tokenizer.added_token_ids").as_int_array();
    CBX_CHECK(at.size() == ids.size(), "%s: %zu added tokens but %zu ids", f.path().c_str(), at.size(), ids.size());
    for (size_t i = 0; i < at.size(); ++i) {
      CBX_CHECK(ids[i] >= 0 && ids[i] < int64_t(tokens.size()), "%s: added token '%s' id %lld out of range",
                f.path().c_str(), at[i].c_str(), (long long)ids[i]);
      added.push_back({at[i], int32_t(ids[i])});
      is_added[size_t(ids[i])] = true;
    }
  }
  // Control tokens (<|endoftext|>) are special tokens HF matches whole in text.
  for (size_t i = 0; i < types.size() && i < tokens.size(); ++i)
    if (types[i] == 3 && !is_added[i]) added.push_back({tokens[i], int32_t(i)});
  // Added tags at the tail of the id space are not byte-level vocabulary entries.
  size_t n_vocab = tokens.size();
  while (n_vocab > 0 && is_added[n_vocab - 1]) --n_vocab;
  tokens.resize(n_vocab);
  int64_t max_len = 1024;
  if (const GgufValue* v = f.find("chatterbox.tokenizer.model_max_length")) max_len = v->as_int();
  CBX_CHECK(max_len > 0, "%s: model_max_length %lld", f.path().c_str(), (long long)max_len);
  return Gpt2Tokenizer(std::move(tokens), merges, std::move(added), size_t(max_len));
}

}  // namespace cbx
