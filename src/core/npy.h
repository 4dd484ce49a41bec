// Minimal NumPy .npy reader/writer for parity tests and `chatterbox debug ...` dumps.
// Supports little-endian float32 / int32 / int64 arrays in C order (format 1.0, 2.0, 3.0 on
// read; 1.0 on write, 2.0 when the header would not fit). Every header field is validated
// before the payload is touched; errors name the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cbx {

struct NpyArray {
  DType dtype = DType::F32;    // F32, I32 or I64
  std::vector<int64_t> shape;  // row-major; empty = scalar
  std::vector<uint8_t> data;   // numel() * element size bytes, C order

  int64_t numel() const;
  size_t element_size() const;
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data.data());
  }
  // Any supported dtype converted to float (int64 values beyond 2^24 lose precision).
  std::vector<float> to_f32() const;
  std::string shape_str() const;  // "(3, 80)"
};

// Parse a whole .npy image held in memory; `name` is used in error messages.
NpyArray npy_parse(const void* bytes, size_t size, const std::string& name);
NpyArray npy_load(const std::string& path);

// Serialise `numel(shape)` elements of `dtype` (F32, I32 or I64) starting at `data`.
std::vector<uint8_t> npy_serialize(DType dtype, const std::vector<int64_t>& shape, const void* data);
void npy_save(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data);
inline void npy_save(const std::string& path, const NpyArray& a) { npy_save(path, a.dtype, a.shape, a.data.data()); }
inline void npy_save_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  npy_save(path, DType::F32, shape, data);
}

}  // namespace cbx
