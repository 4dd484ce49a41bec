#include "convert/checkpoint_tensor.h"

#include <cstring>

#include "core/error.h"

namespace cbx {

size_t ckpt_elem_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::I8:
      return 1;
    default:
      fail("checkpoint: dtype %s is not a plain element type", dtype_name(t));
  }
}

int64_t ckpt_numel(const std::vector<int64_t>& shape, const std::string& what, size_t elem_size) {
  const int64_t kMax = INT64_MAX / int64_t(elem_size ? elem_size : 1);
  int64_t n = 1;
  for (int64_t d : shape) {
    CBX_CHECK(d >= 0, "%s: negative dimension %lld", what.c_str(), (long long)d);
    if (d == 0) {
      n = 0;
      continue;  // keep checking the remaining dims for negatives
    }
    CBX_CHECK(n <= kMax / d, "%s: element count overflows", what.c_str());
    n *= d;
  }
  return n;
}

int64_t CkptTensor::numel() const { return ckpt_numel(shape, "tensor '" + name + "'"); }

namespace {
void check_size(const CkptTensor& t) {
  size_t es = ckpt_elem_size(t.dtype);
  int64_t n = ckpt_numel(t.shape, "tensor '" + t.name + "'", es);
  CBX_CHECK(t.data.size() == size_t(n) * es, "tensor '%s': %zu data bytes for %lld elements of %s", t.name.c_str(),
            t.data.size(), (long long)n, dtype_name(t.dtype));
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

std::vector<float> CkptTensor::to_f32() const {
  check_size(*this);
  size_t n = data.size() / ckpt_elem_size(dtype);
  std::vector<float> out(n);
  const uint8_t* p = data.data();
  switch (dtype) {
    case DType::F32:
      if (n) std::memcpy(out.data(), p, n * 4);
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(p + 2 * i));
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(p + 2 * i));
      break;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) out[i] = float(load<double>(p + 8 * i));
      break;
    default:
      fail("tensor '%s': to_f32 on non-float dtype %s", name.c_str(), dtype_name(dtype));
  }
  return out;
}

std::vector<int64_t> CkptTensor::to_i64() const {
  check_size(*this);
  size_t n = data.size() / ckpt_elem_size(dtype);
  std::vector<int64_t> out(n);
  const uint8_t* p = data.data();
  switch (dtype) {
    case DType::I64:
      if (n) std::memcpy(out.data(), p, n * 8);
      break;
    case DType::I32:
      for (size_t i = 0; i < n; ++i) out[i] = load<int32_t>(p + 4 * i);
      break;
    case DType::I16:
      for (size_t i = 0; i < n; ++i) out[i] = load<int16_t>(p + 2 * i);
      break;
    case DType::I8:
      for (size_t i = 0; i < n; ++i) out[i] = int8_t(p[i]);
      break;
    default:
      fail("tensor '%s': to_i64 on non-integer dtype %s", name.c_str(), dtype_name(dtype));
  }
  return out;
}

}  // namespace cbx
