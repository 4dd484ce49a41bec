// The torch side of the restricted unpickler (convert/pickle_unpickler.h): persistent ids to
// storages fetched from the archive, tensor rebuilds, the whitelisted globals a torch.save
// pickle may call, and the conversion of the object graph into a PyObject tree.
#include <cstring>
#include <unordered_set>

#include "convert/pickle_unpickler.h"
#include "convert/torch_rebuild.h"
#include "core/error.h"

namespace cbx::pickle_detail {

Val* Unpickler::persistent_load(Val* pid) {
  // ('storage', torch.<T>Storage, key, location, numel)
  if (pid->k != Val::Tuple || pid->items.size() != 5) err("persistent id is not a 5-tuple");
  const auto& a = pid->items;
  if ((a[0]->k != Val::Str && a[0]->k != Val::Bytes) || a[0]->s != "storage")
    err("only 'storage' persistent ids are allowed");
  if (a[1]->k != Val::Global) err("storage type is not a class");
  if ((a[2]->k != Val::Str && a[2]->k != Val::Bytes) || a[2]->s.empty() || a[2]->s.size() > 256) err("bad storage key");
  if (a[4]->k != Val::Int || a[4]->i < 0) err("bad storage size");
  const std::string& key = a[2]->s;
  const std::string& type = a[1]->s;
  Val* s = make(Val::Storage);
  if (!torch_storage_type(type, &s->dtype, &s->untyped)) err("'%s' is not a storage type", type.c_str());
  s->i = a[4]->i;
  auto it = storages_.find(key);
  if (it != storages_.end()) {
    s->bytes = it->second->bytes;
  } else {
    s->bytes = fetch_(key);
  }
  const size_t es = s->untyped ? 1 : ckpt_elem_size(s->dtype);
  if (uint64_t(s->i) > s->bytes.size / es)
    err("storage '%s' holds %zu bytes, fewer than %lld elements of %zu bytes", key.c_str(), s->bytes.size,
        (long long)s->i, es);
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
    v->tensor = materialise_view(st->bytes.data, elems, dtype, a[1]->i, size, stride, &tensor_budget_);
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
    if (a[6]->k != Val::Global || !torch_dtype_global(a[6]->s, &dt)) err("_rebuild_tensor_v3 needs a dtype");
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
      for (auto& [k, x] : v->dict) o->dict.emplace_back(convert(k, depth + 1), convert(x, depth + 1));
      break;
    case Val::Tensor:
      o->kind = PyObject::Kind::Tensor;
      o->tensor = v->tensor;
      break;
    case Val::Global:
      if (DType d; !torch_dtype_global(v->s, &d)) err("'%s' cannot appear as a value", v->s.c_str());
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

}  // namespace cbx::pickle_detail
