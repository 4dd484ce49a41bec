// data.pkl writer: pickle protocol 2 using only opcodes and globals that
// torch.load(weights_only=True) accepts (floats and bytes excepted: see save_torch_pt).
#include <cstring>
#include <map>

#include "convert/pickle.h"
#include "core/error.h"

namespace cbx {

namespace {

const char* storage_class(DType t) {
  switch (t) {
    case DType::F64:
      return "DoubleStorage";
    case DType::F32:
      return "FloatStorage";
    case DType::F16:
      return "HalfStorage";
    case DType::BF16:
      return "BFloat16Storage";
    case DType::I64:
      return "LongStorage";
    case DType::I32:
      return "IntStorage";
    case DType::I16:
      return "ShortStorage";
    case DType::I8:
      return "CharStorage";
    default:
      fail("torch.save: dtype %s cannot be stored", dtype_name(t));
  }
}

class Pickler {
 public:
  explicit Pickler(std::vector<const CkptTensor*>* storages) : storages_(storages) {}
  std::string run(const PyObject& root) {
    op(0x80);
    op(2);  // PROTO 2
    save(root, 0);
    op('.');
    return std::move(out_);
  }

 private:
  void op(uint8_t b) { out_.push_back(char(b)); }
  void le(uint64_t v, int n) {
    for (int j = 0; j < n; ++j) op(uint8_t(v >> (8 * j)));
  }
  void global(const char* module, const char* name) {
    op('c');
    out_ += module;
    op('\n');
    out_ += name;
    op('\n');
  }
  void unicode(const std::string& s) {
    CBX_CHECK(s.size() <= 0xffffffffu, "torch.save: string too long");
    op('X');
    le(s.size(), 4);
    out_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      le(uint64_t(v), 1);
    } else if (v >= 0 && v < 65536) {
      op('M');
      le(uint64_t(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      le(uint64_t(uint32_t(int32_t(v))), 4);
    } else {  // LONG1: minimal two's complement, little-endian
      int n = 8;
      while (n > 1) {
        const int64_t hi = v >> (8 * (n - 1) - 1);  // top byte plus the next sign bit
        if (hi != 0 && hi != -1) break;
        --n;
      }
      op(0x8a);
      op(uint8_t(n));
      le(uint64_t(v), n);
    }
  }
  void tuple_of_ints(const std::vector<int64_t>& v) {
    if (v.empty()) {
      op(')');
      return;
    }
    if (v.size() > 3) op('(');
    for (int64_t x : v) integer(x);
    op(v.size() == 1 ? 0x85 : v.size() == 2 ? 0x86 : v.size() == 3 ? 0x87 : 't');
  }

  void tensor(const std::shared_ptr<CkptTensor>& t) {
    CBX_CHECK(t, "torch.save: null tensor");
    const char* cls = storage_class(t->dtype);
    const size_t es = ckpt_elem_size(t->dtype);
    const int64_t numel = ckpt_numel(t->shape, "torch.save: tensor '" + t->name + "'", es);
    CBX_CHECK(t->data.size() == size_t(numel) * es, "torch.save: tensor '%s' has %zu bytes, shape and dtype need %llu",
              t->name.c_str(), t->data.size(), (unsigned long long)(uint64_t(numel) * es));
    auto [it, fresh] = keys_.emplace(t.get(), keys_.size());
    if (fresh) storages_->push_back(t.get());
    // Contiguous strides as torch computes them (a zero-size dim counts as 1).
    std::vector<int64_t> stride(t->shape.size());
    int64_t s = 1;
    for (size_t d = t->shape.size(); d-- > 0;) {
      stride[d] = s;
      s *= t->shape[d] > 0 ? t->shape[d] : 1;
    }
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');  // persistent id ('storage', cls, key, 'cpu', numel)
    unicode("storage");
    global("torch", cls);
    unicode(std::to_string(it->second));
    unicode("cpu");
    integer(numel);
    op('t');
    op('Q');     // BINPERSID
    integer(0);  // storage offset
    tuple_of_ints(t->shape);
    tuple_of_ints(stride);
    op(0x89);  // requires_grad=False
    global("collections", "OrderedDict");
    op(')');
    op('R');  // backward_hooks = OrderedDict()
    op('t');
    op('R');
  }

  // Containers and tensors reachable twice are written once and then fetched from the pickle
  // memo (BINPUT/BINGET, as Python's pickler does), so a shared subtree stays shared.
  void save(const PyObject& o, int depth) {
    CBX_CHECK(depth < 512, "torch.save: object tree nested too deeply");
    using K = PyObject::Kind;
    const bool memoizable = o.kind == K::List || o.kind == K::Tuple || o.kind == K::Dict || o.kind == K::Tensor;
    if (!memoizable) return save_value(o, depth);
    auto it = memo_.find(&o);
    if (it != memo_.end()) {
      CBX_CHECK(it->second != kInProgress, "torch.save: cyclic object tree (a container holds itself)");
      memo_op(it->second, 'h', 'j');  // BINGET / LONG_BINGET
      return;
    }
    memo_[&o] = kInProgress;
    save_value(o, depth);
    const uint32_t idx = next_memo_++;
    memo_[&o] = idx;
    memo_op(idx, 'q', 'r');  // BINPUT / LONG_BINPUT
  }
  void memo_op(uint32_t idx, uint8_t short_op, uint8_t long_op) {
    if (idx < 256) {
      op(short_op);
      op(uint8_t(idx));
    } else {
      op(long_op);
      le(idx, 4);
    }
  }

  void save_value(const PyObject& o, int depth) {
    using K = PyObject::Kind;
    switch (o.kind) {
      case K::None:
        op('N');
        return;
      case K::Bool:
        op(o.b ? 0x88 : 0x89);
        return;
      case K::Int:
        integer(o.i);
        return;
      case K::Float: {
        uint64_t u;
        std::memcpy(&u, &o.f, 8);
        op('G');
        for (int j = 7; j >= 0; --j) op(uint8_t(u >> (8 * j)));
        return;
      }
      case K::String:
        unicode(o.s);
        return;
      case K::Bytes:
        CBX_CHECK(o.s.size() <= 0xffffffffu, "torch.save: bytes too long");
        op('B');
        le(o.s.size(), 4);
        out_ += o.s;
        return;
      case K::List:
        op(']');
        if (!o.items.empty()) {
          op('(');
          for (const PyRef& x : o.items) save(*check(x), depth + 1);
          op('e');
        }
        return;
      case K::Tuple:
        if (o.items.empty()) {
          op(')');
          return;
        }
        if (o.items.size() > 3) op('(');
        for (const PyRef& x : o.items) save(*check(x), depth + 1);
        op(o.items.size() == 1 ? 0x85 : o.items.size() == 2 ? 0x86 : o.items.size() == 3 ? 0x87 : 't');
        return;
      case K::Dict:
        op('}');
        if (!o.dict.empty()) {
          op('(');
          for (const auto& [k, v] : o.dict) {
            save(*check(k), depth + 1);
            save(*check(v), depth + 1);
          }
          op('u');
        }
        return;
      case K::Tensor:
        tensor(o.tensor);
        return;
    }
    fail("torch.save: unknown object kind %d", int(o.kind));
  }
  static const PyObject* check(const PyRef& r) {
    CBX_CHECK(r, "torch.save: null object in tree");
    return r.get();
  }

  std::string out_;
  std::vector<const CkptTensor*>* storages_;
  std::map<const CkptTensor*, size_t> keys_;
  static constexpr uint32_t kInProgress = UINT32_MAX;
  std::map<const PyObject*, uint32_t> memo_;
  uint32_t next_memo_ = 0;
};

}  // namespace

std::string pickle_torch(const PyObject& root, std::vector<const CkptTensor*>* storages) {
  Pickler p(storages);
  return p.run(root);
}

}  // namespace cbx
