// The restricted unpickler's state (internal to src/convert: pickle.cpp runs the opcodes,
// pickle_torch.cpp rebuilds torch storages and tensors and converts the result). See
// convert/pickle.h for the entry point.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "convert/pickle.h"

namespace cbx::pickle_detail {

struct Val {
  enum K : uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Tensor, Global, Storage };
  K k = None;
  bool b = false;  // Bool value; for Dict: created by OrderedDict() (BUILD allowed)
  int64_t i = 0;   // Int; Storage: element count
  double f = 0;
  std::string s;  // Str / Bytes / Global "module.name"
  std::vector<Val*> items;
  std::vector<std::pair<Val*, Val*>> dict;
  std::unique_ptr<std::unordered_map<std::string, size_t>> index;  // dict key -> slot
  std::shared_ptr<CkptTensor> tensor;
  DType dtype = DType::I8;  // Storage element type
  bool untyped = false;     // Storage: torch.UntypedStorage (bytes)
  StorageBytes bytes;       // Storage
  PyRef out;                // conversion result
  bool converting = false;
};

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, const StorageFetch& fetch, const UnpickleOptions& o)
      : p_(data), n_(size), fetch_(fetch), o_(o), tensor_budget_(o.max_tensor_bytes) {}

  PyRef run();

 private:
  [[noreturn]] void err(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  // ---- input
  void need(uint64_t k) {
    if (k > n_ - pos_) err("truncated: %llu bytes needed, %zu left", (unsigned long long)k, n_ - pos_);
  }
  uint64_t uint_le(int k) {
    need(size_t(k));
    uint64_t v = 0;
    for (int j = k - 1; j >= 0; --j) v = (v << 8) | p_[pos_ + size_t(j)];
    pos_ += size_t(k);
    return v;
  }
  std::string take(uint64_t k) {
    need(k);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(k));
    pos_ += size_t(k);
    return s;
  }
  std::string line() {
    const size_t kMaxLine = 256;
    for (size_t j = pos_; j < n_ && j - pos_ <= kMaxLine; ++j) {
      if (p_[j] == '\n') {
        std::string s(reinterpret_cast<const char*>(p_ + pos_), j - pos_);
        pos_ = j + 1;
        return s;
      }
    }
    err("GLOBAL name not terminated within %zu bytes", kMaxLine);
  }

  // ---- objects and stack
  Val* make(Val::K k) {
    if (arena_.size() >= o_.max_objects) err("more than %zu objects", o_.max_objects);
    arena_.push_back(std::make_unique<Val>());
    arena_.back()->k = k;
    return arena_.back().get();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Val* v) { stack_.push_back(v); }
  Val* pop() {
    if (stack_.size() <= floor()) err("stack underflow");
    Val* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Val* top() {
    if (stack_.size() <= floor()) err("stack underflow");
    return stack_.back();
  }
  std::vector<Val*> pop_mark() {
    if (marks_.empty()) err("no MARK on the stack");
    std::vector<Val*> v(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return v;
  }
  Val* tuple(std::vector<Val*> items) {
    Val* t = make(Val::Tuple);
    t->items = std::move(items);
    return t;
  }
  Val* str(Val::K k, std::string s) {
    Val* v = make(k);
    v->s = std::move(s);
    return v;
  }
  Val* integer(int64_t i) {
    Val* v = make(Val::Int);
    v->i = i;
    return v;
  }
  Val* long_bytes(uint64_t k);
  void set_item(Val* d, Val* key, Val* value);
  void append(Val* list, const std::vector<Val*>& items);
  void step(uint8_t op);

  // ---- torch
  Val* persistent_load(Val* pid);
  Val* call(const std::string& g, Val* args, bool allow_type_v2 = true);
  Val* rebuild(const std::vector<Val*>& a, DType dtype, bool dtype_given);
  PyRef convert(Val* v, int depth);

  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0, op_pos_ = 0;
  const StorageFetch& fetch_;
  const UnpickleOptions& o_;
  std::vector<std::unique_ptr<Val>> arena_;
  std::vector<Val*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Val*> memo_;
  std::unordered_map<std::string, Val*> storages_;
  size_t tensor_budget_;
  bool done_ = false;
};

}  // namespace cbx::pickle_detail
