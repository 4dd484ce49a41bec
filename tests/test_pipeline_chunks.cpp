// The long-text chunker and text checks the pipelines share (src/pipeline/pipeline_common.h),
// and the Multilingual post-processing (MtlPipeline::postprocess), on hand-made inputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/model_config.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/pipeline_common.h"
#include "text/utf8.h"

namespace cbx {
namespace {

// One token per code point: easy to reason about, and it makes CJK text count like text.
int64_t count_cps(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t k = utf8_next(s, i, &cp);
    EXPECT_GT(k, 0u);
    i += k ? k : 1;
    ++n;
  }
  return n;
}

// Rules with a visible continuation mark, so a test can remove exactly what the chunker added.
ChunkRules marked(ChunkRules r) {
  r.continuation = "|";
  return r;
}

ChunkRules cjk_rules() {
  ChunkRules r;
  r.wide_sentence_enders = U"\u3002\uFF01\uFF1F";
  r.wide_clause_enders = U"\uFF0C\u3001";
  r.chunk_enders = U".!?-,\u3002\uFF01\uFF1F\uFF0C\u3001";
  return marked(r);
}

// Removes the continuation marks and all spaces: what must survive chunking unchanged.
std::string skeleton(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '|') out += c;
  return out;
}

std::string joined_skeleton(const std::vector<std::string>& chunks) {
  std::string all;
  for (const std::string& c : chunks) all += skeleton(c);
  return all;
}

TEST(Chunks, TextThatFitsIsReturnedWhole) {
  const std::string t = "Hello there. How are you?";
  const auto chunks = split_into_chunks(t, 100, count_cps, marked({}));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0], t);
}

TEST(Chunks, SentencesArePackedGreedily) {
  const std::string t = "One two. Three four. Five six seven. Eight.";
  // "One two. Three four." is 20 code points; adding " Five six seven." would exceed 24.
  const auto chunks = split_into_chunks(t, 24, count_cps, marked({}));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], "One two. Three four.");
  EXPECT_EQ(chunks[1], "Five six seven. Eight.");
}

TEST(Chunks, LongSentenceIsCutAtClausesThenWordsThenRuns) {
  const std::string t = "alpha beta, gamma delta; epsilonzetaetathetaiota kappa.";
  const int64_t budget = 12;
  const auto chunks = split_into_chunks(t, budget, count_cps, marked({}));
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks[0], "alpha beta,");    // clause, ends with its own ","
  EXPECT_EQ(chunks[1], "gamma delta;|");  // ";" is not a chunk ender: continuation mark
  for (const std::string& c : chunks) {
    std::string body = c;
    if (!body.empty() && body.back() == '|') body.pop_back();
    EXPECT_LE(count_cps(body), budget) << c;
  }
  EXPECT_EQ(joined_skeleton(chunks), skeleton(t));
}

TEST(Chunks, OverlongWordKeepsEveryCodePoint) {
  std::string word;
  for (int i = 0; i < 25; ++i) word += "\xC3\xA9";  // é, two bytes each
  const auto chunks = split_into_chunks(word + ".", 10, count_cps, marked({}));
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(joined_skeleton(chunks), word + ".");
  for (const std::string& c : chunks) utf8_check(c);  // never cut inside a code point
}

TEST(Chunks, CjkEndersCutWithoutSpaces) {
  // 你好。我很好，谢谢。再见！ (no spaces at all)
  const std::string t =
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\xE6\x88\x91\xE5\xBE\x88\xE5\xA5\xBD\xEF\xBC\x8C"
      "\xE8\xB0\xA2\xE8\xB0\xA2\xE3\x80\x82\xE5\x86\x8D\xE8\xA7\x81\xEF\xBC\x81";
  const auto chunks = split_into_chunks(t, 4, count_cps, cjk_rules());
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0], "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82");              // 你好。
  EXPECT_EQ(chunks[1], "\xE6\x88\x91\xE5\xBE\x88\xE5\xA5\xBD\xEF\xBC\x8C");  // 我很好，
  EXPECT_EQ(chunks[2], "\xE8\xB0\xA2\xE8\xB0\xA2\xE3\x80\x82");              // 谢谢。
  EXPECT_EQ(chunks[3], "\xE5\x86\x8D\xE8\xA7\x81\xEF\xBC\x81");              // 再见！
  // Packed without a joining space: 你好。我很好，谢谢。 | 再见！
  const auto two = split_into_chunks(t, 10, count_cps, cjk_rules());
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], t.substr(0, 30));
  EXPECT_EQ(two[1], t.substr(30));
  EXPECT_EQ(joined_skeleton(two), t);
}

TEST(Chunks, RejectsNonPositiveBudget) { EXPECT_THROW(split_into_chunks("a b.", 0, count_cps, {}), Error); }

TEST(TextCheck, EmptyBlankAndInvalid) {
  EXPECT_THROW(check_synth_text(""), TextError);
  EXPECT_THROW(check_synth_text(" \t\n"), TextError);
  EXPECT_THROW(check_synth_text("\xE3\x80\x80\xC2\xA0"), TextError);  // ideographic space, NBSP
  try {
    check_synth_text("ab\xFF");
    FAIL() << "invalid UTF-8 accepted";
  } catch (const TextError& e) {
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos);
  }
  EXPECT_NO_THROW(check_synth_text(" x "));
}

TEST(MtlPostprocess, DropInvalidTokensAndFilter) {
  T3Config c;  // SOS 6561, EOS 6562
  using V = std::vector<int32_t>;
  EXPECT_EQ(MtlPipeline::postprocess(V{1, 2, 3, 6562}, c), (V{1, 2, 3}));        // EOS cut
  EXPECT_EQ(MtlPipeline::postprocess(V{1, 6561, 2, 3, 6562, 4}, c), (V{2, 3}));  // after SOS, before EOS
  EXPECT_EQ(MtlPipeline::postprocess(V{5, 7000, 8193, 6}, c), (V{5, 6}));        // ids S3Gen cannot take
  EXPECT_EQ(MtlPipeline::postprocess(V{6562, 1, 2}, c), V{});                    // EOS first: nothing
  EXPECT_EQ(MtlPipeline::postprocess(V{}, c), V{});
  EXPECT_EQ(MtlPipeline::postprocess(V{0, 6560}, c), (V{0, 6560}));  // no limit hit
}

TEST(MtlLanguage, CheckListsTheSupportedOnes) {
  const std::vector<std::string> langs = {"ar", "fr", "zh"};
  EXPECT_EQ(check_mtl_language(langs, "FR"), "fr");
  for (const char* bad : {"xx", ""}) {
    try {
      check_mtl_language(langs, bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("fr  French"), std::string::npos) << m;
      EXPECT_NE(m.find("zh  Chinese"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace cbx
