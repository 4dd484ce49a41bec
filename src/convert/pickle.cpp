// Restricted unpickler for torch.save's data.pkl. Objects live in an arena owned by the
// run (so reference cycles built by a hostile pickle cannot leak), and the result is
// converted to a PyObject tree at STOP, refusing cycles and bounding depth.
#include "convert/pickle.h"

#include <cstdarg>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "convert/torch_rebuild.h"
#include "core/error.h"

namespace cbx {

namespace {

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

struct Val {
  enum K : uint8_t {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    List,
    Tuple,
    Dict,
    Tensor,
    Global,
    Storage
  };
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
    if (k > n_ - pos_)
      err("truncated: %llu bytes needed, %zu left", (unsigned long long)k, n_ - pos_);
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

void Unpickler::err(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string m = vformat(fmt, ap);
  va_end(ap);
  fail("torch.load: '%s': data.pkl offset %zu: %s", o_.file.c_str(), op_pos_, m.c_str());
}

Val* Unpickler::long_bytes(uint64_t k) {
  need(k);
  const uint8_t* b = p_ + pos_;
  // Two's complement little-endian; must fit int64 after dropping sign-extension bytes.
  uint64_t len = k;
  const bool neg = k > 0 && (b[k - 1] & 0x80);
  while (len > 8 && b[len - 1] == (neg ? 0xff : 0x00)) --len;
  if (len > 8 || (len == 8 && k > 8 && bool(b[7] & 0x80) != neg)) err("integer wider than 64 bits");
  uint64_t v = neg ? ~uint64_t(0) : 0;
  for (uint64_t j = len; j-- > 0;) v = (v << 8) | b[j];
  pos_ += size_t(k);
  return integer(int64_t(v));
}

void Unpickler::set_item(Val* d, Val* key, Val* value) {
  if (d->k != Val::Dict) err("SETITEM on a non-dict");
  std::string h;
  switch (key->k) {
    case Val::None:
      h = "N";
      break;
    case Val::Bool:
      h = key->b ? "i1" : "i0";
      break;  // True == 1 in Python
    case Val::Int:
      h = "i" + std::to_string(key->i);
      break;
    case Val::Str:
      h = "s" + key->s;
      break;
    case Val::Bytes:
      h = "b" + key->s;
      break;
    default:
      err("unsupported dict key type");
  }
  if (!d->index) d->index = std::make_unique<std::unordered_map<std::string, size_t>>();
  auto [it, fresh] = d->index->emplace(std::move(h), d->dict.size());
  if (fresh) {
    d->dict.emplace_back(key, value);
  } else {
    d->dict[it->second].second = value;
  }
}

void Unpickler::append(Val* list, const std::vector<Val*>& items) {
  if (list->k != Val::List) err("APPEND to a non-list");
  list->items.insert(list->items.end(), items.begin(), items.end());
}

PyRef Unpickler::run() {
  while (!done_) {
    op_pos_ = pos_;
    need(1);
    step(p_[pos_++]);
  }
  if (stack_.size() != 1 || !marks_.empty()) {
    // Python tolerates leftovers; torch.save never writes them, so they mean corruption.
    err("%zu objects left on the stack at STOP", stack_.size());
  }
  return convert(stack_.back(), 0);
}

void Unpickler::step(uint8_t op) {
  switch (op) {
    case 0x80: {  // PROTO
      uint64_t v = uint_le(1);
      if (v > 5) err("unsupported pickle protocol %llu", (unsigned long long)v);
      return;
    }
    case 0x95:
      uint_le(8);
      return;  // FRAME: a length hint only
    case '.':  // STOP
      done_ = true;
      if (stack_.empty()) err("STOP with an empty stack");
      return;
    case '(':  // MARK
      if (marks_.size() >= o_.max_objects) err("too many MARKs");
      marks_.push_back(stack_.size());
      return;
    case '0':
      pop();
      return;  // POP
    case '1':
      pop_mark();
      return;  // POP_MARK
    case '2':
      push(top());
      return;  // DUP
    case 'N':
      push(make(Val::None));
      return;
    case 0x88:
    case 0x89: {  // NEWTRUE / NEWFALSE
      Val* v = make(Val::Bool);
      v->b = op == 0x88;
      push(v);
      return;
    }
    case 'J':
      push(integer(int32_t(uint32_t(uint_le(4)))));
      return;  // BININT
    case 'K':
      push(integer(int64_t(uint_le(1))));
      return;  // BININT1
    case 'M':
      push(integer(int64_t(uint_le(2))));
      return;  // BININT2
    case 0x8a:
      push(long_bytes(uint_le(1)));
      return;  // LONG1
    case 0x8b:
      push(long_bytes(uint_le(4)));
      return;    // LONG4
    case 'G': {  // BINFLOAT: big-endian IEEE double
      need(8);
      uint64_t u = 0;
      for (int j = 0; j < 8; ++j) u = (u << 8) | p_[pos_ + size_t(j)];
      pos_ += 8;
      Val* v = make(Val::Float);
      std::memcpy(&v->f, &u, 8);
      push(v);
      return;
    }
    case 'X':
      push(str(Val::Str, take(uint_le(4))));
      return;  // BINUNICODE
    case 0x8c:
      push(str(Val::Str, take(uint_le(1))));
      return;  // SHORT_BINUNICODE
    case 0x8d:
      push(str(Val::Str, take(uint_le(8))));
      return;  // BINUNICODE8
    case 'U':
      push(str(Val::Str, take(uint_le(1))));
      return;  // SHORT_BINSTRING (py2 str)
    case 'T':
      push(str(Val::Str, take(uint_le(4))));
      return;  // BINSTRING (py2 str)
    case 'B':
      push(str(Val::Bytes, take(uint_le(4))));
      return;  // BINBYTES
    case 'C':
      push(str(Val::Bytes, take(uint_le(1))));
      return;  // SHORT_BINBYTES
    case 0x8e:
      push(str(Val::Bytes, take(uint_le(8))));
      return;  // BINBYTES8
    case '}':
      push(make(Val::Dict));
      return;  // EMPTY_DICT
    case ']':
      push(make(Val::List));
      return;  // EMPTY_LIST
    case ')':
      push(tuple({}));
      return;  // EMPTY_TUPLE
    case 't':
      push(tuple(pop_mark()));
      return;     // TUPLE
    case 0x85: {  // TUPLE1
      Val* a = pop();
      push(tuple({a}));
      return;
    }
    case 0x86: {  // TUPLE2
      Val* b = pop();
      Val* a = pop();
      push(tuple({a, b}));
      return;
    }
    case 0x87: {  // TUPLE3
      Val* c = pop();
      Val* b = pop();
      Val* a = pop();
      push(tuple({a, b, c}));
      return;
    }
    case 'l': {  // LIST
      Val* l = make(Val::List);
      l->items = pop_mark();
      push(l);
      return;
    }
    case 'd': {  // DICT
      std::vector<Val*> kv = pop_mark();
      if (kv.size() % 2) err("DICT with an odd number of items");
      Val* d = make(Val::Dict);
      for (size_t j = 0; j < kv.size(); j += 2) set_item(d, kv[j], kv[j + 1]);
      push(d);
      return;
    }
    case 'a': {  // APPEND
      Val* v = pop();
      append(top(), {v});
      return;
    }
    case 'e': {  // APPENDS
      std::vector<Val*> items = pop_mark();
      append(top(), items);
      return;
    }
    case 's': {  // SETITEM
      Val* v = pop();
      Val* k = pop();
      set_item(top(), k, v);
      return;
    }
    case 'u': {  // SETITEMS
      std::vector<Val*> kv = pop_mark();
      if (kv.size() % 2) err("SETITEMS with an odd number of items");
      Val* d = top();
      for (size_t j = 0; j < kv.size(); j += 2) set_item(d, kv[j], kv[j + 1]);
      return;
    }
    case 'q':
    case 'r':     // BINPUT / LONG_BINPUT
    case 0x94: {  // MEMOIZE
      uint32_t idx = op == 'q'   ? uint32_t(uint_le(1))
                     : op == 'r' ? uint32_t(uint_le(4))
                                 : uint32_t(memo_.size());
      if (memo_.size() >= o_.max_objects && !memo_.count(idx)) err("memo too large");
      memo_[idx] = top();
      return;
    }
    case 'h':
    case 'j': {  // BINGET / LONG_BINGET
      uint32_t idx = uint32_t(uint_le(op == 'h' ? 1 : 4));
      auto it = memo_.find(idx);
      if (it == memo_.end()) err("memo key %u not defined", idx);
      push(it->second);
      return;
    }
    case 'c': {  // GLOBAL
      std::string module = line();
      std::string name = line();
      std::string g = module + "." + name;
      if (!torch_global_allowed(g)) err("refused global '%s'", g.c_str());
      push(str(Val::Global, g));
      return;
    }
    case 0x93: {  // STACK_GLOBAL
      Val* name = pop();
      Val* module = pop();
      if (name->k != Val::Str || module->k != Val::Str) err("STACK_GLOBAL needs two strings");
      std::string g = module->s + "." + name->s;
      if (!torch_global_allowed(g)) err("refused global '%s'", g.c_str());
      push(str(Val::Global, g));
      return;
    }
    case 'R': {  // REDUCE
      Val* args = pop();
      Val* fn = pop();
      if (fn->k != Val::Global) err("REDUCE on a non-callable");
      push(call(fn->s, args));
      return;
    }
    case 0x81: {  // NEWOBJ: only Parameter(tensor[, requires_grad])
      Val* args = pop();
      Val* cls = pop();
      if (cls->k != Val::Global || cls->s != "torch.nn.parameter.Parameter")
        err("NEWOBJ of '%s' is not allowed", cls->k == Val::Global ? cls->s.c_str() : "?");
      if (args->k != Val::Tuple || args->items.empty() || args->items[0]->k != Val::Tensor)
        err("Parameter() needs a tensor");
      push(args->items[0]);
      return;
    }
    case 'b': {  // BUILD: OrderedDict attributes (state_dict _metadata) and Parameter state
      Val* state = pop();
      Val* inst = top();
      if ((inst->k == Val::Dict && inst->b) || inst->k == Val::Tensor) {
        if (state->k != Val::Dict && state->k != Val::Tuple && state->k != Val::None)
          err("BUILD with an unsupported state");
        return;  // attributes are not part of the tree
      }
      err("BUILD is only allowed on OrderedDict and Parameter objects");
    }
    case 'Q':
      push(persistent_load(pop()));
      return;  // BINPERSID
    default:
      err("unsupported pickle opcode 0x%02x", unsigned(op));
  }
}

Val* Unpickler::persistent_load(Val* pid) {
  // ('storage', torch.<T>Storage, key, location, numel)
  if (pid->k != Val::Tuple || pid->items.size() != 5) err("persistent id is not a 5-tuple");
  const auto& a = pid->items;
  if ((a[0]->k != Val::Str && a[0]->k != Val::Bytes) || a[0]->s != "storage")
    err("only 'storage' persistent ids are allowed");
  if (a[1]->k != Val::Global) err("storage type is not a class");
  if ((a[2]->k != Val::Str && a[2]->k != Val::Bytes) || a[2]->s.empty() || a[2]->s.size() > 256)
    err("bad storage key");
  if (a[4]->k != Val::Int || a[4]->i < 0) err("bad storage size");
  const std::string& key = a[2]->s;
  const std::string& type = a[1]->s;
  Val* s = make(Val::Storage);
  if (!torch_storage_type(type, &s->dtype, &s->untyped))
    err("'%s' is not a storage type", type.c_str());
  s->i = a[4]->i;
  auto it = storages_.find(key);
  if (it != storages_.end()) {
    s->bytes = it->second->bytes;
  } else {
    s->bytes = fetch_(key);
  }
  const size_t es = s->untyped ? 1 : ckpt_elem_size(s->dtype);
  if (uint64_t(s->i) > s->bytes.size / es)
    err("storage '%s' holds %zu bytes, fewer than %lld elements of %zu bytes", key.c_str(),
        s->bytes.size, (long long)s->i, es);
  storages_.emplace(key, s);
  return s;
}

// Tensor from (storage, storage_offset, size, stride, ...).
Val* Unpickler::rebuild(const std::vector<Val*>& a, DType dtype, bool dtype_given) {
  Val* st = a[0];
  if (st->k != Val::Storage) err("tensor storage is not a storage");
  if (!dtype_given) dtype = st->dtype;
  if (a[1]->k != Val::Int) err("bad storage offset");
  auto dims = [&](Val* v, const char* what) {
    if (v->k != Val::Tuple && v->k != Val::List) err("tensor %s is not a tuple", what);
    std::vector<int64_t> d;
    for (Val* x : v->items) {
      if (x->k != Val::Int) err("tensor %s entry is not an int", what);
      d.push_back(x->i);
    }
    return d;
  };
  std::vector<int64_t> size = dims(a[2], "size"), stride = dims(a[3], "stride");
  Val* v = make(Val::Tensor);
  try {
    // An untyped storage's count is in bytes; views on it count elements of `dtype`.
    const int64_t elems = st->untyped ? int64_t(uint64_t(st->i) / ckpt_elem_size(dtype)) : st->i;
    v->tensor =
        materialise_view(st->bytes.data, elems, dtype, a[1]->i, size, stride, &tensor_budget_);
  } catch (const Error& e) {
    err("%s", e.what());
  }
  return v;
}

Val* Unpickler::call(const std::string& g, Val* args, bool allow_type_v2) {
  if (args->k != Val::Tuple) err("arguments to '%s' are not a tuple", g.c_str());
  const auto& a = args->items;
  auto nargs = [&](size_t lo, size_t hi) {
    if (a.size() < lo || a.size() > hi) err("'%s' called with %zu arguments", g.c_str(), a.size());
  };
  if (g == "collections.OrderedDict") {
    nargs(0, 0);
    Val* d = make(Val::Dict);
    d->b = true;
    return d;
  }
  if (g == "torch.Size") {
    nargs(1, 1);
    if (a[0]->k != Val::Tuple && a[0]->k != Val::List) err("torch.Size needs a tuple");
    for (Val* x : a[0]->items)
      if (x->k != Val::Int) err("torch.Size entry is not an int");
    return tuple(a[0]->items);
  }
  if (g == "torch._utils._rebuild_tensor") {
    nargs(4, 4);
    return rebuild(a, DType::F32, false);
  }
  if (g == "torch._utils._rebuild_tensor_v2") {
    nargs(6, 7);  // storage, offset, size, stride, requires_grad, hooks[, metadata]
    return rebuild(a, DType::F32, false);
  }
  if (g == "torch._utils._rebuild_tensor_v3") {
    nargs(7, 8);  // ..., hooks, dtype[, metadata]
    DType dt;
    if (a[6]->k != Val::Global || !torch_dtype_global(a[6]->s, &dt))
      err("_rebuild_tensor_v3 needs a dtype");
    return rebuild(a, dt, true);
  }
  if (g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state") {
    nargs(3, 4);
    if (a[0]->k != Val::Tensor) err("'%s' needs a tensor", g.c_str());
    return a[0];
  }
  if (g == "torch._utils._rebuild_from_type_v2" && allow_type_v2) {
    nargs(4, 4);  // func, type, args, state
    if (a[0]->k != Val::Global || a[1]->k != Val::Global ||
        (a[1]->s != "torch.Tensor" && a[1]->s != "torch.nn.parameter.Parameter"))
      err("_rebuild_from_type_v2 with an unsupported type");
    return call(a[0]->s, a[2], false);
  }
  if (g == "_codecs.encode") {  // protocol-2 bytes: encode(latin-1 text, 'latin1')
    nargs(2, 2);
    if (a[0]->k != Val::Str || a[1]->k != Val::Str || (a[1]->s != "latin1" && a[1]->s != "latin-1"))
      err("_codecs.encode supports only latin1 text");
    std::string out;
    if (!latin1_from_utf8(a[0]->s, &out)) err("_codecs.encode: text is not latin1");
    return str(Val::Bytes, std::move(out));
  }
  err("global '%s' is not callable here", g.c_str());
}

PyRef Unpickler::convert(Val* v, int depth) {
  if (v->out) return v->out;
  if (v->converting) err("recursive (self-referencing) structure");
  if (depth > o_.max_depth) err("nesting deeper than %d", o_.max_depth);
  auto o = std::make_shared<PyObject>();
  v->converting = true;
  switch (v->k) {
    case Val::None:
      break;
    case Val::Bool:
      o->kind = PyObject::Kind::Bool;
      o->b = v->b;
      break;
    case Val::Int:
      o->kind = PyObject::Kind::Int;
      o->i = v->i;
      break;
    case Val::Float:
      o->kind = PyObject::Kind::Float;
      o->f = v->f;
      break;
    case Val::Str:
      o->kind = PyObject::Kind::String;
      o->s = v->s;
      break;
    case Val::Bytes:
      o->kind = PyObject::Kind::Bytes;
      o->s = v->s;
      break;
    case Val::List:
    case Val::Tuple:
      o->kind = v->k == Val::List ? PyObject::Kind::List : PyObject::Kind::Tuple;
      for (Val* x : v->items) o->items.push_back(convert(x, depth + 1));
      break;
    case Val::Dict:
      o->kind = PyObject::Kind::Dict;
      for (auto& [k, x] : v->dict)
        o->dict.emplace_back(convert(k, depth + 1), convert(x, depth + 1));
      break;
    case Val::Tensor:
      o->kind = PyObject::Kind::Tensor;
      o->tensor = v->tensor;
      break;
    case Val::Global:
      if (DType d; !torch_dtype_global(v->s, &d))
        err("'%s' cannot appear as a value", v->s.c_str());
      o->kind = PyObject::Kind::String;  // a torch dtype, e.g. "torch.float32"
      o->s = v->s;
      break;
    case Val::Storage:
      err("a bare storage cannot appear as a value");
  }
  v->converting = false;
  v->out = o;
  return o;
}

}  // namespace

PyRef unpickle_torch(const uint8_t* data, size_t size, const StorageFetch& fetch,
                     const UnpickleOptions& opts) {
  Unpickler u(data, size, fetch, opts);
  return u.run();
}

}  // namespace cbx
