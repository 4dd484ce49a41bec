// safetensors: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, "__metadata__": {..}},
// then the data. The reader mmaps and validates every offset against the file.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "convert/checkpoint_tensor.h"

namespace cbx {

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);  // throws naming path
  static std::unique_ptr<SafetensorsFile> from_memory(const void* data, size_t size,
                                                      const std::string& name = "<memory>");
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order
  bool has(const std::string& name) const;
  // Shape and dtype without copying; throws "missing tensor 'x' in FILE".
  const std::vector<int64_t>& shape(const std::string& name) const;
  DType dtype(const std::string& name) const;
  CkptTensor read(const std::string& name) const;  // copies the bytes
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin, end;  // absolute file offsets
  };
  SafetensorsFile() = default;
  void parse();
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<std::string> order_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (in the given order) with optional __metadata__.
// A tensor name both the reader and the writer take: not empty, not "__metadata__" (the header's
// metadata key).
bool safetensors_name_ok(const std::string& name);

void write_safetensors(const std::string& path, const std::vector<const CkptTensor*>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace cbx
