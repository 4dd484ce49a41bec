#include "text/hf_bpe.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/log.h"
#include "text/utf8.h"

namespace cbx {

using json = nlohmann::json;

HfBpe::HfBpe(const json& model, const std::string& what) {
  const std::string type = model.value("type", std::string("BPE"));
  CBX_CHECK(type == "BPE", "%s: model type '%s' is not supported (only BPE)", what.c_str(), type.c_str());
  CBX_CHECK(model.contains("vocab") && model["vocab"].is_object(), "%s: 'model.vocab' missing", what.c_str());
  vocab_.reserve(model["vocab"].size());
  for (const auto& [tok, id] : model["vocab"].items()) {
    CBX_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t(1) << 31),
              "%s: id of vocab entry '%s' is not a non-negative integer", what.c_str(), tok.c_str());
    vocab_[tok] = id.get<int32_t>();
  }
  auto opt_string = [&](const char* k) -> std::string {
    if (!model.contains(k) || model[k].is_null()) return {};
    CBX_CHECK(model[k].is_string(), "%s: 'model.%s' is not a string", what.c_str(), k);
    return model[k].get<std::string>();
  };
  auto opt_bool = [&](const char* k) { return model.contains(k) && model[k].is_boolean() && model[k].get<bool>(); };
  prefix_ = opt_string("continuing_subword_prefix");
  suffix_ = opt_string("end_of_word_suffix");
  fuse_unk_ = opt_bool("fuse_unk");
  byte_fallback_ = opt_bool("byte_fallback");
  ignore_merges_ = opt_bool("ignore_merges");
  if (model.contains("dropout") && !model["dropout"].is_null())
    log(LogLevel::Warn, "%s: BPE dropout ignored at inference (as HF does for encode)", what.c_str());
  const std::string unk = opt_string("unk_token");
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    CBX_CHECK(it != vocab_.end(), "%s: unk_token '%s' is not in the vocab", what.c_str(), unk.c_str());
    unk_id_ = it->second;
  }

  if (!model.contains("merges") || model["merges"].is_null()) return;
  CBX_CHECK(model["merges"].is_array(), "%s: 'model.merges' is not a list", what.c_str());
  const json& mj = model["merges"];
  merges_.reserve(mj.size());
  for (size_t r = 0; r < mj.size(); ++r) {
    std::string a, b;
    if (mj[r].is_string()) {
      const std::string s = mj[r].get<std::string>();
      const size_t sp = s.find(' ');
      CBX_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                "%s: merge %zu ('%s') is not two tokens separated by one space", what.c_str(), r, s.c_str());
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      CBX_CHECK(mj[r].is_array() && mj[r].size() == 2 && mj[r][0].is_string() && mj[r][1].is_string(),
                "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", what.c_str(), r);
      a = mj[r][0].get<std::string>();
      b = mj[r][1].get<std::string>();
    }
    // The merged token drops b's continuing-subword prefix (HF BPE builder).
    std::string ab = a;
    ab += (!prefix_.empty() && b.compare(0, prefix_.size(), prefix_) == 0) ? b.substr(prefix_.size()) : b;
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(ab);
    CBX_CHECK(ia != vocab_.end() && ib != vocab_.end(), "%s: merge %zu ('%s' '%s') uses a token missing from the vocab",
              what.c_str(), r, a.c_str(), b.c_str());
    CBX_CHECK(iab != vocab_.end(), "%s: merge %zu result '%s' is not in the vocab", what.c_str(), r, ab.c_str());
    // A repeated pair keeps its last rank, as a HashMap insert in HF does.
    merges_[key(ia->second, ib->second)] = Merge{int32_t(r), iab->second};
  }
}

const HfBpe::Merge* HfBpe::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void HfBpe::tokenize(const std::string& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols: one per character (or per fallback byte / fused unknown run), as a linked list.
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    const int32_t i = int32_t(syms.size());
    syms.push_back(Sym{id, i - 1, i + 1, true});
  };
  bool pending_unk = false;  // an unknown run not yet added (fuse_unk)
  std::string s;
  for (size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    const size_t n = utf8_next(word, i, &cp);
    CBX_ASSERT(n > 0);
    const bool first = i == 0, last = i + n == word.size();
    s.assign(first ? "" : prefix_);
    s.append(word, i, n);
    if (last) s += suffix_;
    i += n;
    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      if (pending_unk) add(*unk_id_), pending_unk = false;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char ch : s) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", ch);
        auto bt = vocab_.find(name);
        if (bt == vocab_.end()) break;
        bytes.push_back(bt->second);
      }
      if (bytes.size() == s.size()) {
        // HF adds the byte tokens without flushing a pending unknown first.
        for (int32_t b : bytes) add(b);
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk_token: the character is dropped
    if (pending_unk && !fuse_unk_) add(*unk_id_);
    pending_unk = true;
  }
  if (pending_unk) add(*unk_id_);
  if (syms.empty()) return;
  syms.back().next = -1;

  // Lowest rank first, then leftmost.
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand> heap;
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i)
    if (const Merge* m = find_merge(syms[size_t(i)].id, syms[size_t(i) + 1].id)) heap.push(Cand{m->rank, i, m->new_id});
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& cur = syms[size_t(c.pos)];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[size_t(cur.next)];
    const Merge* m = find_merge(cur.id, right.id);
    if (!m || m->new_id != c.new_id) continue;  // stale entry
    cur.id = c.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[size_t(cur.next)].prev = c.pos;
    if (cur.prev >= 0)
      if (const Merge* pm = find_merge(syms[size_t(cur.prev)].id, cur.id))
        heap.push(Cand{pm->rank, cur.prev, pm->new_id});
    if (cur.next >= 0)
      if (const Merge* nm = find_merge(cur.id, syms[size_t(cur.next)].id)) heap.push(Cand{nm->rank, c.pos, nm->new_id});
  }
  for (const Sym& y : syms)
    if (y.alive) out.push_back(y.id);
}

}  // namespace cbx
