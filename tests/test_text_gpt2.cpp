// Text front-end for Chatterbox Turbo: punc_norm (both flavours) and the GPT-2 byte-level BPE
// tokenizer against the golden tokenizations in ../shared/data/gpt2 (read in place).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/gpt2_tokenizer.h"
#include "text/punc_norm.h"

namespace {

using cbx::Gpt2Tokenizer;
using cbx::PuncNormFlavor;

// ../shared/data/gpt2 beside the source tree (CBX_SOURCE_DIR from the environment, else the
// compile-time value). Missing data is a failure, never a skip.
std::string gpt2_dir() {
  const char* env = std::getenv("CBX_SOURCE_DIR");
  const std::string src = env && *env ? env : CBX_SOURCE_DIR;
  return src + "/../shared/data/gpt2";
}

bool have_data(std::string* why) {
  const std::string d = gpt2_dir();
  for (const char* f : {"vocab.json", "merges.txt", "added_tokens.json", "golden.jsonl"}) {
    if (!std::filesystem::exists(d + "/" + f)) {
      *why = "missing test data " + d + "/" + f + " (the shared/ directory must sit beside the repository checkout)";
      return false;
    }
  }
  return true;
}

#define REQUIRE_DATA()                     \
  do {                                     \
    std::string why_;                      \
    if (!have_data(&why_)) FAIL() << why_; \
  } while (0)

const Gpt2Tokenizer& tokenizer() {
  static const Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(gpt2_dir());
  return tok;
}

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Golden> read_golden() {
  std::ifstream in(gpt2_dir() + "/golden.jsonl");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
  }
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cbx::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string turbo(const std::string& s) { return cbx::punc_norm(s, PuncNormFlavor::Turbo); }
std::string mtl(const std::string& s) { return cbx::punc_norm(s, PuncNormFlavor::Multilingual); }

// ---------------- GPT-2 tokenizer ----------------

TEST(Gpt2Tokenizer, LoadsVocab) {
  REQUIRE_DATA();
  const auto& tok = tokenizer();
  EXPECT_EQ(tok.size(), 50276u);
  EXPECT_EQ(tok.token_to_id("\xC4\xA0the"), 262);  // "Ġthe"
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok.token_to_id("[sigh]"), 50268);
  EXPECT_EQ(tok.token_to_id("[clear throat]"), 50267);
  EXPECT_EQ(tok.token_to_id("no such token"), -1);
  EXPECT_EQ(tok.id_to_token(50275), "[laugh]");
  EXPECT_EQ(tok.added_tokens().size(), 19u);
  EXPECT_EQ(tok.model_max_length(), Gpt2Tokenizer::kNoMaxLength);  // no tokenizer_config.json
}

TEST(Gpt2Tokenizer, GoldenEncodeDecode) {
  REQUIRE_DATA();
  const auto golden = read_golden();
  ASSERT_EQ(golden.size(), 60u);
  const auto& tok = tokenizer();
  for (size_t i = 0; i < golden.size(); ++i) {
    const auto& g = golden[i];
    EXPECT_EQ(tok.encode(g.text), g.ids) << "golden line " << i + 1 << ": " << g.text;
    EXPECT_EQ(tok.decode(g.ids), g.text) << "golden line " << i + 1;
  }
  // Second pass runs through the BPE cache.
  for (const auto& g : golden) EXPECT_EQ(tok.encode(g.text), g.ids) << g.text;
}

// The in-memory constructor (what the GGUF loader uses) agrees with the file loader.
TEST(Gpt2Tokenizer, InMemoryConstructorMatchesGolden) {
  REQUIRE_DATA();
  const std::string d = gpt2_dir();
  nlohmann::json vocab = nlohmann::json::parse(std::ifstream(d + "/vocab.json"));
  std::vector<std::string> tokens(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) tokens[it.value().get<size_t>()] = it.key();
  std::vector<std::string> merges;
  {
    std::ifstream in(d + "/merges.txt");
    std::string line;
    std::getline(in, line);  // #version
    while (std::getline(in, line))
      if (!line.empty()) merges.push_back(line);
  }
  ASSERT_EQ(merges.size(), 50000u);
  std::vector<cbx::Gpt2AddedToken> added;
  nlohmann::json at = nlohmann::json::parse(std::ifstream(d + "/added_tokens.json"));
  for (auto it = at.begin(); it != at.end(); ++it) added.push_back({it.key(), it.value().get<int32_t>()});

  Gpt2Tokenizer tok(std::move(tokens), merges, std::move(added), 1024);
  EXPECT_EQ(tok.size(), 50276u);
  EXPECT_EQ(tok.model_max_length(), 1024u);
  for (const auto& g : read_golden()) {
    EXPECT_EQ(tok.encode(g.text), g.ids) << g.text;
    EXPECT_EQ(tok.decode(g.ids), g.text);
  }
}

TEST(Gpt2Tokenizer, InvalidUtf8) {
  REQUIRE_DATA();
  const auto& tok = tokenizer();
  EXPECT_EQ(error_of([&] { tok.encode("ab\xFF"); }), "text: invalid UTF-8 at byte 2");
  EXPECT_EQ(error_of([&] { tok.encode("[sigh]\xC3"); }), "text: invalid UTF-8 at byte 6");
  EXPECT_EQ(error_of([&] { tok.encode("\xED\xA0\x80"); }),
            "text: invalid UTF-8 at byte 0");  // surrogate
}

TEST(Gpt2Tokenizer, DecodeReplacesBrokenUtf8) {
  REQUIRE_DATA();
  const auto& tok = tokenizer();
  // Golden "日本語..." starts [33768, 98]: E6 97 | A5. Python:
  // b"\xe6\x97".decode(errors="replace").
  EXPECT_EQ(tok.decode({33768}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode({33768, 98}), "\xE6\x97\xA5");
  EXPECT_EQ(tok.decode({98, 50268}), "\xEF\xBF\xBD[sigh]");
  EXPECT_EQ(tok.decode({}), "");
  EXPECT_NE(error_of([&] { tok.decode({50276}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.decode({-1}); }).find("out of range"), std::string::npos);
}

TEST(Gpt2Tokenizer, Truncation) {
  REQUIRE_DATA();
  const auto& tok = tokenizer();
  std::string long_text;
  for (int i = 0; i < 50; ++i) long_text += "hello world ";
  EXPECT_EQ(tok.encode(long_text, true), tok.encode(long_text));  // no limit configured
}

TEST(Gpt2Tokenizer, TokenizerConfig) {
  REQUIRE_DATA();
  const auto dir = std::filesystem::temp_directory_path() / ("cbx_test_text_gpt2_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cfg = (dir / "tokenizer_config.json").string();
  std::ofstream(cfg) << R"({"model_max_length": 8, "eos_token": "<|endoftext|>",
    "added_tokens_decoder": {"50256": {"content": "<|endoftext|>", "special": true}}})";
  const std::string d = gpt2_dir();
  const Gpt2Tokenizer tok =
      Gpt2Tokenizer::from_files(d + "/vocab.json", d + "/merges.txt", d + "/added_tokens.json", cfg);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(tok.model_max_length(), 8u);
  EXPECT_EQ(tok.size(), 50276u);
  // The special token is matched whole, like the tags.
  EXPECT_EQ(tok.encode("Hi<|endoftext|>[sigh]"), (std::vector<int32_t>{17250, 50256, 50268}));
  EXPECT_EQ(tok.decode({17250, 50256}), "Hi<|endoftext|>");
  std::string long_text;
  for (int i = 0; i < 20; ++i) long_text += "hello world ";
  const auto ids = tok.encode(long_text, true);
  ASSERT_EQ(ids.size(), 8u);
  const auto full = tok.encode(long_text);
  EXPECT_EQ(ids, std::vector<int32_t>(full.begin(), full.begin() + 8));
}

// A hand-built vocabulary to pin merge order and added-token matching.
TEST(Gpt2Tokenizer, SyntheticMergesAndTags) {
  // Byte-level alphabet for the bytes we use: 'a' 'b' ' ' (Ġ = U+0120).
  std::vector<std::string> tokens = {"a",
                                     "b",
                                     "\xC4\xA0",
                                     "aa",
                                     "ab",
                                     "aaa",
                                     "\xC4\xA0"
                                     "a"};
  // Ranks: (a,a) before (a,b) before (aa,a) before (Ġ,a).
  std::vector<std::string> merges = {"a a", "a b", "aa a", "\xC4\xA0 a"};
  Gpt2Tokenizer tok(tokens, merges, {{"<x>", 7}, {"<xy>", 8}});
  EXPECT_EQ(tok.size(), 9u);
  // "aaaa": (a,a) merges leftmost-first -> aa aa (aa,a never applies).
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{3, 3}));
  // "aaa": aa a -> aaa
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{5}));
  // "aab": (a,a) rank 0 beats (a,b) rank 1 -> aa b
  EXPECT_EQ(tok.encode("aab"), (std::vector<int32_t>{3, 1}));
  // " ab": Ġ a b; (a,b) rank 1 beats (Ġ,a) rank 3 -> Ġ ab
  EXPECT_EQ(tok.encode(" ab"), (std::vector<int32_t>{2, 4}));
  // Longest added token at the leftmost position; no whitespace stripping.
  EXPECT_EQ(tok.encode("a<xy>b <x>"), (std::vector<int32_t>{0, 8, 1, 2, 7}));
  EXPECT_EQ(tok.decode({0, 8, 1, 2, 7}), "a<xy>b <x>");
  // A piece whose bytes are not in the vocab is an error, not a silent drop.
  EXPECT_NE(error_of([&] { tok.encode("c"); }).find("not in the vocab"), std::string::npos);
}

TEST(Gpt2Tokenizer, ConstructorValidation) {
  EXPECT_NE(error_of([] { Gpt2Tokenizer({"a", "a"}, {}); }).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of([] { Gpt2Tokenizer({"a"}, {"a"}); }).find("is not 'a b'"), std::string::npos);
  EXPECT_NE(error_of([] { Gpt2Tokenizer({"a"}, {}, {{"<x>", 3}}); }).find("neither"), std::string::npos);
  EXPECT_NE(error_of([] { Gpt2Tokenizer({"a"}, {}, {{"<x>", 1}, {"<y>", 1}}); }).find("share id"), std::string::npos);
  EXPECT_NE(error_of([] { Gpt2Tokenizer({"a b"}, {}); }).find("byte-level"), std::string::npos);
}

// ---------------- punc_norm ----------------

TEST(PuncNorm, EmptyString) {
  EXPECT_EQ(turbo(""), "You need to add some text for me to talk.");
  EXPECT_EQ(mtl(""), "You need to add some text for me to talk.");
  // Whitespace-only input is not empty: it collapses to "" and then gets the full stop.
  EXPECT_EQ(turbo("   "), ".");
  EXPECT_EQ(mtl("\t\n"), ".");
}

TEST(PuncNorm, CapitalisesFirstCharacter) {
  EXPECT_EQ(turbo("hello there"), "Hello there.");
  EXPECT_EQ(turbo("\xC3\xA9t\xC3\xA9"), "\xC3\x89t\xC3\xA9.");  // été -> Été
  EXPECT_EQ(mtl("\xCE\xB1\xCE\xB2"), "\xCE\x91\xCE\xB2.");      // αβ -> Αβ
  EXPECT_EQ(turbo("\xC3\x9F"
                  "ab"),
            "SSab.");                           // ß -> SS (full mapping)
  EXPECT_EQ(turbo("\xEF\xAC\x81ne"), "FIne.");  // ﬁ ligature -> FI
  EXPECT_EQ(turbo("\xC7\x86"
                  "a"),
            "\xC7\x84"
            "a.");                                                            // ǆ -> Ǆ (upper, not title)
  EXPECT_EQ(turbo("\xD0\xBF\xD1\x80\xD0\xB8"), "\xD0\x9F\xD1\x80\xD0\xB8.");  // при -> При
  EXPECT_EQ(turbo("Already"), "Already.");
  EXPECT_EQ(turbo("1st"), "1st.");
  EXPECT_EQ(turbo("\xE6\x97\xA5"), "\xE6\x97\xA5.");  // 日: not cased
  // Only the first character, and before whitespace collapsing: a leading space blocks it.
  EXPECT_EQ(turbo(" hello"), "hello.");
  EXPECT_EQ(turbo("hello world"), "Hello world.");
}

TEST(PuncNorm, CollapsesWhitespaceLikePythonSplit) {
  EXPECT_EQ(turbo("a  \t b\n\nc\r\n "), "A b c.");
  EXPECT_EQ(turbo("  a  \t b\n\nc\r\n "), "a b c.");  // leading space blocked capitalisation
  // Unicode whitespace per str.isspace: NBSP, ideographic space, line separator, NEL, U+001C.
  EXPECT_EQ(turbo("a\xC2\xA0"
                  "b\xE3\x80\x80"
                  "c\xE2\x80\xA8"
                  "d\xC2\x85"
                  "e\x1C"
                  "f\x0B"
                  "g"),
            "A b c d e f g.");
  EXPECT_EQ(turbo("a\xE2\x80\x83\xE2\x80\xAF"
                  "b"),
            "A b.");  // em space + narrow NBSP
  // Not whitespace for str.split: zero-width space, word joiner.
  EXPECT_EQ(turbo("a\xE2\x80\x8B"
                  "b\xE2\x81\xA0"
                  "c"),
            "A\xE2\x80\x8B"
            "b\xE2\x81\xA0"
            "c.");
}

TEST(PuncNorm, TurboTable) {
  EXPECT_EQ(turbo("Wait\xE2\x80\xA6what"), "Wait, what.");  // … -> ", "
  EXPECT_EQ(turbo("Note: this"), "Note, this.");            // : -> ,
  EXPECT_EQ(turbo("A\xE2\x80\x94"
                  "b"),
            "A-b.");  // em dash
  EXPECT_EQ(turbo("A\xE2\x80\x93"
                  "b"),
            "A-b.");                                          // en dash
  EXPECT_EQ(turbo("A , b"), "A, b.");                         // " ," -> ","
  EXPECT_EQ(turbo("\xE2\x80\x9CHi\xE2\x80\x9D"), "\"Hi\".");  // “ ”
  EXPECT_EQ(turbo("\xE2\x80\x98Hi\xE2\x80\x99"), "'Hi'.");    // ‘ ’
  // Rows only in the multilingual table are left alone.
  EXPECT_EQ(turbo("Wait... a - b; c"), "Wait... a - b; c.");
  // In order: … gives " , " which the later " ," row folds.
  EXPECT_EQ(turbo("A \xE2\x80\xA6"
                  "b"),
            "A, b.");
  // A trailing … leaves ", " -> rstrip -> ends with ",".
  EXPECT_EQ(turbo("Hmm\xE2\x80\xA6"), "Hmm,");
}

TEST(PuncNorm, MultilingualTable) {
  EXPECT_EQ(mtl("Wait...what"), "Wait, what.");           // ... -> ", "
  EXPECT_EQ(mtl("Wait\xE2\x80\xA6what"), "Wait, what.");  // … -> ", "
  EXPECT_EQ(mtl("Note: this"), "Note, this.");            // : -> ,
  EXPECT_EQ(mtl("A - b"), "A, b.");                       // " - " -> ", "
  EXPECT_EQ(mtl("A;b"), "A, b.");                         // ; -> ", "
  EXPECT_EQ(mtl("A\xE2\x80\x94"
                "b"),
            "A-b.");  // em dash
  EXPECT_EQ(mtl("A\xE2\x80\x93"
                "b"),
            "A-b.");                                        // en dash
  EXPECT_EQ(mtl("A , b"), "A, b.");                         // " ," -> ","
  EXPECT_EQ(mtl("\xE2\x80\x9CHi\xE2\x80\x9D"), "\"Hi\".");  // “ ”
  EXPECT_EQ(mtl("\xE2\x80\x98Hi\xE2\x80\x99"), "'Hi'.");    // ‘ ’
  // Order matters: "...." -> ", ." ; "a ; b" -> "a ,  b" -> "a,  b" (no re-collapse).
  EXPECT_EQ(mtl("Wait.... ok"), "Wait, . ok.");
  EXPECT_EQ(mtl("a ; b"), "A,  b.");
  // " - " runs before the dash rows, so a spaced em dash becomes "-", not ", ".
  EXPECT_EQ(mtl("A \xE2\x80\x94 b"), "A - b.");
  EXPECT_EQ(mtl("A-b"), "A-b.");
}

TEST(PuncNorm, SentenceEnders) {
  for (const char* s : {"Hi.", "Hi!", "Hi?", "Hi-", "Hi,"}) {
    EXPECT_EQ(turbo(s), s);
    EXPECT_EQ(mtl(s), s);
  }
  EXPECT_EQ(turbo("Hi"), "Hi.");
  EXPECT_EQ(turbo("Hi   "), "Hi.");
  EXPECT_EQ(turbo("Hi\""), "Hi\".");
  // CJK enders count only for the multilingual flavour.
  for (const char* e : {"\xE3\x80\x81", "\xEF\xBC\x8C", "\xE3\x80\x82", "\xEF\xBC\x9F", "\xEF\xBC\x81"}) {
    const std::string s = std::string("\xE4\xBD\xA0\xE5\xA5\xBD") + e;  // 你好 + ender
    EXPECT_EQ(mtl(s), s);
    EXPECT_EQ(turbo(s), s + ".");
  }
  EXPECT_EQ(mtl("\xE4\xBD\xA0\xE5\xA5\xBD"), "\xE4\xBD\xA0\xE5\xA5\xBD.");
  // A trailing " - " in MTL becomes ", " -> rstrip -> ",".
  EXPECT_EQ(mtl("A - "), "A -");  // split/join strips the trailing space first
  EXPECT_EQ(mtl("A - b - "), "A, b -");
}

TEST(PuncNorm, InvalidUtf8) {
  EXPECT_EQ(error_of([] { turbo("\xFF"); }), "text: invalid UTF-8 at byte 0");
  EXPECT_EQ(error_of([] { turbo("ab\xC3"); }), "text: invalid UTF-8 at byte 2");
  EXPECT_EQ(error_of([] { mtl("a\xED\xA0\x80"); }), "text: invalid UTF-8 at byte 1");  // surrogate
  EXPECT_EQ(error_of([] { mtl("\xC0\xAF"); }), "text: invalid UTF-8 at byte 0");       // overlong
  EXPECT_EQ(error_of([] { mtl("ok\xF4\x90\x80\x80"); }),
            "text: invalid UTF-8 at byte 2");                                       // > U+10FFFF
  EXPECT_EQ(error_of([] { turbo("\xE2\x82"); }), "text: invalid UTF-8 at byte 0");  // truncated
  EXPECT_EQ(error_of([] { turbo("\xF0\x9F\x98\x80"); }), "(no error)");             // 😀 ok
}

}  // namespace
