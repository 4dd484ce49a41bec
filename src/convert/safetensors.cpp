// safetensors reader (mmap + full validation of the header before any byte is touched)
// and writer (header padded with spaces to an 8-byte boundary, tensors packed in order).
#include "convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/output_file.h"

namespace cbx {

bool safetensors_name_ok(const std::string& name) { return !name.empty() && name != "__metadata__"; }

namespace {

using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the reference implementation
constexpr int kMaxJsonDepth = 16;

struct DTypeName {
  const char* name;
  DType dtype;
};
// U8 and BOOL have no DType of their own: they are read as I8 (same bytes).
const DTypeName kDTypes[] = {{"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                             {"I64", DType::I64}, {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},
                             {"U8", DType::I8},   {"BOOL", DType::I8}};

const char* safetensors_dtype_name(DType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.name;  // first match: I8 for I8
  fail("safetensors: dtype %s cannot be stored", dtype_name(t));
}

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses a JSON integer >= 0 (nlohmann keeps non-negative integers unsigned).
bool json_u64(const Json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CBX_CHECK(fd >= 0, "safetensors: cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("safetensors: '%s' is not a regular file", path.c_str());
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("safetensors: cannot map '%s': %s", path.c_str(), std::strerror(e));
    }
    f->map_ = m;
    f->map_size_ = f->size_;
    f->data_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  f->parse();
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->size_ = size;
  if (size > 0) {
    // An anonymous mapping owns the copy, so the destructor has one path for both cases.
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CBX_CHECK(m != MAP_FAILED, "safetensors: cannot allocate %zu bytes for '%s'", size, name.c_str());
    std::memcpy(m, data, size);
    f->map_ = m;
    f->map_size_ = size;
    f->data_ = static_cast<const uint8_t*>(m);
  }
  f->parse();
  return f;
}

void SafetensorsFile::parse() {
  const char* file = path_.c_str();
  CBX_CHECK(size_ >= 8, "safetensors: '%s' is truncated (%zu bytes, the header length alone is 8)", file, size_);
  const uint64_t n = le64(data_);
  CBX_CHECK(n <= size_ - 8, "safetensors: '%s' is truncated: header length %llu exceeds the %zu bytes after it", file,
            (unsigned long long)n, size_ - 8);
  CBX_CHECK(n <= kMaxHeaderBytes, "safetensors: '%s': header length %llu exceeds %llu", file, (unsigned long long)n,
            (unsigned long long)kMaxHeaderBytes);
  CBX_CHECK(n >= 2, "safetensors: '%s': header length %llu is too small for a JSON object", file,
            (unsigned long long)n);

  // Duplicate keys would silently shadow a tensor; nesting beyond a few levels is never valid.
  std::vector<std::set<std::string>> keys;
  Json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxJsonDepth) fail("safetensors: '%s': header JSON nested too deeply", file);
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) fail("safetensors: '%s': duplicate key '%s' in header", file, k.c_str());
    }
    return true;
  };
  Json header;
  const char* hb = reinterpret_cast<const char*>(data_ + 8);
  try {
    header = Json::parse(hb, hb + n, cb);
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: '%s': malformed header JSON: %s", file, e.what());
  }
  CBX_CHECK(header.is_object(), "safetensors: '%s': header is not a JSON object", file);

  const size_t base = 8 + size_t(n);
  const size_t data_size = size_ - base;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      CBX_CHECK(v.is_object(), "safetensors: '%s': __metadata__ is not an object", file);
      for (auto m = v.begin(); m != v.end(); ++m) {
        CBX_CHECK(m.value().is_string(), "safetensors: '%s': __metadata__ value '%s' is not a string", file,
                  m.key().c_str());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const char* tn = name.c_str();
    // One rule for names, reader and writer alike (safetensors_name_ok): what is read can be written.
    CBX_CHECK(safetensors_name_ok(name), "safetensors: '%s': a tensor with an empty name", file);
    CBX_CHECK(v.is_object(), "safetensors: '%s': tensor '%s' entry is not an object", file, tn);
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto of = v.find("data_offsets");
    CBX_CHECK(dt != v.end() && dt->is_string(), "safetensors: '%s': tensor '%s' has no string 'dtype'", file, tn);
    CBX_CHECK(sh != v.end() && sh->is_array(), "safetensors: '%s': tensor '%s' has no array 'shape'", file, tn);
    CBX_CHECK(of != v.end() && of->is_array() && of->size() == 2,
              "safetensors: '%s': tensor '%s' needs 'data_offsets' [begin, end]", file, tn);
    Entry e{};
    const std::string& dts = dt->get_ref<const std::string&>();
    const DTypeName* found = nullptr;
    for (const DTypeName& d : kDTypes)
      if (dts == d.name) found = &d;
    CBX_CHECK(found, "safetensors: '%s': tensor '%s' has unsupported dtype '%s'", file, tn, dts.c_str());
    e.dtype = found->dtype;
    for (const Json& d : *sh) {
      uint64_t u;
      CBX_CHECK(json_u64(d, &u) && u <= uint64_t(INT64_MAX),
                "safetensors: '%s': tensor '%s' has a shape entry that is not a non-negative "
                "integer: %s",
                file, tn, d.dump().c_str());
      e.shape.push_back(int64_t(u));
    }
    uint64_t b, en;
    CBX_CHECK(json_u64((*of)[0], &b) && json_u64((*of)[1], &en),
              "safetensors: '%s': tensor '%s' data_offsets are not non-negative integers", file, tn);
    CBX_CHECK(b <= en, "safetensors: '%s': tensor '%s' data_offsets begin %llu > end %llu", file, tn,
              (unsigned long long)b, (unsigned long long)en);
    CBX_CHECK(en <= data_size,
              "safetensors: '%s': tensor '%s' data_offsets end %llu past the %zu-byte data "
              "section (file truncated?)",
              file, tn, (unsigned long long)en, data_size);
    const size_t es = ckpt_elem_size(e.dtype);
    const int64_t numel = ckpt_numel(e.shape, "safetensors: '" + path_ + "': tensor '" + name + "'", es);
    CBX_CHECK(uint64_t(numel) * es == en - b,
              "safetensors: '%s': tensor '%s' has %llu data bytes, shape and dtype %s need %llu", file, tn,
              (unsigned long long)(en - b), dts.c_str(), (unsigned long long)(uint64_t(numel) * es));
    e.begin = base + size_t(b);
    e.end = base + size_t(en);
    order_.push_back(name);
    entries_.emplace(name, std::move(e));
  }

  // Overlapping tensors are never written by a correct writer.
  std::vector<const Entry*> by_offset;
  for (const std::string& nm : order_) by_offset.push_back(&entries_.at(nm));
  std::vector<size_t> idx(order_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return by_offset[a]->begin != by_offset[b]->begin ? by_offset[a]->begin < by_offset[b]->begin
                                                      : by_offset[a]->end < by_offset[b]->end;
  });
  for (size_t i = 1; i < idx.size(); ++i) {
    const Entry* p = by_offset[idx[i - 1]];
    const Entry* c = by_offset[idx[i]];
    CBX_CHECK(p->end <= c->begin, "safetensors: '%s': tensors '%s' and '%s' overlap", file, order_[idx[i - 1]].c_str(),
              order_[idx[i]].c_str());
  }
}

std::vector<std::string> SafetensorsFile::names() const { return order_; }

bool SafetensorsFile::has(const std::string& name) const { return entries_.count(name) != 0; }

const std::vector<int64_t>& SafetensorsFile::shape(const std::string& name) const {
  auto it = entries_.find(name);
  CBX_CHECK(it != entries_.end(), "missing tensor '%s' in %s", name.c_str(), path_.c_str());
  return it->second.shape;
}

DType SafetensorsFile::dtype(const std::string& name) const {
  auto it = entries_.find(name);
  CBX_CHECK(it != entries_.end(), "missing tensor '%s' in %s", name.c_str(), path_.c_str());
  return it->second.dtype;
}

CkptTensor SafetensorsFile::read(const std::string& name) const {
  auto it = entries_.find(name);
  CBX_CHECK(it != entries_.end(), "missing tensor '%s' in %s", name.c_str(), path_.c_str());
  const Entry& e = it->second;
  CkptTensor t;
  t.name = name;
  t.dtype = e.dtype;
  t.shape = e.shape;
  t.data.assign(data_ + e.begin, data_ + e.end);
  return t;
}

void write_safetensors(const std::string& path, const std::vector<const CkptTensor*>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const CkptTensor* t : tensors) {
    CBX_CHECK(t, "safetensors: '%s': null tensor", path.c_str());
    const char* tn = t->name.c_str();
    CBX_CHECK(safetensors_name_ok(t->name), "safetensors: '%s': invalid tensor name '%s'", path.c_str(), tn);
    CBX_CHECK(!header.contains(t->name), "safetensors: '%s': duplicate tensor '%s'", path.c_str(), tn);
    const size_t es = ckpt_elem_size(t->dtype);
    const int64_t numel = ckpt_numel(t->shape, "safetensors: tensor '" + t->name + "'", es);
    CBX_CHECK(t->data.size() == size_t(numel) * es,
              "safetensors: '%s': tensor '%s' has %zu bytes, shape and dtype need %llu", path.c_str(), tn,
              t->data.size(), (unsigned long long)(uint64_t(numel) * es));
    Json e = Json::object();
    e["dtype"] = safetensors_dtype_name(t->dtype);
    e["shape"] = t->shape;
    e["data_offsets"] = {offset, offset + t->data.size()};
    header[t->name] = std::move(e);
    offset += t->data.size();
  }
  std::string hs = header.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));

  OutputFile out(path, {}, "safetensors");
  out.write(len, 8);
  out.write(hs.data(), hs.size());
  for (const CkptTensor* t : tensors) out.write(t->data.data(), t->data.size());
  out.commit();
}

}  // namespace cbx
