// Minimal zip archive support for torch.save files (PKWARE APPNOTE): stored entries only,
// ZIP64 records and extra fields for archives or entries past 4 GiB. The reader works on a
// caller-owned buffer (mmap) and validates every offset before it is used.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cbx {

class OutputFile;

// CRC-32 (IEEE 802.3, reflected 0xEDB88320), continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

class ZipReader {
 public:
  struct Entry {
    std::string name;
    uint64_t offset = 0;  // of the entry's bytes in the buffer
    uint64_t size = 0;
    uint32_t crc = 0;
  };
  // `data` must outlive the reader; `name` (the file) is used in every error message.
  ZipReader(const uint8_t* data, size_t size, std::string name);

  const std::vector<Entry>& entries() const { return entries_; }  // central directory order
  const Entry* find(const std::string& entry_name) const;         // nullptr if absent
  // The entry's bytes (in bounds by construction); throws on a CRC mismatch if verify_crc.
  const uint8_t* bytes(const Entry& e, bool verify_crc) const;
  const std::string& name() const { return name_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string name_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
};

// Writes a zip of stored entries whose data start on `align`-byte boundaries (torch.save
// aligns storages to 64 bytes so they can be mapped). ZIP64 records are written where a
// size or offset needs them, or everywhere with force_zip64 (for tests).
class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path, bool force_zip64 = false);
  ~ZipWriter();  // an unfinished archive is removed
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  void add(const std::string& entry_name, const void* data, size_t size, size_t align = 64);
  void finish();  // central directory; throws on any write error

 private:
  struct Central {
    std::string name;
    uint64_t offset, size;
    uint32_t crc;
  };
  void write(const void* p, size_t n);
  std::string path_;
  std::unique_ptr<OutputFile> out_;  // core/output_file.h
  FILE* f_ = nullptr;                // out_'s stream
  bool force_zip64_;
  bool ok_ = true;
  uint64_t pos_ = 0;
  std::vector<Central> central_;
};

}  // namespace cbx
