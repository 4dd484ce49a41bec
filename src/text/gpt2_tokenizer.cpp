#include "text/gpt2_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "text/utf8.h"

namespace cbx {

namespace {

// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte has a visible, non-space stand-in.
std::array<char32_t, 256> make_byte_to_cp() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    m[b] = printable ? char32_t(b) : next++;
  }
  return m;
}

const std::array<char32_t, 256>& byte_to_cp() {
  static const std::array<char32_t, 256> m = make_byte_to_cp();
  return m;
}

// Inverse of bytes_to_unicode; -1 for code points outside the alphabet.
int cp_to_byte(char32_t cp) {
  static const std::array<int16_t, 324> inv = [] {
    std::array<int16_t, 324> a;
    a.fill(-1);
    const auto& m = byte_to_cp();
    for (int b = 0; b < 256; ++b) a[m[b]] = int16_t(b);
    return a;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

// Byte-level token string -> raw bytes; false if it holds a char outside the alphabet.
bool byte_level_decode(const std::string& tok, std::string* out) {
  out->clear();
  char32_t cp;
  for (size_t i = 0; i < tok.size();) {
    const size_t len = utf8_next(tok, i, &cp);
    if (len == 0) return false;
    const int b = cp_to_byte(cp);
    if (b < 0) return false;
    *out += static_cast<char>(b);
    i += len;
  }
  return true;
}

// Pre-tokenizer character classes.
enum CharClass : uint8_t { kSpace, kLetter, kNumber, kOther };

CharClass classify(char32_t c) {
  // \s in the `regex` module is the White_Space property; \p{L} / \p{N} are general categories.
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return kSpace;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  return kOther;
}

CharClass classify_fast(char32_t c) {
  static const std::array<CharClass, 128> ascii = [] {
    std::array<CharClass, 128> a{};
    for (char32_t k = 0; k < 128; ++k) a[k] = classify(k);
    return a;
  }();
  return c < 128 ? ascii[c] : classify(c);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  CBX_CHECK(f.good(), "gpt2_tokenizer: cannot open '%s'", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("gpt2_tokenizer: '%s' is not valid JSON: %s", path.c_str(), e.what());
  }
}

// A special-token entry of tokenizer_config.json: "str", {"content": "str", ...} or null.
std::string special_token_content(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

struct Gpt2Tokenizer::Impl {
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol
  };

  // ---- id space ----
  std::vector<std::string> tokens;       // id -> byte-level form (vocab) or content (added)
  std::vector<std::string> token_bytes;  // id -> raw bytes emitted by decode
  std::vector<Gpt2AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  size_t max_length = kNoMaxLength;

  // ---- BPE ----
  // Symbols are byte-level strings; symbol s < vocab_size is vocab id s, larger ones are
  // merge results absent from the vocab (they can only surface as errors).
  size_t vocab_size = 0;
  std::unordered_map<std::string, int32_t> sym_index;
  std::vector<std::string> sym_extra;  // strings of symbols >= vocab_size
  std::array<int32_t, 256> byte_sym{};
  std::unordered_map<uint64_t, Merge> merges;

  // ---- added-token matching ----
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  int32_t intern(const std::string& s) {
    auto it = sym_index.find(s);
    if (it != sym_index.end()) return it->second;
    const int32_t id = int32_t(vocab_size + sym_extra.size());
    sym_extra.push_back(s);
    sym_index.emplace(s, id);
    return id;
  }

  const std::string& sym_string(int32_t s) const {
    return size_t(s) < vocab_size ? tokens[s] : sym_extra[s - vocab_size];
  }

  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_span(const std::string& text, size_t begin, size_t end, std::vector<int32_t>& out) const;
};

// Merges the piece's byte symbols, lowest rank first and leftmost among equal ranks, which is
// what repeatedly merging every occurrence of the best-ranked pair produces.
void Gpt2Tokenizer::Impl::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  if (piece.size() > 1) {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Node {
    int32_t sym, prev, next;
  };
  const int32_t n = int32_t(piece.size());
  std::vector<Node> nodes(n);
  for (int32_t i = 0; i < n; ++i)
    nodes[i] = {byte_sym[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};

  struct Cand {
    int32_t rank, left, a, b;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = nodes[left].next;
    if (right < 0) return;
    auto it = merges.find(pair_key(nodes[left].sym, nodes[right].sym));
    if (it != merges.end()) heap.push({it->second.rank, left, nodes[left].sym, nodes[right].sym});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Node& l = nodes[c.left];
    // Stale unless the same pair still sits at this position.
    if (l.sym != c.a || l.next < 0 || nodes[l.next].sym != c.b) continue;
    const int32_t r = l.next;
    l.sym = merges.find(pair_key(c.a, c.b))->second.result;
    l.next = nodes[r].next;
    if (l.next >= 0) nodes[l.next].prev = c.left;
    nodes[r].sym = -1;
    push(l.prev);
    push(c.left);
  }

  std::vector<int32_t> ids;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = nodes[i].next) {
    const int32_t s = nodes[i].sym;
    CBX_CHECK(size_t(s) < vocab_size, "gpt2_tokenizer: BPE piece '%s' is not in the vocab", sym_string(s).c_str());
    ids.push_back(s);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (piece.size() > 1) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() > 65536) cache.clear();
    cache.emplace(piece, std::move(ids));
  }
}

// Pre-tokenizes text[begin, end) (valid UTF-8, no added tokens) and BPE-encodes each piece.
// Hand-written equivalent of the ordered alternation
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void Gpt2Tokenizer::Impl::encode_span(const std::string& text, size_t begin, size_t end,
                                      std::vector<int32_t>& out) const {
  if (begin >= end) return;
  // Code points with their byte offsets; offs[k] is the start of cp k, offs[n] == end.
  std::vector<char32_t> cps;
  std::vector<CharClass> cls;
  std::vector<size_t> offs;
  for (size_t i = begin; i < end;) {
    char32_t cp;
    const size_t len = utf8_next(text, i, &cp);
    CBX_ASSERT(len != 0);
    cps.push_back(cp);
    cls.push_back(classify_fast(cp));
    offs.push_back(i);
    i += len;
  }
  offs.push_back(end);
  const size_t n = cps.size();
  auto run_end = [&](size_t k, CharClass c) {
    while (k < n && cls[k] == c) ++k;
    return k;
  };

  std::string piece;
  for (size_t p = 0; p < n;) {
    size_t q = 0;  // end (exclusive, in code points) of the match at p
    const char32_t c0 = cps[p];
    if (c0 == U'\'' && p + 1 < n) {
      const char32_t c1 = cps[p + 1], c2 = p + 2 < n ? cps[p + 2] : 0;
      if (c1 == U's' || c1 == U't' || c1 == U'm' || c1 == U'd') {
        q = p + 2;
      } else if ((c1 == U'r' && c2 == U'e') || (c1 == U'v' && c2 == U'e') || (c1 == U'l' && c2 == U'l')) {
        q = p + 3;
      }
    }
    if (q == 0) {
      // " ?X+" for X in letters, numbers, other: the optional space binds only to a run.
      const bool sp = c0 == U' ' && p + 1 < n;
      for (CharClass c : {kLetter, kNumber, kOther}) {
        if (sp && cls[p + 1] == c) {
          q = run_end(p + 1, c);
          break;
        }
        if (cls[p] == c) {
          q = run_end(p, c);
          break;
        }
      }
    }
    if (q == 0) {
      CBX_ASSERT(cls[p] == kSpace);
      // \s+(?!\S): the whole run at the end of the span, else the run minus its last char
      // (which a following piece takes as its optional space or its own \s+); \s+ otherwise.
      const size_t e = run_end(p, kSpace);
      q = (e == n || e - p == 1) ? e : e - 1;
    }
    piece.assign(text, offs[p], offs[q] - offs[p]);
    bpe(piece, out);
    p = q;
  }
}

Gpt2Tokenizer::Gpt2Tokenizer(std::vector<std::string> tokens, const std::vector<std::string>& merges,
                             std::vector<Gpt2AddedToken> added, size_t model_max_length)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab_size = tokens.size();
  m.max_length = model_max_length;
  CBX_CHECK(m.vocab_size > 0 && m.vocab_size < size_t(INT32_MAX / 2), "gpt2_tokenizer: vocab size %zu out of range",
            m.vocab_size);

  // Added tokens: unique content and ids; they may overlay vocab ids or extend the id space.
  size_t total = m.vocab_size;
  std::vector<char> is_added(m.vocab_size, 0);
  for (const auto& a : added) {
    CBX_CHECK(!a.content.empty(), "gpt2_tokenizer: added token id %d has empty content", a.id);
    CBX_CHECK(a.id >= 0 && size_t(a.id) < size_t(INT32_MAX / 2),
              "gpt2_tokenizer: added token '%s' has id %d out of range", a.content.c_str(), a.id);
    try {
      utf8_check(a.content);
    } catch (const Error&) {
      fail("gpt2_tokenizer: added token id %d is not valid UTF-8", a.id);
    }
    CBX_CHECK(m.added_by_content.emplace(a.content, a.id).second, "gpt2_tokenizer: added token '%s' listed twice",
              a.content.c_str());
    total = std::max(total, size_t(a.id) + 1);
  }
  is_added.resize(total, 0);
  for (const auto& a : added) {
    CBX_CHECK(!is_added[a.id], "gpt2_tokenizer: two added tokens share id %d", a.id);
    is_added[a.id] = 1;
  }
  for (size_t id = m.vocab_size; id < total; ++id)
    CBX_CHECK(is_added[id], "gpt2_tokenizer: id %zu is neither a vocab nor an added token", id);

  // Vocab: byte-level strings. A slot overlaid by an added token may hold raw content instead.
  m.tokens = std::move(tokens);
  m.tokens.resize(total);
  m.token_bytes.resize(total);
  for (size_t id = 0; id < m.vocab_size; ++id) {
    const std::string& t = m.tokens[id];
    if (!byte_level_decode(t, &m.token_bytes[id])) {
      CBX_CHECK(is_added[id], "gpt2_tokenizer: vocab token %zu is not in byte-level form", id);
      continue;  // not reachable by BPE
    }
    CBX_CHECK(!t.empty(), "gpt2_tokenizer: vocab token %zu is empty", id);
    CBX_CHECK(m.sym_index.emplace(t, int32_t(id)).second, "gpt2_tokenizer: vocab token '%s' appears twice (id %zu)",
              t.c_str(), id);
  }
  for (const auto& a : added) {
    m.tokens[a.id] = a.content;
    m.token_bytes[a.id] = a.content;
    m.added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(int32_t(m.added.size()));
    m.added.push_back(a);
  }

  std::string tmp;
  for (int b = 0; b < 256; ++b) {
    tmp.clear();
    utf8_append(tmp, byte_to_cp()[b]);
    m.byte_sym[b] = m.intern(tmp);
  }

  // Merges in rank order; a repeated pair keeps its last rank (as a Python dict would).
  m.merges.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    const size_t sp = line.find(' ');
    CBX_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
              "gpt2_tokenizer: merge %zu '%s' is not 'a b'", rank, line.c_str());
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    const int32_t sa = m.intern(a), sb = m.intern(b), sr = m.intern(a + b);
    m.merges[Impl::pair_key(sa, sb)] = {int32_t(rank), sr};
  }
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt,
                                        const std::string& added_tokens_json,
                                        const std::string& tokenizer_config_json) {
  // vocab.json: {"token": id}, ids dense from 0.
  const nlohmann::json vocab = read_json(vocab_json);
  CBX_CHECK(vocab.is_object(), "gpt2_tokenizer: '%s' is not a JSON object", vocab_json.c_str());
  std::vector<std::string> tokens(vocab.size());
  std::vector<char> seen(vocab.size(), 0);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    CBX_CHECK(it.value().is_number_integer(), "gpt2_tokenizer: '%s': id of '%s' is not an integer", vocab_json.c_str(),
              it.key().c_str());
    const int64_t id = it.value().get<int64_t>();
    CBX_CHECK(id >= 0 && size_t(id) < tokens.size() && !seen[id],
              "gpt2_tokenizer: '%s': id %lld of '%s' is out of range or repeated", vocab_json.c_str(), (long long)id,
              it.key().c_str());
    seen[id] = 1;
    tokens[id] = it.key();
  }

  // merges.txt: optional "#version" header, then one "a b" per line.
  std::vector<std::string> merges;
  {
    std::istringstream in(read_file(merges_txt));
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (first && line.rfind("#version", 0) == 0) {
        first = false;
        continue;
      }
      first = false;
      if (line.empty()) continue;
      merges.push_back(line);
    }
  }

  std::vector<Gpt2AddedToken> added;
  std::unordered_map<std::string, int32_t> added_ids;
  auto add = [&](const std::string& content, int64_t id, const std::string& src) {
    auto it = added_ids.find(content);
    if (it != added_ids.end()) {
      CBX_CHECK(it->second == id, "gpt2_tokenizer: '%s': added token '%s' has ids %d and %lld", src.c_str(),
                content.c_str(), it->second, (long long)id);
      return;
    }
    CBX_CHECK(id >= 0 && id < INT32_MAX / 2, "gpt2_tokenizer: '%s': id %lld of '%s' out of range", src.c_str(),
              (long long)id, content.c_str());
    added_ids.emplace(content, int32_t(id));
    added.push_back({content, int32_t(id)});
  };

  size_t max_length = kNoMaxLength;
  std::vector<std::string> specials;
  if (!tokenizer_config_json.empty()) {
    const nlohmann::json cfg = read_json(tokenizer_config_json);
    CBX_CHECK(cfg.is_object(), "gpt2_tokenizer: '%s' is not a JSON object", tokenizer_config_json.c_str());
    if (cfg.contains("model_max_length") && cfg["model_max_length"].is_number()) {
      const double v = cfg["model_max_length"].get<double>();
      CBX_CHECK(v >= 1, "gpt2_tokenizer: '%s': model_max_length %g", tokenizer_config_json.c_str(), v);
      if (v < 1e15) max_length = size_t(v);
    }
    if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
      for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
        const std::string content = special_token_content(it.value());
        CBX_CHECK(!content.empty(), "gpt2_tokenizer: '%s': added token %s has no content",
                  tokenizer_config_json.c_str(), it.key().c_str());
        long long id = -1;
        try {
          id = std::stoll(it.key());
        } catch (...) {
        }
        add(content, id, tokenizer_config_json);
      }
    }
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
      if (cfg.contains(key)) specials.push_back(special_token_content(cfg[key]));
  }
  if (!added_tokens_json.empty()) {
    const nlohmann::json at = read_json(added_tokens_json);
    CBX_CHECK(at.is_object(), "gpt2_tokenizer: '%s' is not a JSON object", added_tokens_json.c_str());
    for (auto it = at.begin(); it != at.end(); ++it) {
      CBX_CHECK(it.value().is_number_integer(), "gpt2_tokenizer: '%s': id of '%s' is not an integer",
                added_tokens_json.c_str(), it.key().c_str());
      add(it.key(), it.value().get<int64_t>(), added_tokens_json);
    }
  }
  // Special tokens are matched whole in text; one missing from the vocab gets the next id.
  std::unordered_map<std::string, int32_t> vocab_ids;
  for (size_t i = 0; i < tokens.size(); ++i) vocab_ids.emplace(tokens[i], int32_t(i));
  for (const std::string& s : specials) {
    if (s.empty() || added_ids.count(s)) continue;
    auto it = vocab_ids.find(s);
    int64_t id = int64_t(tokens.size());
    for (const auto& a : added) id = std::max<int64_t>(id, a.id + 1);
    add(s, it != vocab_ids.end() ? it->second : id, tokenizer_config_json);
  }
  return Gpt2Tokenizer(std::move(tokens), merges, std::move(added), max_length);
}

Gpt2Tokenizer Gpt2Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  auto opt = [&](const char* name) {
    const fs::path p = d / name;
    return fs::exists(p) ? p.string() : std::string();
  };
  return from_files((d / "vocab.json").string(), (d / "merges.txt").string(), opt("added_tokens.json"),
                    opt("tokenizer_config.json"));
}

std::vector<int32_t> Gpt2Tokenizer::encode(const std::string& utf8, bool truncate) const {
  utf8_check(utf8);
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 4);
  size_t span_begin = 0;
  const size_t n = utf8.size();
  for (size_t i = 0; i < n;) {
    // Leftmost position with any added token, longest token there.
    const auto& cands = m.added_by_first_byte[static_cast<unsigned char>(utf8[i])];
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t k : cands) {
      const std::string& c = m.added[k].content;
      if (c.size() > best_len && utf8.compare(i, c.size(), c) == 0) {
        best = k;
        best_len = c.size();
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    m.encode_span(utf8, span_begin, i, out);
    out.push_back(m.added[best].id);
    i += best_len;
    span_begin = i;
  }
  m.encode_span(utf8, span_begin, n, out);
  if (truncate && out.size() > m.max_length) out.resize(m.max_length);
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    CBX_CHECK(id >= 0 && size_t(id) < m.tokens.size(), "gpt2_tokenizer: decode: id %d out of range [0, %zu)", id,
              m.tokens.size());
    bytes += m.token_bytes[id];
  }
  // bytes.decode("utf-8", errors="replace")
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp;
    size_t bad = 0;
    const size_t len = utf8_next(bytes, i, &cp, &bad);
    if (len) {
      out.append(bytes, i, len);
      i += len;
    } else {
      utf8_append(out, 0xFFFD);
      i += bad;
    }
  }
  return out;
}

size_t Gpt2Tokenizer::size() const { return impl_->tokens.size(); }
size_t Gpt2Tokenizer::model_max_length() const { return impl_->max_length; }

int32_t Gpt2Tokenizer::token_to_id(const std::string& token) const {
  auto a = impl_->added_by_content.find(token);
  if (a != impl_->added_by_content.end()) return a->second;
  auto v = impl_->sym_index.find(token);
  return v != impl_->sym_index.end() && size_t(v->second) < impl_->vocab_size ? v->second : -1;
}

const std::string& Gpt2Tokenizer::id_to_token(int32_t id) const {
  CBX_CHECK(id >= 0 && size_t(id) < impl_->tokens.size(), "gpt2_tokenizer: id %d out of range [0, %zu)", id,
            impl_->tokens.size());
  return impl_->tokens[id];
}

const std::vector<Gpt2AddedToken>& Gpt2Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace cbx
