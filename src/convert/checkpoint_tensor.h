// A tensor read from (or to be written to) an upstream checkpoint file, owned in memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cbx {

struct CkptTensor {
  std::string name;
  DType dtype = DType::F32;    // F32, F16, BF16, F64, I64, I32, I8...
  std::vector<int64_t> shape;  // row-major, as PyTorch
  std::vector<uint8_t> data;   // contiguous, little-endian

  int64_t numel() const;
  std::vector<float> to_f32() const;    // float types only (throws otherwise)
  std::vector<int64_t> to_i64() const;  // integer types only
};

// Bytes per element of a plain (non-quantized) checkpoint dtype; throws for others.
size_t ckpt_elem_size(DType t);
// Product of the dims; throws naming `what` if a dim is negative or the product (times
// the element size, when given) overflows int64.
int64_t ckpt_numel(const std::vector<int64_t>& shape, const std::string& what, size_t elem_size = 1);

}  // namespace cbx
