#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/output_file.h"

namespace cbx {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    default:
      fail("npy: unsupported dtype %s", dtype_name(t));
  }
}

const char* dtype_descr(DType t) {
  switch (t) {
    case DType::F32:
      return "<f4";
    case DType::I32:
      return "<i4";
    case DType::I64:
      return "<i8";
    default:
      fail("npy: unsupported dtype %s", dtype_name(t));
  }
}

// Returns the value text following 'key': in a Python dict literal (no nesting except the
// shape tuple), or throws.
std::string dict_value(const std::string& h, const char* key, const std::string& name) {
  std::string k1 = std::string("'") + key + "'";
  size_t p = h.find(k1);
  if (p == std::string::npos) p = h.find(std::string("\"") + key + "\"");
  CBX_CHECK(p != std::string::npos, "npy '%s': header lacks key %s: %s", name.c_str(), key, h.c_str());
  p = h.find(':', p + k1.size());
  CBX_CHECK(p != std::string::npos, "npy '%s': malformed header: %s", name.c_str(), h.c_str());
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  size_t e = p;
  if (p < h.size() && h[p] == '(') {
    e = h.find(')', p);
    CBX_CHECK(e != std::string::npos, "npy '%s': unterminated shape: %s", name.c_str(), h.c_str());
    return h.substr(p, e - p + 1);
  }
  while (e < h.size() && h[e] != ',' && h[e] != '}') ++e;
  std::string v = h.substr(p, e - p);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t NpyArray::element_size() const { return dtype_size(dtype); }

std::vector<float> NpyArray::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case DType::F32:
        out[i] = as<float>()[i];
        break;
      case DType::I32:
        out[i] = float(as<int32_t>()[i]);
        break;
      case DType::I64:
        out[i] = float(as<int64_t>()[i]);
        break;
      default:
        fail("npy: unsupported dtype");
    }
  }
  return out;
}

std::string NpyArray::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) s += ",";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

NpyArray npy_parse(const void* bytes, size_t size, const std::string& name) {
  const auto* b = static_cast<const uint8_t*>(bytes);
  CBX_CHECK(size >= 10 && std::memcmp(b, kMagic, kMagicLen) == 0, "npy '%s': not a .npy file (bad magic)",
            name.c_str());
  int major = b[6];
  size_t hlen = 0, hoff = 0;
  if (major == 1) {
    hlen = size_t(b[8]) | size_t(b[9]) << 8;
    hoff = 10;
  } else if (major == 2 || major == 3) {
    CBX_CHECK(size >= 12, "npy '%s': truncated header", name.c_str());
    hlen = size_t(b[8]) | size_t(b[9]) << 8 | size_t(b[10]) << 16 | size_t(b[11]) << 24;
    hoff = 12;
  } else {
    fail("npy '%s': unsupported format version %d", name.c_str(), major);
  }
  CBX_CHECK(hlen <= size - hoff, "npy '%s': header length %zu past end of file (%zu bytes)", name.c_str(), hlen, size);
  std::string h(reinterpret_cast<const char*>(b + hoff), hlen);

  NpyArray a;
  std::string descr = dict_value(h, "descr", name);
  if (descr == "'<f4'" || descr == "'float32'")
    a.dtype = DType::F32;
  else if (descr == "'<i4'")
    a.dtype = DType::I32;
  else if (descr == "'<i8'")
    a.dtype = DType::I64;
  else
    fail("npy '%s': unsupported dtype %s (want <f4, <i4 or <i8)", name.c_str(), descr.c_str());

  std::string fo = dict_value(h, "fortran_order", name);
  CBX_CHECK(fo == "False", "npy '%s': fortran_order=%s is not supported (C order only)", name.c_str(), fo.c_str());

  std::string sh = dict_value(h, "shape", name);
  CBX_CHECK(sh.size() >= 2 && sh.front() == '(' && sh.back() == ')', "npy '%s': bad shape %s", name.c_str(),
            sh.c_str());
  const char* p = sh.c_str() + 1;
  uint64_t total = 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    CBX_CHECK(*p >= '0' && *p <= '9', "npy '%s': bad shape %s", name.c_str(), sh.c_str());
    char* end = nullptr;
    unsigned long long d = std::strtoull(p, &end, 10);
    CBX_CHECK(end != p && d < (1ull << 40), "npy '%s': bad dimension in shape %s", name.c_str(), sh.c_str());
    CBX_CHECK(d == 0 || total <= (std::numeric_limits<uint64_t>::max() >> 8) / d, "npy '%s': shape %s overflows",
              name.c_str(), sh.c_str());
    total *= d;
    a.shape.push_back(int64_t(d));
    p = end;
    CBX_CHECK(a.shape.size() <= 32, "npy '%s': too many dimensions", name.c_str());
  }
  size_t need = size_t(total) * dtype_size(a.dtype);
  size_t have = size - hoff - hlen;
  CBX_CHECK(have == need, "npy '%s': payload is %zu bytes, shape %s of %s needs %zu", name.c_str(), have, sh.c_str(),
            dtype_name(a.dtype), need);
  a.data.assign(b + hoff + hlen, b + size);
  return a;
}

NpyArray npy_load(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  CBX_CHECK(f, "npy: cannot open '%s'", path.c_str());
  std::vector<uint8_t> buf;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f.get())) > 0) buf.insert(buf.end(), chunk, chunk + n);
  CBX_CHECK(!std::ferror(f.get()), "npy: read error on '%s'", path.c_str());
  return npy_parse(buf.data(), buf.size(), path);
}

std::vector<uint8_t> npy_serialize(DType dtype, const std::vector<int64_t>& shape, const void* data) {
  size_t esz = dtype_size(dtype);
  std::string sh = "(";
  size_t total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    CBX_CHECK(shape[i] >= 0, "npy: negative dimension %lld", (long long)shape[i]);
    total *= size_t(shape[i]);
    sh += std::to_string(shape[i]);
    sh += (shape.size() == 1) ? "," : (i + 1 < shape.size() ? ", " : "");
  }
  sh += ")";
  std::string h = std::string("{'descr': '") + dtype_descr(dtype) + "', 'fortran_order': False, 'shape': " + sh + ", }";
  // Pad with spaces so that magic + length field + header + '\n' is a multiple of 64.
  bool v2 = h.size() + 1 + 10 > 65535;
  size_t pre = v2 ? 12 : 10;
  size_t padded = (pre + h.size() + 1 + 63) / 64 * 64;
  h.append(padded - pre - h.size() - 1, ' ');
  h += '\n';
  // Assembled with memcpy into a pre-sized buffer (GCC 12 warns spuriously on
  // vector::insert chains here).
  const size_t hl = h.size();
  std::vector<uint8_t> out(pre + hl + total * esz);
  uint8_t* o = out.data();
  std::memcpy(o, kMagic, kMagicLen);
  o[6] = v2 ? 2 : 1;
  o[7] = 0;
  o[8] = uint8_t(hl);
  o[9] = uint8_t(hl >> 8);
  if (v2) {
    o[10] = uint8_t(hl >> 16);
    o[11] = uint8_t(hl >> 24);
  }
  std::memcpy(o + pre, h.data(), hl);
  if (total) std::memcpy(o + pre + hl, data, total * esz);
  return out;
}

void npy_save(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data) {
  std::vector<uint8_t> bytes = npy_serialize(dtype, shape, data);
  OutputFile out(path, {}, "npy");
  out.write(bytes);
  out.commit();
}

}  // namespace cbx
