// Random weight tensors of any dtype for model tests: each made row by row from N(mean, scale)
// f32 draws of one seeded generator, converted with the dtype's from_float; the store owns
// the bytes the returned tensors point at.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cbx::test {

struct WeightStore {
  std::vector<std::vector<uint8_t>> bufs;
  std::mt19937 rng;
  explicit WeightStore(uint32_t seed) : rng(seed) {}
  Tensor make(DType t, std::initializer_list<int64_t> shape, float scale, float mean = 0.f) {
    std::vector<int64_t> s(shape);
    const int64_t cols = s.back(), rows = s.size() > 1 ? s[0] : 1;
    std::vector<float> row(static_cast<size_t>(cols));
    std::normal_distribution<float> nd(mean, scale);
    const size_t rb = dtype_row_bytes(t, cols);
    bufs.emplace_back(rb * size_t(rows));
    auto& b = bufs.back();
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = nd(rng);
      type_traits(t).from_float(row.data(), b.data() + size_t(r) * rb, cols);
    }
    return make_tensor(t, shape, b.data(), b.size());
  }
};

}  // namespace cbx::test
