// Turbo text tokenizer files in the GPT-2 layout that HF AutoTokenizer reads: vocab.json
// (byte-level BPE, ids 0..255 = bytes in GPT-2's bytes_to_unicode order, then one token per
// merge, then <|endoftext|>), merges.txt, added_tokens.json (the 19 paralinguistic tags),
// special_tokens_map.json, tokenizer_config.json. The merges are synthetic but valid: every
// merge joins two existing tokens into a new one, never across a word-initial space.
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "mkckpt.h"

namespace mk {
namespace {

using ojson = nlohmann::ordered_json;

// The tags of the Turbo tokenizer, in id order from 50257 (see spec §4.2).
const char* const kTags[19] = {"[angry]",        "[fear]",      "[surprised]", "[whispering]", "[advertisement]",
                               "[dramatic]",     "[narration]", "[crying]",    "[happy]",      "[sarcastic]",
                               "[clear throat]", "[sigh]",      "[shush]",     "[cough]",      "[groan]",
                               "[sniff]",        "[gasp]",      "[chuckle]",   "[laugh]"};

// GPT-2 bytes_to_unicode(): printable bytes map to themselves, the rest to U+0100 + n.
// Returns the 256 byte-token strings in vocab id order.
std::vector<std::string> byte_tokens() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<uint32_t> cs(bs.begin(), bs.end());
  bool in[256] = {};
  for (int b : bs) in[b] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (!in[b]) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  std::vector<std::string> out;
  for (uint32_t c : cs) out.push_back(utf8(c));
  return out;
}

size_t cp_len(const std::string& s) {  // code points
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

void write_gpt2_tokenizer(const Options& o) {
  const int64_t vocab_size = cbx::upstream_dims(o.variant, o.tiny).text_vocab;  // incl. tags
  const int64_t eot = vocab_size - 19 - 1;                                      // 50256 at full size
  const int64_t n_merges = eot - 256;
  Rng r(stream_key(o.seed, "file", "merges.txt"));

  std::vector<std::string> vocab = byte_tokens();
  std::unordered_set<std::string> have(vocab.begin(), vocab.end());
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string G = utf8(0x120);  // 'Ġ' = byte-level space
  // Pools: word-initial pieces (may start with Ġ) and continuation pieces (letters only).
  std::vector<std::string> starts, conts;
  for (char c = 'a'; c <= 'z'; ++c) conts.push_back(std::string(1, c)), starts.push_back(conts.back());
  for (char c = 'A'; c <= 'Z'; ++c) starts.push_back(std::string(1, c));
  starts.push_back(G);
  auto add = [&](const std::string a, const std::string b) {
    const std::string ab = a + b;
    if (int64_t(merges.size()) >= n_merges || have.count(ab) || !have.count(a) || !have.count(b)) return false;
    have.insert(ab);
    vocab.push_back(ab);
    merges.emplace_back(a, b);
    starts.push_back(ab);
    if (a.rfind(G, 0) != 0 && (unsigned char)ab[0] >= 'a' && (unsigned char)ab[0] <= 'z') conts.push_back(ab);
    return true;
  };
  // Frequent English pieces first, as a trained merge list would have them.
  const char* seeded[][2] = {{"Ġ", "t"},  {"Ġ", "a"},  {"h", "e"},  {"i", "n"},  {"r", "e"},  {"o", "n"},  {"Ġt", "he"},
                             {"e", "r"},  {"Ġ", "s"},  {"a", "t"},  {"Ġ", "w"},  {"Ġ", "o"},  {"e", "n"},  {"Ġ", "c"},
                             {"i", "t"},  {"i", "s"},  {"a", "n"},  {"o", "r"},  {"e", "s"},  {"Ġ", "b"},  {"e", "d"},
                             {"Ġ", "f"},  {"in", "g"}, {"Ġ", "p"},  {"o", "u"},  {"Ġa", "n"}, {"a", "l"},  {"a", "r"},
                             {"Ġt", "o"}, {"Ġ", "m"},  {"Ġo", "f"}, {"Ġ", "in"}, {"Ġ", "d"},  {"Ġ", "h"},  {"Ġan", "d"},
                             {"i", "c"},  {"a", "s"},  {"l", "e"},  {"Ġt", "h"}, {"i", "on"}, {"o", "m"},  {"l", "l"},
                             {"Ġ", "1"},  {"Ġ", "2"},  {"0", "0"},  {"1", "9"},  {"2", "0"},  {"Ġ", "\""}, {"Ġ", "("},
                             {"Ġ", "I"},  {"Ġ", "T"},  {"Ġ", "S"},  {"Ġ", "A"},  {"Ġ", "-"}};
  for (auto& s : seeded) {
    std::string a = s[0], b = s[1];
    for (std::string* x : {&a, &b})
      if (x->rfind("Ġ", 0) == 0) *x = G + x->substr(std::string("Ġ").size());
    add(a, b);
  }
  // Then random joins, biased towards early (frequent) pieces, words up to 12 characters.
  auto pick = [&](const std::vector<std::string>& pool) -> std::string {
    const double u = r.uniform();
    return pool[size_t(double(pool.size()) * u * u * u)];
  };
  while (int64_t(merges.size()) < n_merges) {
    const std::string a = pick(starts);
    const std::string b = pick(conts);
    // Longer pieces are rarer: accept with probability 0.7^(len - 2).
    const size_t len = cp_len(a) + cp_len(b);
    if (len <= 12 && r.uniform() < std::pow(0.7, double(len) - 2.0)) add(a, b);
  }

  ojson vj = ojson::object();
  for (size_t i = 0; i < vocab.size(); ++i) vj[vocab[i]] = i;
  vj["<|endoftext|>"] = eot;
  write_text_file(o.dir + "/vocab.json", vj.dump());

  std::string mt = "#version: 0.2\n";
  for (auto& m : merges) mt += m.first + " " + m.second + "\n";
  write_text_file(o.dir + "/merges.txt", mt);

  // HF writes added_tokens.json with sorted keys.
  nlohmann::json added = nlohmann::json::object();
  for (int i = 0; i < 19; ++i) added[kTags[i]] = eot + 1 + i;
  write_text_file(o.dir + "/added_tokens.json", added.dump(2) + "\n");

  ojson stm = {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
  write_text_file(o.dir + "/special_tokens_map.json", stm.dump(2) + "\n");

  auto entry = [](const std::string& content, bool special) {
    return ojson{{"content", content}, {"lstrip", false},      {"normalized", !special},
                 {"rstrip", false},    {"single_word", false}, {"special", special}};
  };
  ojson dec = ojson::object();
  dec[std::to_string(eot)] = entry("<|endoftext|>", true);
  for (int i = 0; i < 19; ++i) dec[std::to_string(eot + 1 + i)] = entry(kTags[i], false);
  ojson cfg = {{"add_bos_token", false},
               {"add_prefix_space", false},
               {"added_tokens_decoder", dec},
               {"bos_token", "<|endoftext|>"},
               {"clean_up_tokenization_spaces", false},
               {"eos_token", "<|endoftext|>"},
               {"errors", "replace"},
               {"model_max_length", 1024},
               {"pad_token", nullptr},
               {"tokenizer_class", "GPT2Tokenizer"},
               {"unk_token", "<|endoftext|>"}};
  write_text_file(o.dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
}

}  // namespace mk
