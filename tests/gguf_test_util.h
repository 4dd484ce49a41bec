// Helpers for the tests that write small random model GGUFs (test_s3tok, test_ve_campplus):
// tensor edits applied while writing (drop, reshape, retype), adding F32 values in any dtype, a
// fresh temporary path per file, and the text of the cbx::Error a call throws.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"

namespace gguf_test {

// Edits applied while writing: change a tensor's shape or dtype, or drop it.
struct Edit {
  std::string name;
  bool drop = false;
  std::vector<int64_t> shape;  // empty: keep
  cbx::DType dtype = cbx::DType::F32;
};

// Applies the edits naming `name` to `shape` and `dt` (the last one wins); false when the
// tensor is to be dropped.
inline bool apply_edits(const std::vector<Edit>& edits, const std::string& name, std::vector<int64_t>& shape,
                        cbx::DType& dt) {
  bool drop = false;
  for (const Edit& e : edits)
    if (e.name == name) {
      drop = e.drop;
      if (!e.shape.empty()) shape = e.shape;
      dt = e.dtype;
    }
  return !drop;
}

// Adds F32 values as a tensor of dtype `dt` (encoded when not F32).
inline void add_tensor_as(cbx::GgufWriter& w, const std::string& name, cbx::DType dt, const std::vector<int64_t>& shape,
                          const std::vector<float>& v) {
  if (dt == cbx::DType::F32) {
    w.add_tensor(name, dt, shape, v.data(), v.size() * 4);
  } else {
    const int64_t n = int64_t(v.size());
    std::vector<uint8_t> enc(cbx::dtype_row_bytes(dt, n));
    cbx::type_traits(dt).from_float(v.data(), enc.data(), n);
    w.add_tensor(name, dt, shape, enc.data(), enc.size());
  }
}

// A new path per call: /tmp/cbx_test_TAG_PID_N.gguf.
inline std::string temp_gguf_path(const std::string& tag) {
  static int counter = 0;
  return "/tmp/cbx_test_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".gguf";
}

// The message of the cbx::Error that f() throws; empty when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const cbx::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gguf_test
