// GGUF reader: mmap the file, validate every count, length and offset against the file
// size before it is used, and hand out zero-copy tensors over the mapped bytes.
// Format (published GGUF spec, v2/v3, little-endian): "GGUF", u32 version, u64 tensor
// count, u64 kv count, kvs (string key, u32 type, value), tensor infos (string name,
// u32 n_dims, u64 dims[n_dims] innermost first, u32 ggml type, u64 offset), zero padding
// to the alignment, tensor data (offsets relative to the padded data start).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"

namespace cbx {

namespace {

// Smallest encodings, used to cap counts by the bytes left so a forged count cannot make
// us allocate more than the file could describe.
constexpr size_t kMinKvBytes = 8 + 1 + 4 + 1;                  // key len + 1 char, type, u8 value
constexpr size_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset

size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::STRING:
      return 8;  // length
    case GgufType::ARRAY:
      return 4 + 8;  // element type + length
  }
  return 0;
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

// Bounds-checked little-endian cursor over the image. Every read names what it reads,
// so a truncation reports where it happened.
struct Cursor {
  const uint8_t* p;
  size_t size;
  size_t pos;
  const std::string& file;

  size_t left() const { return size - pos; }
  void need(size_t n, const char* what) const {
    if (n > left())
      fail("%s: truncated file: %s needs %zu bytes at offset %zu, only %zu left (file is %zu bytes)", file.c_str(),
           what, n, pos, left(), size);
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));  // host is little-endian (x86-64 / arm64)
    pos += sizeof(T);
    return v;
  }
  std::string string(const char* what, size_t max_len) {
    uint64_t n = read<uint64_t>(what);
    if (n > left())
      fail("%s: %s length %llu at offset %zu runs past end of file (%zu bytes left)", file.c_str(), what,
           (unsigned long long)n, pos - 8, left());
    if (n > max_len)
      fail("%s: %s length %llu exceeds the limit of %zu bytes", file.c_str(), what, (unsigned long long)n, max_len);
    std::string s(reinterpret_cast<const char*>(p + pos), size_t(n));
    pos += size_t(n);
    return s;
  }
};

GgufValue read_value(Cursor& c, GgufType type, const std::string& key, int depth) {
  GgufValue out;
  out.type = type;
  switch (type) {
    case GgufType::U8:
      out.v = uint64_t(c.read<uint8_t>("u8 value"));
      break;
    case GgufType::U16:
      out.v = uint64_t(c.read<uint16_t>("u16 value"));
      break;
    case GgufType::U32:
      out.v = uint64_t(c.read<uint32_t>("u32 value"));
      break;
    case GgufType::U64:
      out.v = c.read<uint64_t>("u64 value");
      break;
    case GgufType::I8:
      out.v = int64_t(c.read<int8_t>("i8 value"));
      break;
    case GgufType::I16:
      out.v = int64_t(c.read<int16_t>("i16 value"));
      break;
    case GgufType::I32:
      out.v = int64_t(c.read<int32_t>("i32 value"));
      break;
    case GgufType::I64:
      out.v = c.read<int64_t>("i64 value");
      break;
    case GgufType::F32:
      out.v = double(c.read<float>("f32 value"));
      break;
    case GgufType::F64:
      out.v = c.read<double>("f64 value");
      break;
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1)
        fail("%s: metadata key '%s': invalid bool value %u (must be 0 or 1)", c.file.c_str(), key.c_str(), unsigned(b));
      out.v = b == 1;
      break;
    }
    case GgufType::STRING:
      out.v = c.string("string value", SIZE_MAX);
      break;
    case GgufType::ARRAY: {
      if (depth >= kGgufMaxArrayDepth)
        fail("%s: metadata key '%s': arrays nested deeper than %d levels", c.file.c_str(), key.c_str(),
             kGgufMaxArrayDepth);
      uint32_t et = c.read<uint32_t>("array element type");
      if (!valid_value_type(et))
        fail("%s: metadata key '%s': unknown array element type %u", c.file.c_str(), key.c_str(), unsigned(et));
      uint64_t n = c.read<uint64_t>("array length");
      size_t min_bytes = min_value_bytes(GgufType(et));
      if (n > c.left() / min_bytes)
        fail(
            "%s: metadata key '%s': array length %llu of %s runs past end of file "
            "(%zu bytes left)",
            c.file.c_str(), key.c_str(), (unsigned long long)n, gguf_type_name(GgufType(et)), c.left());
      auto arr = std::make_shared<GgufArray>();
      arr->type = GgufType(et);
      arr->items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) arr->items.push_back(read_value(c, arr->type, key, depth + 1));
      out.v = std::move(arr);
      break;
    }
  }
  return out;
}

bool is_pow2(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

}  // namespace

void GgufFile::parse(const uint8_t* data, size_t size) {
  data_ = data;
  size_ = size;
  const std::string& f = path_;
  Cursor c{data, size, 0, path_};

  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    if (size < 4) fail("%s: truncated file: %zu bytes is too short for the GGUF magic", f.c_str(), size);
    fail("%s: bad magic %02x %02x %02x %02x (not a GGUF file)", f.c_str(), data[0], data[1], data[2], data[3]);
  }
  c.pos = 4;
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) fail("%s: GGUF version 1 is not supported (32-bit counts; reconvert to version 3)", f.c_str());
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0 && version_ != 0)
      fail("%s: unsupported GGUF version 0x%08x (big-endian files are not supported)", f.c_str(), unsigned(version_));
    fail("%s: unsupported GGUF version %u (expected 2 or 3)", f.c_str(), unsigned(version_));
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata kv count");
  if (n_kv > c.left() / kMinKvBytes)
    fail("%s: metadata kv count %llu too large for a file of %zu bytes", f.c_str(), (unsigned long long)n_kv, size);
  if (n_tensors > c.left() / kMinTensorInfoBytes || n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > c.left())
    fail("%s: tensor count %llu too large for a file of %zu bytes", f.c_str(), (unsigned long long)n_tensors, size);

  // ---- metadata ----
  key_order_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key", kGgufMaxKeyBytes);
    if (key.empty()) fail("%s: metadata key %llu is empty", f.c_str(), (unsigned long long)i);
    uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t)) fail("%s: metadata key '%s': unknown value type %u", f.c_str(), key.c_str(), unsigned(t));
    GgufValue v = read_value(c, GgufType(t), key, 0);
    if (kv_.count(key)) fail("%s: duplicate metadata key '%s'", f.c_str(), key.c_str());
    kv_.emplace(key, std::move(v));
    key_order_.push_back(std::move(key));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32)
      fail("%s: general.alignment must be a u32, got %s", f.c_str(), gguf_type_name(a->type));
    uint64_t al = std::get<uint64_t>(a->v);
    if (!is_pow2(al) || al > kGgufMaxAlignment)
      fail("%s: general.alignment %llu is not a power of two in [1, 2^30]", f.c_str(), (unsigned long long)al);
    alignment_ = size_t(al);
  }

  // ---- tensor infos ----
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo ti;
    ti.name = c.string("tensor name", kGgufMaxNameBytes);
    const char* nm = ti.name.c_str();
    if (ti.name.empty()) fail("%s: tensor %llu has an empty name", f.c_str(), (unsigned long long)i);
    if (tensor_index_.count(ti.name)) fail("%s: duplicate tensor name '%s'", f.c_str(), nm);
    uint32_t nd = c.read<uint32_t>("tensor n_dims");
    if (nd < 1 || nd > uint32_t(kMaxDims))
      fail("%s: tensor '%s' has %u dimensions (must be 1..%d)", f.c_str(), nm, unsigned(nd), kMaxDims);
    ti.ndim = int(nd);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = c.read<uint64_t>("tensor dimension");
      if (ne == 0 || ne > uint64_t(INT64_MAX))
        fail("%s: tensor '%s' dimension %u is %llu (must be in 1..2^63-1)", f.c_str(), nm, unsigned(d),
             (unsigned long long)ne);
      if (numel > uint64_t(INT64_MAX) / ne)
        fail("%s: tensor '%s' element count overflows (dimension %u is %llu)", f.c_str(), nm, unsigned(d),
             (unsigned long long)ne);
      numel *= ne;
      ti.shape[nd - 1 - d] = int64_t(ne);  // GGUF is innermost-first; ours is row-major
    }
    uint32_t type = c.read<uint32_t>("tensor type");
    if (!dtype_known(type))
      fail("%s: tensor '%s' has unknown or unsupported ggml type id %u", f.c_str(), nm, unsigned(type));
    ti.dtype = DType(type);
    const TypeTraits& tr = type_traits(ti.dtype);
    int64_t inner = ti.shape[nd - 1];
    if (inner % tr.block_size != 0)
      fail("%s: tensor '%s' innermost dimension %lld is not a multiple of the %s block size %lld", f.c_str(), nm,
           (long long)inner, tr.name, (long long)tr.block_size);
    // nbytes = numel / block_size * block_bytes, checked for overflow.
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel / uint64_t(tr.block_size), uint64_t(tr.block_bytes), &nbytes) ||
        nbytes > uint64_t(SIZE_MAX))
      fail("%s: tensor '%s' byte size overflows", f.c_str(), nm);
    ti.nbytes = size_t(nbytes);
    ti.offset = c.read<uint64_t>("tensor data offset");
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  // ---- data section: starts at the next multiple of the alignment ----
  data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;  // c.pos <= size, no overflow
  for (const GgufTensorInfo& ti : tensors_) {
    const char* nm = ti.name.c_str();
    if (ti.offset % alignment_ != 0)
      fail("%s: tensor '%s' offset %llu is not aligned to %zu bytes", f.c_str(), nm, (unsigned long long)ti.offset,
           alignment_);
    uint64_t begin, end;
    if (__builtin_add_overflow(uint64_t(data_offset_), ti.offset, &begin) ||
        __builtin_add_overflow(begin, uint64_t(ti.nbytes), &end))
      fail("%s: tensor '%s' offset %llu + %zu bytes overflows", f.c_str(), nm, (unsigned long long)ti.offset,
           ti.nbytes);
    if (end > size)
      fail("%s: tensor '%s' data [%llu, %llu) past end of file (%zu bytes)", f.c_str(), nm, (unsigned long long)begin,
           (unsigned long long)end, size);
  }
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = name;
  CBX_CHECK(data != nullptr || size == 0, "%s: null data", name.c_str());
  g->parse(static_cast<const uint8_t*>(data), size);
  return g;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("%s: cannot stat: %s", path.c_str(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("%s: not a regular file", path.c_str());
  }
  size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail("%s: empty file (not a GGUF file)", path.c_str());
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) fail("%s: mmap of %zu bytes failed: %s", path.c_str(), size, std::strerror(e));
  g->map_ = m;  // owned from here: the destructor unmaps even if parse throws
  g->map_size_ = size;
  g->parse(static_cast<const uint8_t*>(m), size);
  return g;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, map_size_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("%s: missing metadata key '%s'", path_.c_str(), key.c_str());
  return *v;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* ti = find_tensor(name);
  if (!ti) fail("%s: missing tensor '%s'", path_.c_str(), name.c_str());
  return tensor(*ti);
}

Tensor GgufFile::tensor(const GgufTensorInfo& info) const {
  // info was validated in parse(); re-check the range in case it was built elsewhere.
  CBX_CHECK(
      data_offset_ <= size_ && info.offset <= size_ - data_offset_ && info.nbytes <= size_ - data_offset_ - info.offset,
      "%s: tensor '%s' data past end of file", path_.c_str(), info.name.c_str());
  auto* p = const_cast<uint8_t*>(data_ + data_offset_ + info.offset);
  return make_tensor(info.dtype, info.ndim, info.shape, p, info.nbytes);
}

}  // namespace cbx
