// GGUF v3 writer: metadata in insertion order, tensor infos, then tensor data, each tensor
// starting at a multiple of the alignment and zero-padded to the next one. Data added lazily
// is produced one tensor at a time while writing, so conversions stream.
#include <unistd.h>

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"
#include "core/output_file.h"

namespace cbx {

class GgufWriter::Sink {
 public:
  virtual ~Sink() = default;
  virtual void put(const void* p, size_t n) = 0;
  size_t pos = 0;

  template <typename T>
  void val(T v) {
    put(&v, sizeof(T));
  }  // host is little-endian
  void str(const std::string& s) {
    val<uint64_t>(s.size());
    put(s.data(), s.size());
  }
  void pad_to(size_t alignment) {
    static const uint8_t kZeros[256] = {};
    size_t n = (alignment - pos % alignment) % alignment;
    while (n) {
      size_t k = n < sizeof(kZeros) ? n : sizeof(kZeros);
      put(kZeros, k);
      n -= k;
    }
  }
};

namespace {

class VecSink : public GgufWriter::Sink {
 public:
  std::vector<uint8_t> bytes;
  void put(const void* p, size_t n) override {
    // resize + memcpy: GCC 12 misreads an inlined insert of a short literal (-Wstringop-overflow).
    const size_t at = bytes.size();
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
    pos += n;
  }
};

class FileSink : public GgufWriter::Sink {
 public:
  FileSink(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void put(const void* p, size_t n) override {
    if (n && std::fwrite(p, 1, n, f_) != n)
      fail("%s: write failed at offset %zu: %s", path_.c_str(), pos, std::strerror(errno));
    pos += n;
  }

 private:
  std::FILE* f_;
  const std::string& path_;
};

bool is_pow2(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

void check_alignment(uint64_t a) {
  CBX_CHECK(is_pow2(a) && a <= kGgufMaxAlignment, "gguf writer: alignment %llu is not a power of two in [1, 2^30]",
            (unsigned long long)a);
}

// Checks that v can be written as its declared type (what the reader would accept back).
void check_value(const std::string& key, const GgufValue& v, int depth) {
  const char* k = key.c_str();
  auto in_range_u = [&](uint64_t max) {
    const uint64_t* u = std::get_if<uint64_t>(&v.v);
    CBX_CHECK(u, "gguf writer: key '%s': %s value must hold uint64_t", k, gguf_type_name(v.type));
    CBX_CHECK(*u <= max, "gguf writer: key '%s': %llu out of range for %s", k, (unsigned long long)*u,
              gguf_type_name(v.type));
  };
  auto in_range_i = [&](int64_t lo, int64_t hi) {
    const int64_t* i = std::get_if<int64_t>(&v.v);
    CBX_CHECK(i, "gguf writer: key '%s': %s value must hold int64_t", k, gguf_type_name(v.type));
    CBX_CHECK(*i >= lo && *i <= hi, "gguf writer: key '%s': %lld out of range for %s", k, (long long)*i,
              gguf_type_name(v.type));
  };
  switch (v.type) {
    case GgufType::U8:
      in_range_u(UINT8_MAX);
      break;
    case GgufType::U16:
      in_range_u(UINT16_MAX);
      break;
    case GgufType::U32:
      in_range_u(UINT32_MAX);
      break;
    case GgufType::U64:
      in_range_u(UINT64_MAX);
      break;
    case GgufType::I8:
      in_range_i(INT8_MIN, INT8_MAX);
      break;
    case GgufType::I16:
      in_range_i(INT16_MIN, INT16_MAX);
      break;
    case GgufType::I32:
      in_range_i(INT32_MIN, INT32_MAX);
      break;
    case GgufType::I64:
      in_range_i(INT64_MIN, INT64_MAX);
      break;
    case GgufType::F32:
    case GgufType::F64: {
      const double* d = std::get_if<double>(&v.v);
      CBX_CHECK(d, "gguf writer: key '%s': %s value must hold double", k, gguf_type_name(v.type));
      CBX_CHECK(v.type == GgufType::F64 || !std::isfinite(*d) || std::fabs(*d) <= double(FLT_MAX),
                "gguf writer: key '%s': %g out of range for f32", k, *d);
      break;
    }
    case GgufType::BOOL:
      CBX_CHECK(std::holds_alternative<bool>(v.v), "gguf writer: key '%s': bool value must hold bool", k);
      break;
    case GgufType::STRING:
      CBX_CHECK(std::holds_alternative<std::string>(v.v), "gguf writer: key '%s': string value must hold std::string",
                k);
      break;
    case GgufType::ARRAY: {
      CBX_CHECK(depth < kGgufMaxArrayDepth, "gguf writer: key '%s': arrays nested deeper than %d", k,
                kGgufMaxArrayDepth);
      const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
      CBX_CHECK(a && *a, "gguf writer: key '%s': array value must hold a GgufArray", k);
      CBX_CHECK(uint32_t((*a)->type) <= uint32_t(GgufType::F64), "gguf writer: key '%s': unknown array element type %u",
                k, unsigned((*a)->type));
      for (const GgufValue& x : (*a)->items) {
        CBX_CHECK(x.type == (*a)->type, "gguf writer: key '%s': %s item in an array of %s", k, gguf_type_name(x.type),
                  gguf_type_name((*a)->type));
        check_value(key, x, depth + 1);
      }
      break;
    }
    default:
      fail("gguf writer: key '%s': unknown value type %u", k, unsigned(v.type));
  }
}

void emit_value(GgufWriter::Sink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8:
      out.val<uint8_t>(uint8_t(std::get<uint64_t>(v.v)));
      break;
    case GgufType::U16:
      out.val<uint16_t>(uint16_t(std::get<uint64_t>(v.v)));
      break;
    case GgufType::U32:
      out.val<uint32_t>(uint32_t(std::get<uint64_t>(v.v)));
      break;
    case GgufType::U64:
      out.val<uint64_t>(std::get<uint64_t>(v.v));
      break;
    case GgufType::I8:
      out.val<int8_t>(int8_t(std::get<int64_t>(v.v)));
      break;
    case GgufType::I16:
      out.val<int16_t>(int16_t(std::get<int64_t>(v.v)));
      break;
    case GgufType::I32:
      out.val<int32_t>(int32_t(std::get<int64_t>(v.v)));
      break;
    case GgufType::I64:
      out.val<int64_t>(std::get<int64_t>(v.v));
      break;
    case GgufType::F32:
      out.val<float>(float(std::get<double>(v.v)));
      break;
    case GgufType::F64:
      out.val<double>(std::get<double>(v.v));
      break;
    case GgufType::BOOL:
      out.val<uint8_t>(std::get<bool>(v.v) ? 1 : 0);
      break;
    case GgufType::STRING:
      out.str(std::get<std::string>(v.v));
      break;
    case GgufType::ARRAY: {
      const GgufArray& a = *std::get<std::shared_ptr<GgufArray>>(v.v);
      out.val<uint32_t>(uint32_t(a.type));
      out.val<uint64_t>(a.items.size());
      for (const GgufValue& x : a.items) emit_value(out, x);
      break;
    }
  }
}

GgufValue scalar_u(GgufType t, uint64_t x) { return GgufValue{t, x}; }
GgufValue scalar_i(GgufType t, int64_t x) { return GgufValue{t, x}; }

template <typename T, typename F>
GgufValue array_of(GgufType t, const std::vector<T>& xs, F make) {
  auto a = std::make_shared<GgufArray>();
  a->type = t;
  a->items.reserve(xs.size());
  for (const T& x : xs) a->items.push_back(make(x));
  return GgufValue{GgufType::ARRAY, std::move(a)};
}

}  // namespace

void GgufWriter::add_kv(const std::string& key, GgufValue v) {
  CBX_CHECK(!key.empty() && key.size() <= kGgufMaxKeyBytes, "gguf writer: metadata key length %zu (must be 1..%zu)",
            key.size(), kGgufMaxKeyBytes);
  check_value(key, v, 0);
  if (key == "general.alignment") {
    CBX_CHECK(v.type == GgufType::U32, "gguf writer: general.alignment must be a u32, got %s", gguf_type_name(v.type));
    check_alignment(std::get<uint64_t>(v.v));
    alignment_ = size_t(std::get<uint64_t>(v.v));
    for (auto& kv : kv_)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
  } else {
    for (const auto& kv : kv_) CBX_CHECK(kv.first != key, "gguf writer: duplicate metadata key '%s'", key.c_str());
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { add_kv(key, scalar_u(GgufType::U32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { add_kv(key, scalar_i(GgufType::I32, v)); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) { add_kv(key, scalar_u(GgufType::U64, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { add_kv(key, GgufValue{GgufType::F32, double(v)}); }
void GgufWriter::set_bool(const std::string& key, bool v) { add_kv(key, GgufValue{GgufType::BOOL, v}); }
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  add_kv(key, GgufValue{GgufType::STRING, v});
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  add_kv(key, array_of(GgufType::I32, v, [](int32_t x) { return scalar_i(GgufType::I32, x); }));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  add_kv(key, array_of(GgufType::F32, v, [](float x) { return GgufValue{GgufType::F32, double(x)}; }));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  add_kv(key, array_of(GgufType::STRING, v, [](const std::string& x) { return GgufValue{GgufType::STRING, x}; }));
}
void GgufWriter::set_value(const std::string& key, const GgufValue& v) { add_kv(key, v); }

void GgufWriter::set_alignment(size_t a) {
  check_alignment(a);
  alignment_ = a;
  for (auto& kv : kv_)
    if (kv.first == "general.alignment") kv.second = scalar_u(GgufType::U32, a);
}

GgufWriter::Pending& GgufWriter::new_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  const char* nm = name.c_str();
  CBX_CHECK(!name.empty() && name.size() <= kGgufMaxNameBytes, "gguf writer: tensor name length %zu (must be 1..%zu)",
            name.size(), kGgufMaxNameBytes);
  for (const Pending& p : tensors_) CBX_CHECK(p.name != name, "gguf writer: duplicate tensor name '%s'", nm);
  CBX_CHECK(dtype_known(uint32_t(dtype)), "gguf writer: tensor '%s': unknown dtype id %u", nm, unsigned(dtype));
  CBX_CHECK(!shape.empty() && shape.size() <= size_t(kMaxDims),
            "gguf writer: tensor '%s' has %zu dimensions (must be 1..%d)", nm, shape.size(), kMaxDims);
  const TypeTraits& tr = type_traits(dtype);
  uint64_t rows = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    CBX_CHECK(shape[i] > 0, "gguf writer: tensor '%s' dimension %zu is %lld (must be > 0)", nm, i, (long long)shape[i]);
    if (i + 1 < shape.size())
      CBX_CHECK(!__builtin_mul_overflow(rows, uint64_t(shape[i]), &rows) && rows <= uint64_t(INT64_MAX),
                "gguf writer: tensor '%s' shape overflows", nm);
  }
  int64_t inner = shape.back();
  CBX_CHECK(inner % tr.block_size == 0,
            "gguf writer: tensor '%s' innermost dimension %lld is not a multiple of the %s block size %lld", nm,
            (long long)inner, tr.name, (long long)tr.block_size);
  uint64_t nbytes, numel;
  CBX_CHECK(!__builtin_mul_overflow(rows, uint64_t(inner), &numel) && numel <= uint64_t(INT64_MAX) &&
                !__builtin_mul_overflow(rows, uint64_t(dtype_row_bytes(dtype, inner)), &nbytes) &&
                nbytes <= uint64_t(SIZE_MAX / 2),
            "gguf writer: tensor '%s' shape overflows", nm);
  Pending p;
  p.name = name;
  p.dtype = dtype;
  p.shape = std::move(shape);
  p.bytes = size_t(nbytes);
  tensors_.push_back(std::move(p));
  return tensors_.back();
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
                            size_t bytes) {
  Pending& p = new_tensor(name, dtype, std::move(shape));
  if (bytes != p.bytes || data == nullptr) {
    size_t need = p.bytes;
    tensors_.pop_back();  // a failed add leaves the writer unchanged
    CBX_CHECK(data != nullptr, "gguf writer: tensor '%s': null data", name.c_str());
    fail("gguf writer: tensor '%s' needs %zu bytes, got %zu", name.c_str(), need, bytes);
  }
  auto* b = static_cast<const uint8_t*>(data);
  p.owned.assign(b, b + bytes);
}

void GgufWriter::add_tensor_lazy(const std::string& name, DType dtype, std::vector<int64_t> shape, Producer produce,
                                 void* ctx) {
  CBX_CHECK(produce != nullptr, "gguf writer: tensor '%s': null producer", name.c_str());
  add_tensor_lazy(name, dtype, std::move(shape),
                  ProducerFn([produce, ctx](void* dst, size_t bytes) { produce(ctx, dst, bytes); }));
}

void GgufWriter::add_tensor_lazy(const std::string& name, DType dtype, std::vector<int64_t> shape, ProducerFn produce) {
  CBX_CHECK(bool(produce), "gguf writer: tensor '%s': null producer", name.c_str());
  new_tensor(name, dtype, std::move(shape)).produce = std::move(produce);
}

void GgufWriter::emit(Sink& out) const {
  bool implicit_alignment = alignment_ != 32;
  for (const auto& kv : kv_)
    if (kv.first == "general.alignment") implicit_alignment = false;

  out.put("GGUF", 4);
  out.val<uint32_t>(3);
  out.val<uint64_t>(tensors_.size());
  out.val<uint64_t>(kv_.size() + (implicit_alignment ? 1 : 0));
  if (implicit_alignment) {
    out.str("general.alignment");
    out.val<uint32_t>(uint32_t(GgufType::U32));
    out.val<uint32_t>(uint32_t(alignment_));
  }
  for (const auto& kv : kv_) {
    out.str(kv.first);
    out.val<uint32_t>(uint32_t(kv.second.type));
    emit_value(out, kv.second);
  }

  uint64_t offset = 0;
  for (const Pending& p : tensors_) {
    out.str(p.name);
    out.val<uint32_t>(uint32_t(p.shape.size()));
    for (size_t i = p.shape.size(); i-- > 0;) out.val<uint64_t>(uint64_t(p.shape[i]));
    out.val<uint32_t>(uint32_t(p.dtype));
    out.val<uint64_t>(offset);
    uint64_t padded = (uint64_t(p.bytes) + alignment_ - 1) / alignment_ * alignment_;
    CBX_CHECK(!__builtin_add_overflow(offset, padded, &offset),
              "gguf writer: tensor data exceeds 2^64 bytes at tensor '%s'", p.name.c_str());
  }
  out.pad_to(alignment_);

  std::vector<uint8_t> scratch;
  for (const Pending& p : tensors_) {
    if (p.produce) {
      scratch.resize(p.bytes);
      p.produce(scratch.data(), p.bytes);
      out.put(scratch.data(), p.bytes);
    } else {
      out.put(p.owned.data(), p.bytes);
    }
    out.pad_to(alignment_);
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  VecSink s;
  emit(s);
  return std::move(s.bytes);
}

void GgufWriter::write(const std::string& path) const {
  OutputFile out(path);
  write(out);
}

void GgufWriter::write(OutputFile& out) const {
  FileSink s(out.stream(), out.path());
  emit(s);
  out.commit();
}

}  // namespace cbx
