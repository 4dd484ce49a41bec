// Helpers for the nn kernel tests: owned F32 buffers, random fill, error measures.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/tensor.h"
#include "ops/conv.h"

namespace nn_test {

#define CBX_SKIP_IF_ISA_UNAVAILABLE()                                         \
  do {                                                                        \
    if (cbx::forced_isa_unavailable()) GTEST_SKIP() << "ISA not on this CPU"; \
  } while (0)

struct Buf {
  std::vector<float> v;
  cbx::Tensor t;
  Buf(std::initializer_list<int64_t> shape, uint32_t seed = 0, float lo = -1.f, float hi = 1.f) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    v.assign(size_t(n), 0.f);
    if (seed) {
      std::mt19937 rng(seed);
      std::uniform_real_distribution<float> u(lo, hi);
      for (auto& x : v) x = u(rng);
    }
    t = cbx::make_tensor(cbx::DType::F32, shape, v.data(), v.size() * sizeof(float));
  }
  float* p() { return v.data(); }
  size_t size() const { return v.size(); }
};

// max |a - b| / scale
inline double max_abs_diff(const float* a, const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}
inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}
inline double rms(const double* a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += a[i] * a[i];
  return std::sqrt(s / double(n ? n : 1));
}

inline cbx::Conv1dParams conv1d_params(int64_t stride, int64_t dilation, int64_t pad_left, int64_t pad_right,
                                       int64_t groups) {
  cbx::Conv1dParams p;
  p.stride = stride;
  p.dilation = dilation;
  p.pad_left = pad_left;
  p.pad_right = pad_right;
  p.groups = groups;
  return p;
}

}  // namespace nn_test
