// GGUF v3 reader (mmap, zero copy) and writer. Layout per the published GGUF spec:
// header (magic "GGUF", version 3, tensor count, kv count), metadata key/values, tensor
// infos (name, n_dims, dims innermost-first, ggml type id, offset), padding to the
// alignment (general.alignment, default 32), tensor data.
// Every count, size and offset is validated before use; errors name the file and what
// is wrong. Shapes exposed here are row-major (outermost first), i.e. GGUF dims reversed.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cbx {

class OutputFile;

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

const char* gguf_type_name(GgufType t);  // "u8", ..., "array"; "unknown" otherwise

struct GgufValue;
struct GgufArray {
  GgufType type = GgufType::U8;  // element type (nested arrays allowed)
  std::vector<GgufValue> items;
};
struct GgufValue {
  GgufType type = GgufType::U8;
  // integers widen to int64/uint64, floats to double, bool to bool
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  int64_t as_int() const;   // any integer type (throws otherwise / on overflow)
  double as_float() const;  // any numeric type
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
  std::vector<int64_t> as_int_array() const;
  std::vector<float> as_float_array() const;
  std::vector<std::string> as_string_array() const;
};

// Structural equality (types and values; NaN equals NaN). Used by tests and the fuzzer.
bool same_value(const GgufValue& a, const GgufValue& b);

// Limits the reader enforces beyond the spec (real files are far inside them).
constexpr int kGgufMaxArrayDepth = 16;       // nested metadata arrays
constexpr size_t kGgufMaxKeyBytes = 65535;   // metadata key length (spec limit)
constexpr size_t kGgufMaxNameBytes = 65535;  // tensor name length
constexpr uint32_t kGgufMaxAlignment = 1u << 30;

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  int ndim = 0;
  int64_t shape[kMaxDims] = {1, 1, 1, 1};  // row-major
  uint64_t offset = 0;                     // relative to the data section
  size_t nbytes = 0;
};

class GgufFile {
 public:
  // mmaps and validates the whole file. Throws cbx::Error naming `path` on any problem.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests); `data` must outlive the object.
  static std::unique_ptr<GgufFile> from_memory(const void* data, size_t size, const std::string& name = "<memory>");
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t size() const { return size_; }                // bytes in the file / image

  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;
  const GgufValue& get(const std::string& key) const;  // throws "missing metadata key"
  const std::vector<std::string>& keys() const { return key_order_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Zero-copy tensor over the mapped bytes (read-only memory: never write through it).
  Tensor tensor(const std::string& name) const;  // throws "missing tensor 'x'"
  Tensor tensor(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  void parse(const uint8_t* data, size_t size);

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<std::string> key_order_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Streams a GGUF file: metadata and tensor infos first, then tensor data in the order
// added. Tensor data is copied at add time (or produced by a callback at write time, so
// multi-GB conversions do not hold every tensor in memory twice).
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_value(const std::string& key, const GgufValue& v);  // generic (copying metadata)

  // shape is row-major; bytes must equal the shape's size in dtype.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes);
  using Producer = void (*)(void* ctx, void* dst, size_t bytes);
  void add_tensor_lazy(const std::string& name, DType dtype, std::vector<int64_t> shape, Producer produce, void* ctx);
  // Same with a callable. At write time it is called once with a scratch buffer of
  // exactly the tensor's size, which it must fill; it may throw to abort the write.
  using ProducerFn = std::function<void(void* dst, size_t bytes)>;
  void add_tensor_lazy(const std::string& name, DType dtype, std::vector<int64_t> shape, ProducerFn produce);

  void set_alignment(size_t a);  // default 32; written as general.alignment if not 32
  // Writes to `path` through an OutputFile (core/output_file.h: a temporary file renamed at
  // the end; a device node written in place). Throws on I/O errors.
  void write(const std::string& path) const;
  // Writes to an output prepared (and checked against the inputs) earlier, and commits it.
  void write(OutputFile& out) const;
  // The same bytes in memory (tests, fuzzing, small files).
  std::vector<uint8_t> to_bytes() const;

  size_t tensor_count() const { return tensors_.size(); }

  class Sink;  // byte sink shared by write() and to_bytes() (gguf_writer.cpp)

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> owned;
    ProducerFn produce;  // empty: data is in `owned`
    size_t bytes = 0;
  };
  void emit(Sink& out) const;
  void add_kv(const std::string& key, GgufValue v);
  Pending& new_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape);
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
  size_t alignment_ = 32;
};

}  // namespace cbx
