// Multilingual text front-end files:
//  grapheme_mtl_merged_expanded_v1.json: HF `tokenizers` JSON, BPE model over single
//    characters with a Whitespace pre-tokenizer; [STOP]=0 [UNK]=1 [SPACE]=2 [START]=255 (T3's
//    EOT/SOT), the 23 language tags and the [cj_*] Cangjie letters as added tokens, a
//    character vocabulary covering the scripts of the 23 languages (after lower-casing and
//    NFKD: combining marks, conjoining Hangul jamo, voiced-kana marks), then merges.
//  Cangjie5_TC.json: JSON list of "<char>\t<code>" strings (file order sets the index suffix
//    of characters that share a code).
// Layout beyond the documented ids is synthetic; see docs/synthetic-checkpoints.md.
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "mkckpt.h"

namespace mk {
namespace {

using ojson = nlohmann::ordered_json;

const char* const kLangs[23] = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                                "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh"};

// Well-known CJK characters every test sentence is likely to use, then a strided fill.
const char* const kCommonCjk =
    "你好中文我是的了人不在有这个们来到时大上日本语今天气真错希望一愉快周末谢再见学生"
    "国家年月水火山木金土心手口目耳";

void range(std::vector<uint32_t>& v, uint32_t a, uint32_t b) {
  for (uint32_t c = a; c <= b; ++c) v.push_back(c);
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

// Script pools (lower-case letters a merge may join), indexed by script.
struct Pools {
  std::vector<std::vector<std::string>> grown;  // chars + merged tokens
  std::vector<std::vector<std::string>> chars;
};

}  // namespace

void write_mtl_tokenizer(const Options& o) {
  const int64_t vocab_size = cbx::upstream_dims(o.variant, o.tiny).text_vocab;
  std::vector<uint32_t> cs;  // base characters in id order
  std::vector<uint32_t> cjk;
  Pools pools;
  pools.chars.resize(7);
  range(cs, 0x21, 0x7E);  // ASCII printable
  if (!o.tiny) {
    range(cs, 0xC0, 0xD6);
    range(cs, 0xD8, 0xF6);
    range(cs, 0xF8, 0xFF);
    for (uint32_t c : {0xA1u, 0xBFu, 0xABu, 0xBBu}) cs.push_back(c);
    range(cs, 0x100, 0x17F);  // Latin Extended-A
    range(cs, 0x300, 0x36F);  // combining diacritics (NFKD output)
    for (uint32_t c : {0x386u, 0x388u, 0x389u, 0x38Au, 0x38Cu}) cs.push_back(c);
    range(cs, 0x38E, 0x3A1);
    range(cs, 0x3A3, 0x3CE);  // Greek
    range(cs, 0x400, 0x45F);  // Cyrillic
    range(cs, 0x5B0, 0x5C7);
    range(cs, 0x5D0, 0x5EA);  // Hebrew points + letters
    for (uint32_t c : {0x60Cu, 0x61Bu, 0x61Fu}) cs.push_back(c);
    range(cs, 0x621, 0x64A);
    range(cs, 0x64B, 0x652);
    range(cs, 0x660, 0x669);  // Arabic
    range(cs, 0x900, 0x97F);  // Devanagari
    range(cs, 0x1100, 0x1112);
    range(cs, 0x1161, 0x1175);
    range(cs, 0x11A8, 0x11C2);  // jamo
    for (uint32_t c : {0x2013u, 0x2014u, 0x2018u, 0x2019u, 0x201Cu, 0x201Du, 0x2026u}) cs.push_back(c);
    for (uint32_t c : {0x3001u, 0x3002u, 0x300Cu, 0x300Du}) cs.push_back(c);
    range(cs, 0x3041, 0x3096);
    range(cs, 0x3099, 0x309C);
    range(cs, 0x30A1, 0x30FA);  // kana
    cs.push_back(0x30FC);
    for (uint32_t c : {0xFF01u, 0xFF0Cu, 0xFF1Au, 0xFF1Fu}) cs.push_back(c);
  } else {
    for (uint32_t c :
         {0xE0u, 0xE1u, 0xE2u, 0xE4u, 0xE7u, 0xE8u, 0xE9u, 0xEAu, 0xEBu, 0xEDu, 0xEEu,  0xEFu,  0xF1u,  0xF2u,  0xF3u,
          0xF4u, 0xF6u, 0xF9u, 0xFAu, 0xFBu, 0xFCu, 0xDFu, 0xF8u, 0xE5u, 0xE6u, 0x153u, 0x131u, 0x142u, 0x15Fu, 0x11Fu})
      cs.push_back(c);
    for (uint32_t c : {0x300u, 0x301u, 0x302u, 0x303u, 0x308u, 0x30Au, 0x30Cu, 0x327u}) cs.push_back(c);
    range(cs, 0x3B1, 0x3C9);  // Greek lower
    range(cs, 0x430, 0x44F);
    cs.push_back(0x451);      // Cyrillic lower
    range(cs, 0x5D0, 0x5D9);  // Hebrew
    range(cs, 0x627, 0x630);  // Arabic
    range(cs, 0x915, 0x91E);  // Devanagari
    range(cs, 0x1100, 0x1112);
    range(cs, 0x1161, 0x1175);
    range(cs, 0x11A8, 0x11AF);  // jamo
    range(cs, 0x3042, 0x3055);
    cs.push_back(0x3099);
    cs.push_back(0x309A);       // hiragana
    range(cs, 0x30A2, 0x30AB);  // katakana
    for (uint32_t c : {0x3001u, 0x3002u, 0xFF0Cu, 0xFF1Fu, 0xFF01u}) cs.push_back(c);
  }
  {
    std::unordered_set<uint32_t> seen;
    for (uint32_t c : decode_utf8(kCommonCjk))
      if (seen.insert(c).second) cjk.push_back(c);
  }

  // Script pools for merges: 0 Latin, 1 Cyrillic, 2 Greek, 3 Arabic, 4 Hebrew, 5 Devanagari, 6 Hangul.
  auto script_of = [](uint32_t c) -> int {
    if ((c >= 'a' && c <= 'z') || (c >= 0xDF && c <= 0xFF && c != 0xF7)) return 0;
    if (c >= 0x430 && c <= 0x45F) return 1;
    if (c >= 0x3AC && c <= 0x3CE) return 2;
    if (c >= 0x621 && c <= 0x64A) return 3;
    if (c >= 0x5D0 && c <= 0x5EA) return 4;
    if (c >= 0x900 && c <= 0x97F) return 5;
    if (c >= 0x1100 && c <= 0x11FF) return 6;
    return -1;
  };

  const int n_special = 7, n_tags = 23, n_cj = 26 + 10 + 1;
  const int64_t fixed = n_special + 1 /*[START]*/ + int64_t(cs.size()) + n_tags + n_cj;
  CBX_CHECK(vocab_size > fixed + int64_t(cjk.size()), "mkckpt: MTL vocab %lld too small", (long long)vocab_size);
  // Full size: fill with strided CJK characters and merges (about 40/60); tiny: merges only.
  if (!o.tiny) {
    const int64_t want_cjk = (vocab_size - fixed) * 2 / 5;
    std::unordered_set<uint32_t> seen(cjk.begin(), cjk.end());
    for (uint32_t c = 0x4E00; int64_t(cjk.size()) < want_cjk && c <= 0x9FA5; c += 23)
      if (seen.insert(c).second) cjk.push_back(c);
  }
  cs.insert(cs.end(), cjk.begin(), cjk.end());
  const int64_t n_merges = vocab_size - (fixed + int64_t(cjk.size()));

  // ---- ids ----
  std::vector<std::string> vocab;
  std::vector<std::pair<int64_t, std::string>> added;  // (id, content)
  for (const char* s : {"[STOP]", "[UNK]", "[SPACE]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"}) {
    added.emplace_back(int64_t(vocab.size()), s);
    vocab.push_back(s);
  }
  auto push_char = [&](uint32_t c) {
    if (vocab.size() == 255) {
      added.emplace_back(255, "[START]");
      vocab.push_back("[START]");
    }
    vocab.push_back(utf8(c));
    const int s = script_of(c);
    if (s >= 0) pools.chars[size_t(s)].push_back(vocab.back());
  };
  for (uint32_t c : cs) push_char(c);
  CBX_CHECK(vocab.size() > 255, "mkckpt: MTL vocab has no room for [START] at 255");
  for (const char* l : kLangs) {
    added.emplace_back(int64_t(vocab.size()), std::string("[") + l + "]");
    vocab.push_back(added.back().second);
  }
  std::string cj_letters = "abcdefghijklmnopqrstuvwxyz0123456789.";
  for (char c : cj_letters) {
    added.emplace_back(int64_t(vocab.size()), std::string("[cj_") + c + "]");
    vocab.push_back(added.back().second);
  }

  // ---- merges: grow words within one script ----
  Rng r(stream_key(o.seed, "file", "grapheme_mtl_merged_expanded_v1.json"));
  std::unordered_set<std::string> have(vocab.begin(), vocab.end());
  pools.grown = pools.chars;
  const double weights[7] = {0.55, 0.15, 0.06, 0.06, 0.06, 0.06, 0.06};
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t tries = 0;
  while (int64_t(merges.size()) < n_merges) {
    CBX_CHECK(++tries < 100000000, "mkckpt: cannot generate MTL merges");
    double u = r.uniform();
    int s = 0;
    while (s < 6 && u >= weights[s]) u -= weights[s++];
    const auto& g = pools.grown[size_t(s)];
    const auto& ch = pools.chars[size_t(s)];
    if (g.empty() || ch.empty()) continue;
    const double ua = r.uniform(), ub = r.uniform();
    const std::string a = g[size_t(double(g.size()) * ua * ua * ua)];
    const std::string b = ch[size_t(double(ch.size()) * ub * ub * ub)];
    const std::string ab = a + b;
    if (decode_utf8(ab).size() > 5 || have.count(ab)) continue;
    have.insert(ab);
    vocab.push_back(ab);
    merges.emplace_back(a, b);
    pools.grown[size_t(s)].push_back(ab);
  }
  CBX_CHECK(int64_t(vocab.size()) == vocab_size, "mkckpt: MTL vocab %zu != %lld", vocab.size(), (long long)vocab_size);

  ojson at = ojson::array();
  for (auto& [id, content] : added)
    at.push_back(ojson{{"id", id},
                       {"content", content},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  ojson vj = ojson::object();
  for (size_t i = 0; i < vocab.size(); ++i) vj[vocab[i]] = i;
  ojson mj = ojson::array();
  for (auto& m : merges) mj.push_back(m.first + " " + m.second);
  ojson model = {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", "[UNK]"},
                 {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false},
                 {"vocab", vj},
                 {"merges", mj}};
  ojson tok = {{"version", "1.0"},          {"truncation", nullptr}, {"padding", nullptr},
               {"added_tokens", at},        {"normalizer", nullptr}, {"pre_tokenizer", ojson{{"type", "Whitespace"}}},
               {"post_processor", nullptr}, {"decoder", nullptr},    {"model", model}};
  write_text_file(o.dir + "/grapheme_mtl_merged_expanded_v1.json", tok.dump(2) + "\n");

  // ---- Cangjie table ----
  Rng rc(stream_key(o.seed, "file", "Cangjie5_TC.json"));
  std::vector<uint32_t> table = cjk;
  if (!o.tiny) {
    std::unordered_set<uint32_t> seen(table.begin(), table.end());
    for (uint32_t c = 0x4E00; c <= 0x9FA5; ++c)
      if (!seen.count(c)) table.push_back(c);
  } else {
    for (uint32_t c = 0x4E00; table.size() < 64; c += 7) table.push_back(c);
  }
  // Code lengths 1..5 over a..z (z rare); tiny draws from a..e so codes collide often.
  const int alpha = o.tiny ? 5 : 26;
  ojson list = ojson::array();
  for (uint32_t c : table) {
    const double u = rc.uniform();
    const int len = o.tiny ? 1 + int(rc.below(2)) : u < 0.02 ? 1 : u < 0.12 ? 2 : u < 0.42 ? 3 : u < 0.80 ? 4 : 5;
    std::string code;
    for (int k = 0; k < len; ++k) {
      int l = int(rc.below(alpha));
      if (l == 25 && rc.uniform() < 0.9) l = int(rc.below(25));
      code += char('a' + l);
    }
    list.push_back(utf8(c) + "\t" + code);
  }
  write_text_file(o.dir + "/Cangjie5_TC.json", list.dump() + "\n");
}

}  // namespace mk
