// libFuzzer target for the Multilingual text front-end (src/text/mtl_tokenizer.h, hf_tokenizer.h).
// Input byte 0 picks the mode:
//   < 0xF0: language index (byte % 24; 23 = an unsupported code), the rest is the text, encoded
//           with a built-in tokenizer JSON and Cangjie table. encode must return ids that start
//           with the language tag and lie inside the vocab, or throw cbx::Error (bad UTF-8,
//           unsupported language).
//   >= 0xF0: the rest is a tokenizer JSON. Loading must succeed or throw cbx::Error; a loaded
//           tokenizer encodes a fixed multi-script sentence with ids inside its vocab.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/hf_tokenizer.h"
#include "text/mtl_tokenizer.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_text_mtl: %s\n", what);
  std::abort();
}

const char* const kCodes[24] = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                                "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh", "xx"};

// Character vocabulary over a few scripts, merges, the tags and the Cangjie letters.
std::string builtin_json() {
  std::string vocab, added, merges;
  int id = 0;
  auto add_vocab = [&](const std::string& t) {
    if (!vocab.empty()) vocab += ",";
    vocab += "\"" + t + "\":" + std::to_string(id);
  };
  auto add_special = [&](const std::string& t) {
    add_vocab(t);
    if (!added.empty()) added += ",";
    added += "{\"id\":" + std::to_string(id) + ",\"content\":\"" + t +
             "\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}";
    ++id;
  };
  for (const char* s : {"[STOP]", "[UNK]", "[SPACE]", "[START]"}) add_special(s);
  for (const char* c : kCodes)
    if (std::string(c) != "xx") add_special(std::string("[") + c + "]");
  for (const char* c : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s",
                        "t", "u", "v", "w", "x", "y", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "."})
    add_special(std::string("[cj_") + c + "]");
  const char* chars[] = {"a",
                         "b",
                         "c",
                         "d",
                         "e",
                         "n",
                         "o",
                         "r",
                         "s",
                         "t",
                         "1",
                         "2",
                         ",",
                         ".",
                         "!",
                         "?",
                         "\xcc\x81",
                         "\xce\xb1",
                         "\xd0\xb0",
                         "\xd7\x90",
                         "\xd8\xa7",
                         "\xe0\xa4\x95",
                         "\xe1\x84\x80",
                         "\xe1\x85\xa1",
                         "\xe3\x81\x82",
                         "\xe4\xbd\xa0"};
  for (const char* c : chars) add_vocab(c), ++id;
  for (const char* m : {"a b", "ab c", "e n", "o n", "r e", "s t"}) {
    std::string s(m);
    const size_t sp = s.find(' ');
    add_vocab(s.substr(0, sp) + s.substr(sp + 1));
    ++id;
    if (!merges.empty()) merges += ",";
    merges += "\"" + s + "\"";
  }
  return "{\"added_tokens\":[" + added + "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Whitespace\"}," +
         "\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"unk_token\":\"[UNK]\",\"vocab\":{" + vocab +
         "},\"merges\":[" + merges + "]}}";
}

const cbx::MtlTokenizer& builtin() {
  static const cbx::MtlTokenizer tok = cbx::MtlTokenizer::from_json(
      builtin_json(), {"\xe4\xbd\xa0\tonf", "\xe5\xa5\xbd\tvnd", "\xe4\xb8\x96\tonf", "\xe7\x95\x8c\twl"});
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] < 0xF0) {
    const cbx::MtlTokenizer& tok = builtin();
    const std::string lang = kCodes[data[0] % 24];
    try {
      const std::vector<int32_t> ids = tok.encode(rest, lang);
      if (ids.empty() || ids[0] != tok.token_to_id("[" + lang + "]")) finding("ids do not start with the tag");
      for (int32_t i : ids)
        if (i < 0 || size_t(i) >= tok.vocab_size()) finding("id outside the vocab");
    } catch (const cbx::Error&) {
    }
    return 0;
  }
  try {
    const cbx::HfTokenizer hf = cbx::HfTokenizer::from_json(rest, "fuzz.json");
    const std::vector<int32_t> ids =
        hf.encode("Hello, w\xc3\xb6rld 12 \xd0\xbf\xd1\x80\xd0\xb8 \xe4\xbd\xa0\xe5\xa5\xbd [x]");
    for (int32_t i : ids)
      if (i < 0 || size_t(i) >= hf.vocab_size()) finding("id outside the vocab (JSON mode)");
  } catch (const cbx::Error&) {
  }
  return 0;
}
