// .npy input / output helpers shared by the `debug` stage commands; `cmd` names the command in
// errors. Also their option-value reader and the process CPU clock their timings report.
#pragma once
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"
#include "core/tensor.h"

namespace cbx::cli {

inline NpyArray load_f32_npy(const char* cmd, const std::string& path) {
  NpyArray a = npy_load(path);
  CBX_CHECK(a.dtype == DType::F32, "%s: '%s' must be float32", cmd, path.c_str());
  return a;
}

// Drops leading dims of size 1 until `want` dims remain.
inline std::vector<int64_t> squeeze_to(const char* cmd, const NpyArray& a, size_t want, const std::string& path) {
  std::vector<int64_t> s = a.shape;
  while (s.size() > want && s.front() == 1) s.erase(s.begin());
  CBX_CHECK(s.size() == want, "%s: '%s' has shape %s, want %zu dims", cmd, path.c_str(), a.shape_str().c_str(), want);
  return s;
}

// The value after option argv[i] (i advances to it); an error naming `cmd` and the option when
// argv ends first.
inline std::string option_value(const char* cmd, int argc, char** argv, int& i) {
  CBX_CHECK(i + 1 < argc, "%s: %s needs a value", cmd, argv[i]);
  return argv[++i];
}

// Writes a float32 tensor (rows possibly strided) as a contiguous .npy of the tensor's shape.
inline void save_tensor_npy(const std::string& path, const Tensor& t) {
  const int64_t rows = t.rows(), cols = t.cols();
  std::vector<float> buf(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(buf.data() + r * cols, t.row(r), size_t(cols) * 4);
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  npy_save_f32(path, shape, buf.data());
}

// Process CPU time (all threads) in ms: robust to a loaded machine, unlike wall time.
inline double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

}  // namespace cbx::cli
