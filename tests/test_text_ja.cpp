// Japanese front-end (text/kakasi.h, ja_normalize): upstream's segment rule on its own, and
// KAKASI's readings against KAKASI's own command-line tool (`kakasi -JH`, Debian package kakasi)
// as the reference, for a table of common words and sentences.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "text/kakasi.h"
#include "text/mtl_lang.h"
#include "text/unicode_text.h"

namespace {

using cbx::JaSegment;

std::string nfkd(const std::string& s) { return cbx::unicode_normalize(s, cbx::UnicodeForm::NFKD); }
std::string nfc(const std::string& s) { return cbx::unicode_normalize(s, cbx::UnicodeForm::NFC); }

// ---- upstream's rule on given segments (no KAKASI needed) ----

TEST(JaJoin, KanjiSegmentsBecomeReadings) {
  EXPECT_EQ(cbx::ja_join_segments({{"日本語", "にほんご", true}, {"を", "", false}}), "にほんごを");
}

TEST(JaJoin, SpaceBeforeReadingsStartingWithHaOrHe) {
  EXPECT_EQ(cbx::ja_join_segments({{"私", "わたし", true}, {"は", "", false}, {"花", "はな", true}}), "わたしは はな");
  EXPECT_EQ(cbx::ja_join_segments({{"部屋", "へや", true}}), " へや");
  // Only は and へ themselves: ば / べ / ほ readings get no space.
  EXPECT_EQ(cbx::ja_join_segments({{"番", "ばん", true}, {"星", "ほし", true}}), "ばんほし");
}

TEST(JaJoin, KatakanaLatinDigitsAndKanaKept) {
  EXPECT_EQ(cbx::ja_join_segments({{"カタカナ", "", false}, {"abc 123、", "", false}, {"ひらがな", "", false}}),
            "カタカナabc 123、ひらがな");
}

TEST(JaJoin, SegmentsWithoutUpstreamKanjiKeepTheirCharacters) {
  // 々 (U+3005) and ヶ are not in upstream's is_kanji range, so their segments stay as written;
  // a word without a reading keeps its kanji.
  EXPECT_EQ(cbx::ja_join_segments({{"毎月", "まいつき", true}, {"々", "", true}}), "まいつき々");
  EXPECT_EQ(cbx::ja_join_segments({{"ヶ", "", true}, {"月", "がつ", true}}), "ヶがつ");
  EXPECT_EQ(cbx::ja_join_segments({{"丼", "", true}}), "丼");
}

// ---- KAKASI ----

bool have_kakasi_cli() { return std::system("kakasi -JH < /dev/null > /dev/null 2>&1") == 0; }

// `kakasi -i utf8 -o utf8 -JH` on one line of text.
std::string kakasi_cli(const std::string& text) {
  char tmpl[] = "/tmp/cbx_ja_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return "<mkstemp failed>";
  FILE* f = fdopen(fd, "w");
  std::fputs(text.c_str(), f);
  std::fputc('\n', f);
  std::fclose(f);
  const std::string cmd = std::string("kakasi -i utf8 -o utf8 -JH < ") + tmpl;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) pclose(p);
  std::remove(tmpl);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// What `kakasi -JH` prints: each read word replaced by its reading, everything else kept.
std::string kakasi_plain(const std::vector<JaSegment>& segs) {
  std::string s;
  for (const JaSegment& g : segs) s += g.converted ? g.reading : g.orig;
  return s;
}

const std::vector<std::string>& table() {
  static const std::vector<std::string> t = {
      "今日",
      "天気",
      "日本語",
      "東京",
      "学生",
      "食べる",
      "行きます",
      "私",
      "先生",
      "学校",
      "電車",
      "新聞",
      "水",
      "山",
      "川",
      "大きい",
      "小さい",
      "美しい",
      "会社員",
      "図書館",
      "漢字",
      "お母さん",
      "人々",
      "三ヶ月",
      "今日は良い天気です。",
      "私は日本語を勉強しています。",
      "東京へ行きます。",
      "学生はカタカナとABC123を書く",
      "明日は雨が降るでしょう",
      "駅の前で友達に会いました",
      "この本は面白いです",
      "部屋へ入る",
      "花がきれいだ",
      "二〇二四年五月一日",
      "音楽を聞きながら、コーヒーを飲む。",
      "日本語のテキスト、東京。",
  };
  return t;
}

class Kakasi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cbx::kakasi_available()) GTEST_SKIP() << cbx::ja_frontend_description();
  }
};

TEST_F(Kakasi, ReadingsMatchKakasiCommandLine) {
  if (!have_kakasi_cli()) GTEST_SKIP() << "kakasi command (Debian package kakasi) not installed";
  for (const std::string& text : table()) {
    const auto segs = cbx::kakasi_segments(text);
    std::string spelled;
    for (const JaSegment& g : segs) spelled += g.orig;
    EXPECT_EQ(spelled, text) << "segments must spell the input";
    EXPECT_EQ(kakasi_plain(segs), kakasi_cli(text)) << text;
  }
}

TEST_F(Kakasi, NormalizeAppliesUpstreamRules) {
  // Readings from KAKASI (the test above checks them against the CLI); the space before は/へ
  // readings, katakana and Latin kept, and NFKD of the result.
  EXPECT_EQ(cbx::ja_normalize(nfkd("今日は良い天気です。")), nfkd("こんにちはよいてんきです。"));
  EXPECT_EQ(cbx::ja_normalize(nfkd("私は花が好き")), nfkd("わたしは はながすき"));
  EXPECT_EQ(cbx::ja_normalize(nfkd("部屋へ入る")), nfkd(" へやへいる"));  // KAKASI reads 入る as いる
  EXPECT_EQ(cbx::ja_normalize(nfkd("カタカナとabc123の漢字")), nfkd("カタカナとabc123のかんじ"));
  // Voiced kana come out decomposed (NFKD), whether they came from a reading or the input.
  const std::string g = cbx::ja_normalize(nfkd("学校のガ"));
  EXPECT_EQ(g, nfkd("がっこうのガ"));
  EXPECT_NE(g, nfc(g)) << "expected decomposed voiced marks";
  // No kanji: unchanged (NFKD).
  EXPECT_EQ(cbx::ja_normalize(nfkd("ひらがなとカタカナ、ok!")), nfkd("ひらがなとカタカナ、ok!"));
  // Characters KAKASI cannot encode (JIS X 0212, outside the BMP, other scripts) pass through.
  EXPECT_EQ(cbx::ja_normalize(nfkd("髙橋 𠮷野 한국 é")), nfkd("髙 はし 𠮷の 한국 é"));
}

TEST_F(Kakasi, ConcurrentCallsGiveSequentialResults) {
  std::vector<std::string> want;
  for (const std::string& t : table()) want.push_back(cbx::ja_normalize(nfkd(t)));
  std::vector<int> bad(8, 0);
  std::vector<std::thread> th;
  for (int k = 0; k < 8; ++k)
    th.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < table().size(); ++i)
          if (cbx::ja_normalize(nfkd(table()[(i + size_t(k)) % table().size()])) != want[(i + size_t(k)) % want.size()])
            ++bad[size_t(k)];
    });
  for (auto& t : th) t.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(bad[size_t(k)], 0) << "thread " << k;
}

TEST_F(Kakasi, FrontEndDescriptionNamesKakasi) {
  EXPECT_EQ(cbx::ja_frontend_description().rfind("KAKASI (", 0), 0u) << cbx::ja_frontend_description();
}

}  // namespace
