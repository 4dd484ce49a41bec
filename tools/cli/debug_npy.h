// .npy input helpers shared by the `debug` stage commands; `cmd` names the command in errors.
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"

namespace cbx::cli {

inline NpyArray load_f32_npy(const char* cmd, const std::string& path) {
  NpyArray a = npy_load(path);
  CBX_CHECK(a.dtype == DType::F32, "%s: '%s' must be float32", cmd, path.c_str());
  return a;
}

// Drops leading dims of size 1 until `want` dims remain.
inline std::vector<int64_t> squeeze_to(const char* cmd, const NpyArray& a, size_t want,
                                       const std::string& path) {
  std::vector<int64_t> s = a.shape;
  while (s.size() > want && s.front() == 1) s.erase(s.begin());
  CBX_CHECK(s.size() == want, "%s: '%s' has shape %s, want %zu dims", cmd, path.c_str(),
            a.shape_str().c_str(), want);
  return s;
}

}  // namespace cbx::cli
