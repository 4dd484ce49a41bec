#include "convert/zip_archive.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/output_file.h"

namespace cbx {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kPadExtraId = 0x4246;  // private id for alignment padding
constexpr size_t kLocalLen = 30, kCentralLen = 46, kEocdLen = 22;
constexpr size_t kZip64EocdLen = 56, kZip64LocatorLen = 20;
constexpr uint32_t k32 = 0xffffffffu;
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;

struct Crc32Tables {
  uint32_t t[8][256];
  Crc32Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return uint32_t(rd16(p)) | (uint32_t(rd16(p + 2)) << 16); }
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | (uint64_t(rd32(p + 4)) << 32); }

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(uint8_t(v));
  b.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, uint16_t(v));
  put16(b, uint16_t(v >> 16));
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  put32(b, uint32_t(v));
  put32(b, uint32_t(v >> 32));
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const Crc32Tables tab;
  const auto& t = tab.t;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {  // slicing-by-8
    uint32_t lo = c ^ rd32(p), hi = rd32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

// ---------------------------------------------------------------- reader

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string name)
    : data_(data), size_(size), name_(std::move(name)) {
  const char* file = name_.c_str();
  CBX_CHECK(size_ >= kEocdLen, "zip: '%s' is too small to be a zip archive (%zu bytes)", file, size_);
  // End of central directory: the last record whose comment runs exactly to the end.
  size_t eocd = SIZE_MAX;
  const size_t lowest = size_ - kEocdLen > 0xffff ? size_ - kEocdLen - 0xffff : 0;
  for (size_t p = size_ - kEocdLen + 1; p-- > lowest;) {
    if (rd32(data_ + p) == kEocdSig && p + kEocdLen + rd16(data_ + p + 20) == size_) {
      eocd = p;
      break;
    }
  }
  CBX_CHECK(eocd != SIZE_MAX,
            "zip: '%s': no end-of-central-directory record (not a zip, or "
            "truncated)",
            file);
  const uint8_t* e = data_ + eocd;
  uint64_t n_entries = rd16(e + 10), cd_size = rd32(e + 12), cd_offset = rd32(e + 16);
  CBX_CHECK(rd16(e + 4) == rd16(e + 6) && (rd16(e + 4) == 0 || rd16(e + 4) == 0xffff),
            "zip: '%s': multi-disk archives are not supported", file);
  uint64_t cd_limit = eocd;  // the central directory ends before this
  if (eocd >= kZip64LocatorLen && rd32(e - kZip64LocatorLen) == kZip64LocatorSig) {
    const uint8_t* loc = e - kZip64LocatorLen;
    const uint64_t z = rd64(loc + 8);
    CBX_CHECK(z <= eocd - kZip64LocatorLen && eocd - kZip64LocatorLen - z >= kZip64EocdLen,
              "zip: '%s': ZIP64 end record offset %llu out of range", file, (unsigned long long)z);
    const uint8_t* r = data_ + z;
    CBX_CHECK(rd32(r) == kZip64EocdSig, "zip: '%s': bad ZIP64 end record signature", file);
    CBX_CHECK(rd32(r + 16) == 0 && rd32(r + 20) == 0, "zip: '%s': multi-disk archives are not supported", file);
    n_entries = rd64(r + 32);
    cd_size = rd64(r + 40);
    cd_offset = rd64(r + 48);
    cd_limit = z;
  } else {
    CBX_CHECK(n_entries != 0xffff && cd_size != k32 && cd_offset != k32, "zip: '%s': ZIP64 end record missing", file);
  }
  CBX_CHECK(cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset,
            "zip: '%s': central directory [%llu, +%llu) out of range", file, (unsigned long long)cd_offset,
            (unsigned long long)cd_size);
  CBX_CHECK(n_entries <= cd_size / kCentralLen, "zip: '%s': %llu entries cannot fit a %llu-byte central directory",
            file, (unsigned long long)n_entries, (unsigned long long)cd_size);

  const uint8_t* p = data_ + cd_offset;
  const uint8_t* cd_end = p + cd_size;
  entries_.reserve(size_t(n_entries));
  for (uint64_t i = 0; i < n_entries; ++i) {
    CBX_CHECK(size_t(cd_end - p) >= kCentralLen && rd32(p) == kCentralSig,
              "zip: '%s': central directory entry %llu is corrupt", file, (unsigned long long)i);
    const uint16_t flags = rd16(p + 8), method = rd16(p + 10);
    const size_t name_len = rd16(p + 28), extra_len = rd16(p + 30), comment_len = rd16(p + 32);
    CBX_CHECK(size_t(cd_end - p) - kCentralLen >= name_len + extra_len + comment_len,
              "zip: '%s': central directory entry %llu runs past the directory", file, (unsigned long long)i);
    Entry en;
    en.name.assign(reinterpret_cast<const char*>(p + kCentralLen), name_len);
    const char* ename = en.name.c_str();
    en.crc = rd32(p + 16);
    uint64_t csize = rd32(p + 20), usize = rd32(p + 24), loff = rd32(p + 42);
    const uint16_t disk = rd16(p + 34);
    // ZIP64 extra field: 8-byte values for exactly those fields saturated in the header.
    const uint8_t* x = p + kCentralLen + name_len;
    const uint8_t* x_end = x + extra_len;
    while (x_end - x >= 4) {
      const uint16_t id = rd16(x), len = rd16(x + 2);
      CBX_CHECK(size_t(x_end - x - 4) >= len, "zip: '%s': entry '%s' has a corrupt extra field", file, ename);
      if (id == kZip64ExtraId) {
        const uint8_t* v = x + 4;
        size_t left = len;
        for (uint64_t* field : {&usize, &csize, &loff}) {
          if (*field != k32) continue;
          CBX_CHECK(left >= 8, "zip: '%s': entry '%s' has a short ZIP64 extra field", file, ename);
          *field = rd64(v);
          v += 8;
          left -= 8;
        }
      }
      x += 4 + len;
    }
    CBX_CHECK(disk == 0 || disk == 0xffff, "zip: '%s': entry '%s' is on another disk", file, ename);
    CBX_CHECK(!(flags & 1), "zip: '%s': entry '%s' is encrypted", file, ename);
    CBX_CHECK(method == 0,
              "zip: '%s': entry '%s' is compressed (method %u); only stored entries are "
              "supported, as torch.save writes them",
              file, ename, unsigned(method));
    CBX_CHECK(csize == usize, "zip: '%s': stored entry '%s' has compressed size %llu != size %llu", file, ename,
              (unsigned long long)csize, (unsigned long long)usize);
    CBX_CHECK(loff <= cd_offset && cd_offset - loff >= kLocalLen,
              "zip: '%s': entry '%s' local header offset %llu out of range", file, ename, (unsigned long long)loff);
    const uint8_t* l = data_ + loff;
    CBX_CHECK(rd32(l) == kLocalSig, "zip: '%s': entry '%s' has a bad local header signature", file, ename);
    const size_t lname = rd16(l + 26), lextra = rd16(l + 28);
    const uint64_t begin = loff + kLocalLen + lname + lextra;
    CBX_CHECK(begin <= cd_offset && usize <= cd_offset - begin,
              "zip: '%s': entry '%s' data [%llu, +%llu) runs past the central directory", file, ename,
              (unsigned long long)begin, (unsigned long long)usize);
    CBX_CHECK(lname == name_len && std::memcmp(l + kLocalLen, en.name.data(), name_len) == 0,
              "zip: '%s': entry '%s' local and central names differ", file, ename);
    en.offset = begin;
    en.size = usize;
    CBX_CHECK(index_.emplace(en.name, entries_.size()).second, "zip: '%s': duplicate entry '%s'", file, ename);
    entries_.push_back(std::move(en));
    p += kCentralLen + name_len + extra_len + comment_len;
  }
}

const ZipReader::Entry* ZipReader::find(const std::string& entry_name) const {
  auto it = index_.find(entry_name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const uint8_t* ZipReader::bytes(const Entry& e, bool verify_crc) const {
  const uint8_t* p = data_ + e.offset;
  if (verify_crc) {
    const uint32_t c = crc32(p, size_t(e.size));
    CBX_CHECK(c == e.crc, "zip: '%s': entry '%s' CRC-32 %08x != recorded %08x (corrupt file)", name_.c_str(),
              e.name.c_str(), c, e.crc);
  }
  return p;
}

// ---------------------------------------------------------------- writer

ZipWriter::ZipWriter(const std::string& path, bool force_zip64) : path_(path), force_zip64_(force_zip64) {
  out_ = std::make_unique<OutputFile>(path, std::vector<OutputInput>{}, "zip");
  f_ = out_->stream();
}

ZipWriter::~ZipWriter() = default;  // out_ removes an unfinished archive's temporary file

void ZipWriter::write(const void* p, size_t n) {
  if (n && ok_) ok_ = std::fwrite(p, 1, n, f_) == n;
  pos_ += n;
}

void ZipWriter::add(const std::string& entry_name, const void* data, size_t size, size_t align) {
  CBX_CHECK(f_, "zip: '%s' is already finished", path_.c_str());
  CBX_CHECK(!entry_name.empty() && entry_name.size() < 0xffff, "zip: '%s': bad entry name", path_.c_str());
  CBX_CHECK(align >= 1 && align <= 4096, "zip: '%s': bad alignment %zu", path_.c_str(), align);
  const uint64_t off = pos_;
  const bool z64 = force_zip64_ || size >= k32 || off >= k32;
  std::vector<uint8_t> h;
  put32(h, kLocalSig);
  put16(h, z64 ? 45 : 20);  // version needed
  put16(h, 0);              // flags
  put16(h, 0);              // method: stored
  put16(h, 0);              // time
  put16(h, kDosDate1980);   // date
  const uint32_t crc = crc32(data, size);
  put32(h, crc);
  put32(h, z64 ? k32 : uint32_t(size));
  put32(h, z64 ? k32 : uint32_t(size));
  put16(h, uint16_t(entry_name.size()));
  const size_t z64_len = z64 ? 4 + 16 : 0;
  size_t base = kLocalLen + entry_name.size() + z64_len;
  size_t pad = 0;
  if ((off + base) % align) {
    pad = align - (off + base) % align;
    if (pad < 4) pad += align;  // room for the padding field's own header
  }
  put16(h, uint16_t(z64_len + pad));
  h.insert(h.end(), entry_name.begin(), entry_name.end());
  if (z64) {
    put16(h, kZip64ExtraId);
    put16(h, 16);
    put64(h, size);
    put64(h, size);
  }
  if (pad) {
    put16(h, kPadExtraId);
    put16(h, uint16_t(pad - 4));
    h.resize(h.size() + pad - 4, 0);
  }
  write(h.data(), h.size());
  write(data, size);
  central_.push_back({entry_name, off, size, crc});
}

void ZipWriter::finish() {
  CBX_CHECK(f_, "zip: '%s' is already finished", path_.c_str());
  const uint64_t cd_offset = pos_;
  bool any64 = force_zip64_ || central_.size() >= 0xffff;
  for (const Central& c : central_) {
    const bool sz64 = force_zip64_ || c.size >= k32;
    const bool off64 = force_zip64_ || c.offset >= k32;
    std::vector<uint8_t> x;
    if (sz64 || off64) {
      any64 = true;
      put16(x, kZip64ExtraId);
      put16(x, uint16_t((sz64 ? 16 : 0) + (off64 ? 8 : 0)));
      if (sz64) {
        put64(x, c.size);
        put64(x, c.size);
      }
      if (off64) put64(x, c.offset);
    }
    std::vector<uint8_t> h;
    put32(h, kCentralSig);
    put16(h, x.empty() ? 20 : 45);  // version made by (MS-DOS attributes)
    put16(h, x.empty() ? 20 : 45);  // version needed
    put16(h, 0);
    put16(h, 0);
    put16(h, 0);
    put16(h, kDosDate1980);
    put32(h, c.crc);
    put32(h, sz64 ? k32 : uint32_t(c.size));
    put32(h, sz64 ? k32 : uint32_t(c.size));
    put16(h, uint16_t(c.name.size()));
    put16(h, uint16_t(x.size()));
    put16(h, 0);  // comment
    put16(h, 0);  // disk
    put16(h, 0);  // internal attributes
    put32(h, 0);  // external attributes
    put32(h, off64 ? k32 : uint32_t(c.offset));
    h.insert(h.end(), c.name.begin(), c.name.end());
    h.insert(h.end(), x.begin(), x.end());
    write(h.data(), h.size());
  }
  const uint64_t cd_size = pos_ - cd_offset;
  any64 = any64 || cd_offset >= k32 || cd_size >= k32;
  std::vector<uint8_t> t;
  if (any64) {
    const uint64_t z = pos_;
    put32(t, kZip64EocdSig);
    put64(t, kZip64EocdLen - 12);  // size of the rest of the record
    put16(t, 45);
    put16(t, 45);
    put32(t, 0);
    put32(t, 0);
    put64(t, central_.size());
    put64(t, central_.size());
    put64(t, cd_size);
    put64(t, cd_offset);
    put32(t, kZip64LocatorSig);
    put32(t, 0);
    put64(t, z);
    put32(t, 1);
  }
  put32(t, kEocdSig);
  put16(t, 0);
  put16(t, 0);
  const uint16_t n16 = any64 ? 0xffff : uint16_t(central_.size());
  put16(t, n16);
  put16(t, n16);
  put32(t, any64 ? k32 : uint32_t(cd_size));
  put32(t, any64 ? k32 : uint32_t(cd_offset));
  put16(t, 0);
  write(t.data(), t.size());
  f_ = nullptr;
  if (!ok_) {
    const int e = errno;
    out_->discard();
    fail("zip: write to '%s' failed: %s", path_.c_str(), std::strerror(e));
  }
  out_->commit();
}

}  // namespace cbx
