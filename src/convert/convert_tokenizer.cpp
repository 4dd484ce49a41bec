// Text tokenizer files -> GGUF metadata (docs/gguf-format.md, "Tokenizer").
//   Turbo/Nano: GPT-2 byte-level BPE (vocab.json, merges.txt, added_tokens.json,
//               optional tokenizer_config.json for model_max_length).
//   Multilingual: HF tokenizers JSON (grapheme_mtl_merged_expanded_v1.json) + Cangjie5_TC.json.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "convert/convert_internal.h"
#include "core/error.h"

namespace cbx {

namespace {

using nlohmann::json;

constexpr int32_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CBX_CHECK(in, "%s: cannot open", path.c_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  CBX_CHECK(!in.bad(), "%s: read error", path.c_str());
  return ss.str();
}

json read_json(const std::string& path) {
  std::string text = read_text(path);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    fail("%s: invalid JSON: %s", base_name(path).c_str(), e.what());
  }
}

// id -> token table from {token: id} maps; every id in [0, n) must be filled once.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<bool> set;
  void put(int64_t id, const std::string& tok, int32_t type, const std::string& file) {
    CBX_CHECK(id >= 0 && id < (int64_t(1) << 24), "%s: token '%s' has id %lld out of range", file.c_str(), tok.c_str(),
              (long long)id);
    if (size_t(id) >= tokens.size()) {
      tokens.resize(size_t(id) + 1), types.resize(size_t(id) + 1, kTokUnused), set.resize(size_t(id) + 1);
    }
    if (set[size_t(id)] && tokens[size_t(id)] == tok) {
      types[size_t(id)] = type;
      return;
    }
    CBX_CHECK(!set[size_t(id)], "%s: id %lld used by both '%s' and '%s'", file.c_str(), (long long)id,
              tokens[size_t(id)].c_str(), tok.c_str());
    tokens[size_t(id)] = tok, types[size_t(id)] = type, set[size_t(id)] = true;
  }
  size_t fill_holes() {
    size_t holes = 0;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!set[i]) tokens[i] = "<unused" + std::to_string(i) + ">", ++holes;
    return holes;
  }
};

void write_gpt2(const CheckpointFiles& f, const ModelConfig& c, GgufWriter& w, const WarningFn& warn) {
  const std::string vf = base_name(f.vocab), af = base_name(f.added_tokens);
  json vocab = read_json(f.vocab);
  CBX_CHECK(vocab.is_object(), "%s: expected an object {token: id}", vf.c_str());
  Vocab v;
  for (auto& [tok, id] : vocab.items()) {
    CBX_CHECK(id.is_number_integer(), "%s: id of '%s' is not an integer", vf.c_str(), tok.c_str());
    v.put(id.get<int64_t>(), tok, kTokNormal, vf);
  }
  json added = read_json(f.added_tokens);
  CBX_CHECK(added.is_object(), "%s: expected an object {token: id}", af.c_str());
  std::vector<std::pair<int32_t, std::string>> added_list;
  for (auto& [tok, id] : added.items()) {
    CBX_CHECK(id.is_number_integer(), "%s: id of '%s' is not an integer", af.c_str(), tok.c_str());
    v.put(id.get<int64_t>(), tok, kTokUserDefined, af);
    added_list.push_back({id.get<int32_t>(), tok});
  }
  std::sort(added_list.begin(), added_list.end());
  int64_t eos = -1;
  if (vocab.contains("<|endoftext|>")) {
    eos = vocab["<|endoftext|>"].get<int64_t>();
    v.types[size_t(eos)] = kTokControl;
  }
  size_t holes = v.fill_holes();
  CBX_CHECK(holes == 0, "%s + %s: %zu token ids in [0, %zu) are unassigned", vf.c_str(), af.c_str(), holes,
            v.tokens.size());
  if (int64_t(v.tokens.size()) != c.t3.text_vocab)
    warn("tokenizer has " + std::to_string(v.tokens.size()) + " tokens, T3 text_emb has " +
         std::to_string(c.t3.text_vocab) + " rows");

  std::vector<std::string> merges;
  {
    std::istringstream in(read_text(f.merges));
    std::string line;
    size_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
      CBX_CHECK(line.find(' ') != std::string::npos && line.find(' ') == line.rfind(' '),
                "%s:%zu: expected 'left right', got '%s'", base_name(f.merges).c_str(), lineno, line.c_str());
      merges.push_back(line);
    }
  }
  int32_t max_len = 1024;  // GPT-2's default when tokenizer_config.json says nothing usable
  if (!f.tokenizer_config.empty()) {
    json tc = read_json(f.tokenizer_config);
    if (tc.contains("model_max_length") && tc["model_max_length"].is_number()) {
      double m = tc["model_max_length"].get<double>();
      if (m >= 1 && m < 1e9) max_len = int32_t(m);  // HF writes 1e30 for "no limit"
    }
  }
  std::vector<std::string> added_tok;
  std::vector<int32_t> added_ids;
  for (auto& [id, tok] : added_list) added_ids.push_back(id), added_tok.push_back(tok);

  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  w.set_string_array("tokenizer.ggml.merges", merges);
  if (eos >= 0) {
    w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
    w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(eos));
  }
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  w.set_string_array("chatterbox.tokenizer.added_tokens", added_tok);
  w.set_i32_array("chatterbox.tokenizer.added_token_ids", added_ids);
  w.set_i32("chatterbox.tokenizer.model_max_length", max_len);
}

void write_mtl(const CheckpointFiles& f, GgufWriter& w) {
  const std::string tf = base_name(f.mtl_tokenizer);
  std::string raw = read_text(f.mtl_tokenizer);
  json tj;
  try {
    tj = json::parse(raw);
  } catch (const std::exception& e) {
    fail("%s: invalid JSON: %s", tf.c_str(), e.what());
  }
  CBX_CHECK(tj.is_object() && tj.contains("model") && tj["model"].is_object(),
            "%s: not a Hugging Face tokenizers file (no 'model' object)", tf.c_str());
  const json& model = tj["model"];
  std::string type = model.value("type", std::string("BPE"));
  CBX_CHECK(model.contains("vocab") && model["vocab"].is_object(), "%s: 'model.vocab' missing", tf.c_str());
  Vocab v;
  for (auto& [tok, id] : model["vocab"].items()) {
    CBX_CHECK(id.is_number_integer(), "%s: id of '%s' is not an integer", tf.c_str(), tok.c_str());
    v.put(id.get<int64_t>(), tok, kTokNormal, tf);
  }
  std::vector<std::string> added_tok;
  std::vector<int32_t> added_ids, added_special;
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      CBX_CHECK(a.is_object() && a.contains("id") && a.contains("content"), "%s: malformed entry in 'added_tokens'",
                tf.c_str());
      bool special = a.value("special", false);
      v.put(a["id"].get<int64_t>(), a["content"].get<std::string>(), special ? kTokControl : kTokUserDefined, tf);
      added_tok.push_back(a["content"].get<std::string>());
      added_ids.push_back(a["id"].get<int32_t>());
      added_special.push_back(special ? 1 : 0);
    }
  }
  v.fill_holes();
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else {
        CBX_CHECK(m.is_array() && m.size() == 2, "%s: malformed merge in 'model.merges'", tf.c_str());
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      }
    }
  }
  json cj = read_json(f.cangjie);
  const std::string cf = base_name(f.cangjie);
  CBX_CHECK(cj.is_array(), "%s: expected a JSON list of \"char\\tcode\" strings", cf.c_str());
  std::vector<std::string> cangjie;
  cangjie.reserve(cj.size());
  for (size_t i = 0; i < cj.size(); ++i) {
    CBX_CHECK(cj[i].is_string(), "%s: entry %zu is not a string", cf.c_str(), i);
    std::string s = cj[i].get<std::string>();
    CBX_CHECK(s.find('\t') != std::string::npos, "%s: entry %zu ('%s') has no tab", cf.c_str(), i, s.c_str());
    cangjie.push_back(std::move(s));
  }

  w.set_string("tokenizer.ggml.model", "mtl-" + type);  // "mtl-BPE"
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  w.set_string_array("tokenizer.ggml.merges", merges);
  if (model["vocab"].contains("[UNK]"))
    w.set_u32("tokenizer.ggml.unknown_token_id", model["vocab"]["[UNK]"].get<uint32_t>());
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  w.set_string_array("chatterbox.tokenizer.added_tokens", added_tok);
  w.set_i32_array("chatterbox.tokenizer.added_token_ids", added_ids);
  w.set_i32_array("chatterbox.tokenizer.added_token_special", added_special);
  w.set_string("chatterbox.tokenizer.hf_json", raw);
  w.set_string("chatterbox.tokenizer.hf_json_file", tf);
  w.set_string_array("chatterbox.tokenizer.cangjie", cangjie);
}

}  // namespace

void write_tokenizer(const CheckpointFiles& files, const ModelConfig& c, GgufWriter& w, const WarningFn& warn) {
  if (c.variant == Variant::Mtl)
    write_mtl(files, w);
  else
    write_gpt2(files, c, w, warn);
}

}  // namespace cbx
