// Restricted unpickler for torch.save's data.pkl: the opcode machine. Objects live in an
// arena owned by the run (so reference cycles built by a hostile pickle cannot leak), and
// the result is converted to a PyObject tree at STOP, refusing cycles and bounding depth
// (pickle_torch.cpp: storages, tensor rebuilds, allowed calls, the conversion).
#include "convert/pickle.h"

#include <cstdarg>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "convert/pickle_unpickler.h"
#include "convert/torch_rebuild.h"
#include "core/error.h"

namespace cbx {
namespace pickle_detail {
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

}  // namespace

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
    case Val::Bool:  // True == 1 in Python: the keys of the ints 1 and 0
    case Val::Int:
      h = "i";  // built in two steps: GCC 12 misreads "literal" + std::string (-Wrestrict)
      h += std::to_string(key->k == Val::Bool ? int64_t(key->b) : key->i);
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
      uint32_t idx = op == 'q' ? uint32_t(uint_le(1)) : op == 'r' ? uint32_t(uint_le(4)) : uint32_t(memo_.size());
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

}  // namespace pickle_detail

PyRef unpickle_torch(const uint8_t* data, size_t size, const StorageFetch& fetch, const UnpickleOptions& opts) {
  using pickle_detail::Unpickler;
  Unpickler u(data, size, fetch, opts);
  return u.run();
}

}  // namespace cbx
