#include "text/hf_tokenizer.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "text/hf_bpe.h"
#include "text/hf_text_ops.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {

using json = nlohmann::json;

namespace {

// Byte trie over added-token contents: leftmost-longest matching.
class TokenTrie {
 public:
  void add(const std::string& s, size_t token_index) {
    if (s.empty()) return;
    int32_t node = 0;
    for (unsigned char c : s) {
      auto it = nodes_[size_t(node)].next.find(c);
      if (it == nodes_[size_t(node)].next.end()) {
        nodes_.push_back(Node{});
        it = nodes_[size_t(node)].next.emplace(c, int32_t(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    if (nodes_[size_t(node)].token < 0) nodes_[size_t(node)].token = int64_t(token_index);
  }
  bool empty() const { return nodes_.size() == 1; }
  // Longest match starting at s[i]: (token index, length) or token index -1.
  std::pair<int64_t, size_t> longest_at(const std::string& s, size_t i) const {
    std::pair<int64_t, size_t> best{-1, 0};
    int32_t node = 0;
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes_[size_t(node)].next.find((unsigned char)s[k]);
      if (it == nodes_[size_t(node)].next.end()) break;
      node = it->second;
      if (nodes_[size_t(node)].token >= 0) best = {nodes_[size_t(node)].token, k + 1 - i};
    }
    return best;
  }

 private:
  struct Node {
    std::map<unsigned char, int32_t> next;
    int64_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
};

struct Piece {
  std::string text;
  int32_t id = -1;  // >= 0: an added token
};

bool ends_with_word(const std::string& s, size_t end) {
  if (end == 0) return false;
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  char32_t c = 0;
  utf8_next(s, i, &c);
  return rust_word_char(c);
}
bool starts_with_word(const std::string& s, size_t begin) {
  if (begin >= s.size()) return false;
  char32_t c = 0;
  utf8_next(s, begin, &c);
  return rust_word_char(c);
}

constexpr size_t kMaxPadding = size_t(1) << 20;

// An integer field of the file in [0, hi]: a float, a negative number or one past hi is an error
// naming the field (nlohmann's get<int>() of such a value would be undefined behaviour).
int64_t json_index(const json& v, int64_t hi, const std::string& what, const char* field) {
  CBX_CHECK(v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                                             : v.get<int64_t>() >= 0 && v.get<int64_t>() <= hi),
            "%s: %s must be an integer in [0, %lld], got %s", what.c_str(), field, (long long)hi, v.dump().c_str());
  return v.get<int64_t>();
}
constexpr int64_t kMaxId = (int64_t(1) << 31) - 1;

struct PostStep {
  std::vector<int32_t> before, after;  // ids around the sequence
};

}  // namespace

struct HfTokenizer::Impl {
  std::string what;
  std::vector<HfAddedToken> added;
  std::unordered_map<std::string, int32_t> added_ids;
  TokenTrie raw_trie, norm_trie;  // non-normalized / normalized added tokens
  HfNormalizer normalizer;
  HfPreTokenizer pre;
  std::optional<HfBpe> bpe;
  std::vector<PostStep> post;
  size_t n_post_tokens = 0;
  std::optional<size_t> trunc_max;
  bool trunc_left = false;
  bool pad = false, pad_left = false;
  size_t pad_fixed = 0, pad_multiple = 0;
  int32_t pad_id = 0;
  size_t size = 0;

  // AddedVocabulary::find_matches on one piece; appends the resulting pieces.
  void split_added(const std::string& s, const TokenTrie& trie, std::vector<Piece>& out) const {
    if (trie.empty()) {
      out.push_back({s, -1});
      return;
    }
    size_t start_offset = 0;
    for (size_t i = 0; i < s.size();) {
      auto [tok, len] = trie.longest_at(s, i);
      if (tok < 0) {
        ++i;
        continue;
      }
      const HfAddedToken& t = added[size_t(tok)];
      size_t start = i, stop = i + len;
      if (t.single_word && (ends_with_word(s, start) || starts_with_word(s, stop))) {
        i += len;  // discarded; the (non-overlapping) automaton resumes after it, as in HF
        continue;
      }
      if (t.lstrip) {
        size_t ns = start;
        while (ns > 0) {
          size_t p = ns - 1;
          while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          char32_t c = 0;
          utf8_next(s, p, &c);
          if (!rust_whitespace(c)) break;
          ns = p;
        }
        start = std::max(ns, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          char32_t c = 0;
          const size_t n = utf8_next(s, stop, &c);
          if (!rust_whitespace(c)) break;
          stop += n;
        }
      }
      if (start_offset < start) out.push_back({s.substr(start_offset, start - start_offset), -1});
      out.push_back({s.substr(start, stop - start), t.id});
      start_offset = stop;
      i = std::max(i + len, stop);
    }
    if (start_offset < s.size()) out.push_back({s.substr(start_offset), -1});
  }
};

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;

HfTokenizer HfTokenizer::from_json(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("%s: not valid JSON (%s)", what.c_str(), e.what());
  }
  auto m = std::make_unique<Impl>();
  m->what = what;
  try {
    CBX_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(),
              "%s: not a Hugging Face tokenizers file (no 'model' object)", what.c_str());
    m->bpe.emplace(j["model"], what);
    m->normalizer = HfNormalizer(j.value("normalizer", json()), what);
    m->pre = HfPreTokenizer(j.value("pre_tokenizer", json()), what);
    int64_t max_id = -1;
    for (const auto& [tok, id] : m->bpe->vocab()) max_id = std::max<int64_t>(max_id, id);
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      CBX_CHECK(j["added_tokens"].is_array(), "%s: 'added_tokens' is not a list", what.c_str());
      for (const json& a : j["added_tokens"]) {
        CBX_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                      a["content"].is_string(),
                  "%s: malformed entry in 'added_tokens'", what.c_str());
        HfAddedToken t;
        t.content = a["content"].get<std::string>();
        utf8_check(t.content);
        const int64_t id = a["id"].get<int64_t>();
        CBX_CHECK(id >= 0 && id < (int64_t(1) << 31), "%s: added token '%s' has id %lld", what.c_str(),
                  t.content.c_str(), (long long)id);
        t.id = int32_t(id);
        t.special = a.value("special", false);
        t.single_word = a.value("single_word", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.normalized = a.value("normalized", !t.special);
        max_id = std::max<int64_t>(max_id, id);
        m->added_ids[t.content] = t.id;
        m->added.push_back(std::move(t));
      }
    }
    for (size_t k = 0; k < m->added.size(); ++k) {
      const HfAddedToken& t = m->added[k];
      if (t.normalized)
        m->norm_trie.add(m->normalizer.apply(t.content), k);
      else
        m->raw_trie.add(t.content, k);
    }
    m->size = size_t(max_id + 1);

    // Post-processor (single sequence only).
    auto token_id = [&](const std::string& tok) -> int32_t {
      auto a = m->added_ids.find(tok);
      if (a != m->added_ids.end()) return a->second;
      auto v = m->bpe->vocab().find(tok);
      CBX_CHECK(v != m->bpe->vocab().end(), "%s: post-processor token '%s' is unknown", what.c_str(), tok.c_str());
      return v->second;
    };
    std::function<void(const json&)> parse_post = [&](const json& p) {
      if (p.is_null()) return;
      const std::string t = p.at("type").get<std::string>();
      PostStep step;
      if (t == "ByteLevel") return;
      if (t == "Sequence") {
        for (const json& k : p.at("processors")) parse_post(k);
        return;
      }
      if (t == "BertProcessing" || t == "RobertaProcessing") {
        step.before.push_back(int32_t(json_index(p.at("cls").at(1), kMaxId, what, "post_processor cls id")));
        step.after.push_back(int32_t(json_index(p.at("sep").at(1), kMaxId, what, "post_processor sep id")));
      } else if (t == "TemplateProcessing") {
        bool seen_seq = false;
        for (const json& item : p.at("single")) {
          if (item.contains("Sequence")) {
            seen_seq = true;
            continue;
          }
          const std::string sid = item.at("SpecialToken").at("id").get<std::string>();
          std::vector<int32_t> ids;
          if (p.contains("special_tokens") && p["special_tokens"].contains(sid)) {
            for (const json& x : p["special_tokens"][sid].at("ids"))
              ids.push_back(int32_t(json_index(x, kMaxId, what, "post_processor special token id")));
          } else {
            ids.push_back(token_id(sid));
          }
          auto& dst = seen_seq ? step.after : step.before;
          dst.insert(dst.end(), ids.begin(), ids.end());
        }
      } else {
        fail("%s: post_processor '%s' is not supported", what.c_str(), t.c_str());
      }
      for (const auto* v : {&step.before, &step.after})
        for (int32_t id : *v) {
          CBX_CHECK(id >= 0, "%s: post-processor '%s' uses id %d", what.c_str(), t.c_str(), id);
          m->size = std::max(m->size, size_t(id) + 1);
        }
      m->n_post_tokens += step.before.size() + step.after.size();
      m->post.push_back(std::move(step));
    };
    parse_post(j.value("post_processor", json()));

    if (j.contains("truncation") && !j["truncation"].is_null()) {
      const json& tr = j["truncation"];
      m->trunc_max = size_t(json_index(tr.at("max_length"), INT64_MAX, what, "truncation max_length"));
      m->trunc_left = tr.value("direction", std::string("Right")) == "Left";
    }
    if (j.contains("padding") && !j["padding"].is_null()) {
      const json& pd = j["padding"];
      m->pad = true;
      m->pad_left = pd.value("direction", std::string("Right")) == "Left";
      m->pad_id = pd.contains("pad_id") ? int32_t(json_index(pd["pad_id"], kMaxId, what, "padding pad_id")) : 0;
      m->size = std::max(m->size, size_t(m->pad_id) + 1);
      if (pd.contains("pad_to_multiple_of") && !pd["pad_to_multiple_of"].is_null())
        m->pad_multiple = size_t(json_index(pd["pad_to_multiple_of"], INT64_MAX, what, "padding pad_to_multiple_of"));
      if (pd.contains("strategy") && pd["strategy"].is_object() && pd["strategy"].contains("Fixed"))
        m->pad_fixed = size_t(json_index(pd["strategy"]["Fixed"], INT64_MAX, what, "padding Fixed length"));
      // Real files pad to a model's context (hundreds to thousands); bound what a file may ask.
      CBX_CHECK(m->pad_fixed <= kMaxPadding && m->pad_multiple <= kMaxPadding,
                "%s: padding length %zu / multiple %zu is implausible (limit %zu)", what.c_str(), m->pad_fixed,
                m->pad_multiple, kMaxPadding);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("%s: malformed tokenizer JSON (%s)", what.c_str(), e.what());
  }
  return HfTokenizer(std::move(m));
}

std::vector<int32_t> HfTokenizer::encode(const std::string& utf8) const {
  utf8_check(utf8);
  const Impl& m = *impl_;
  std::vector<Piece> first, second;
  m.split_added(utf8, m.raw_trie, first);
  for (Piece& p : first) {
    if (p.id >= 0) {
      second.push_back(std::move(p));
      continue;
    }
    const std::string norm = m.normalizer.identity() ? std::move(p.text) : m.normalizer.apply(p.text);
    if (!norm.empty()) m.split_added(norm, m.norm_trie, second);
  }
  std::vector<int32_t> ids;
  std::vector<std::string> words;
  for (const Piece& p : second) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    words.clear();
    m.pre.split(p.text, words);
    for (const std::string& w : words) m.bpe->tokenize(w, ids);
  }
  if (m.trunc_max) {
    const size_t room = *m.trunc_max > m.n_post_tokens ? *m.trunc_max - m.n_post_tokens : 0;
    if (ids.size() > room) {
      if (m.trunc_left)
        ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(room));
      else
        ids.resize(room);
    }
  }
  for (const PostStep& s : m.post) {
    ids.insert(ids.begin(), s.before.begin(), s.before.end());
    ids.insert(ids.end(), s.after.begin(), s.after.end());
  }
  if (m.pad) {
    size_t target = std::max(m.pad_fixed, ids.size());
    if (m.pad_multiple > 0 && target % m.pad_multiple) target += m.pad_multiple - target % m.pad_multiple;
    if (m.pad_left)
      ids.insert(ids.begin(), target - ids.size(), m.pad_id);
    else
      ids.resize(target, m.pad_id);
  }
  return ids;
}

int32_t HfTokenizer::token_to_id(const std::string& tok) const {
  auto a = impl_->added_ids.find(tok);
  if (a != impl_->added_ids.end()) return a->second;
  auto v = impl_->bpe->vocab().find(tok);
  return v == impl_->bpe->vocab().end() ? -1 : v->second;
}

size_t HfTokenizer::vocab_size() const { return impl_->size; }
const std::vector<HfAddedToken>& HfTokenizer::added_tokens() const { return impl_->added; }

}  // namespace cbx
