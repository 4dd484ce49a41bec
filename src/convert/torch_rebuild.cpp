#include "convert/torch_rebuild.h"

#include <cstring>

#include "core/error.h"

namespace cbx {

namespace {

struct NamedDType {
  const char* name;
  DType dtype;
};
// uint8 and bool have no DType: their bytes are kept as I8.
const NamedDType kStorageTypes[] = {{"torch.DoubleStorage", DType::F64}, {"torch.FloatStorage", DType::F32},
                                    {"torch.HalfStorage", DType::F16},   {"torch.BFloat16Storage", DType::BF16},
                                    {"torch.LongStorage", DType::I64},   {"torch.IntStorage", DType::I32},
                                    {"torch.ShortStorage", DType::I16},  {"torch.CharStorage", DType::I8},
                                    {"torch.ByteStorage", DType::I8},    {"torch.BoolStorage", DType::I8}};
const NamedDType kDTypes[] = {{"torch.float64", DType::F64}, {"torch.float32", DType::F32},
                              {"torch.float16", DType::F16}, {"torch.bfloat16", DType::BF16},
                              {"torch.int64", DType::I64},   {"torch.int32", DType::I32},
                              {"torch.int16", DType::I16},   {"torch.int8", DType::I8},
                              {"torch.uint8", DType::I8},    {"torch.bool", DType::I8}};
const char* const kUntyped[] = {"torch.UntypedStorage", "torch.storage.UntypedStorage"};
// Callables and classes (the unpickler decides what each may be used for).
const char* const kOthers[] = {"collections.OrderedDict",
                               "torch.Size",
                               "torch._utils._rebuild_tensor",
                               "torch._utils._rebuild_tensor_v2",
                               "torch._utils._rebuild_tensor_v3",
                               "torch._utils._rebuild_parameter",
                               "torch._utils._rebuild_parameter_with_state",
                               "torch._utils._rebuild_from_type_v2",
                               "torch.nn.parameter.Parameter",
                               "torch.Tensor",
                               "_codecs.encode"};

const NamedDType* find(const NamedDType* t, size_t n, const std::string& name) {
  for (size_t i = 0; i < n; ++i)
    if (name == t[i].name) return &t[i];
  return nullptr;
}

}  // namespace

bool torch_storage_type(const std::string& global, DType* dtype, bool* untyped) {
  if (const NamedDType* s = find(kStorageTypes, std::size(kStorageTypes), global)) {
    *dtype = s->dtype;
    *untyped = false;
    return true;
  }
  for (const char* u : kUntyped) {
    if (global == u) {
      *dtype = DType::I8;
      *untyped = true;
      return true;
    }
  }
  return false;
}

bool torch_dtype_global(const std::string& global, DType* dtype) {
  const NamedDType* d = find(kDTypes, std::size(kDTypes), global);
  if (d) *dtype = d->dtype;
  return d != nullptr;
}

bool torch_global_allowed(const std::string& global) {
  DType d;
  bool u;
  if (torch_storage_type(global, &d, &u) || torch_dtype_global(global, &d)) return true;
  for (const char* c : kOthers)
    if (global == c) return true;
  return false;
}

std::shared_ptr<CkptTensor> materialise_view(const uint8_t* storage, int64_t storage_elems, DType dtype, int64_t offset,
                                             const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                                             size_t* budget) {
  CBX_CHECK(size.size() == stride.size(), "tensor size and stride ranks differ (%zu, %zu)", size.size(), stride.size());
  CBX_CHECK(size.size() <= 64, "tensor rank %zu too large", size.size());
  CBX_CHECK(offset >= 0, "negative storage offset %lld", (long long)offset);
  for (size_t d = 0; d < size.size(); ++d)
    CBX_CHECK(size[d] >= 0 && stride[d] >= 0, "negative size or stride in dim %zu", d);
  const size_t es = ckpt_elem_size(dtype);
  const int64_t numel = ckpt_numel(size, "tensor", es);
  const uint64_t nbytes = uint64_t(numel) * es;
  CBX_CHECK(nbytes <= *budget, "tensors expand to more bytes than the file allows");
  *budget -= size_t(nbytes);
  if (numel > 0) {
    int64_t last = offset;
    for (size_t d = 0; d < size.size(); ++d) {
      CBX_CHECK(stride[d] == 0 || size[d] - 1 <= (INT64_MAX - last) / stride[d], "tensor extent overflows");
      last += (size[d] - 1) * stride[d];
    }
    CBX_CHECK(last < storage_elems, "tensor view (offset %lld, last element %lld) exceeds its storage of %lld elements",
              (long long)offset, (long long)last, (long long)storage_elems);
  }
  auto t = std::make_shared<CkptTensor>();
  t->dtype = dtype;
  t->shape = size;
  t->data.resize(size_t(nbytes));
  if (numel == 0) return t;
  uint8_t* dst = t->data.data();
  const size_t nd = size.size();
  const int64_t inner = nd ? size[nd - 1] : 1;
  const int64_t inner_stride = nd ? stride[nd - 1] : 1;
  std::vector<int64_t> idx(nd, 0);
  // Element index of the current row's first element; unsigned so that stepping past the
  // last row (never dereferenced) cannot overflow.
  uint64_t base = uint64_t(offset);
  for (int64_t row = 0, rows = numel / inner; row < rows; ++row) {
    if (inner_stride == 1) {
      std::memcpy(dst, storage + size_t(base) * es, size_t(inner) * es);
      dst += size_t(inner) * es;
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += es)
        std::memcpy(dst, storage + size_t(base + uint64_t(j) * uint64_t(inner_stride)) * es, es);
    }
    for (size_t d = nd >= 1 ? nd - 1 : 0; d-- > 0;) {  // odometer over the outer dims
      base += uint64_t(stride[d]);
      if (++idx[d] < size[d]) break;
      base -= uint64_t(stride[d]) * uint64_t(size[d]);
      idx[d] = 0;
    }
  }
  return t;
}

bool latin1_from_utf8(const std::string& s, std::string* out) {
  out->clear();
  for (size_t j = 0; j < s.size();) {
    const uint8_t c = uint8_t(s[j]);
    if (c < 0x80) {
      out->push_back(char(c));
      j += 1;
    } else if ((c == 0xc2 || c == 0xc3) && j + 1 < s.size() && (uint8_t(s[j + 1]) & 0xc0) == 0x80) {
      out->push_back(char(((c & 0x1f) << 6) | (uint8_t(s[j + 1]) & 0x3f)));
      j += 2;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace cbx
