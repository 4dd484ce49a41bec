#include "pipeline/prefix_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/cpu.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/output_file.h"
#include "ops/matmul.h"

namespace cbx {
namespace {

constexpr char kMagic[8] = {'C', 'B', 'X', 'P', 'R', 'E', 'F', 'X'};
constexpr uint32_t kVersion = 1;
constexpr size_t kComputeBytes = 64;
constexpr size_t kHeaderBytes = 112;
// Far above any real prefix (a 375-token voice on GPT-2 medium: 37 MB of F16 K/V), so the
// size arithmetic below cannot overflow.
constexpr int64_t kMaxCount = int64_t(1) << 24;
constexpr uint64_t kMaxKvBytes = uint64_t(1) << 40;

// FNV-1a 64 for the model fingerprint (small inputs).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <class T>
  void add_value(const T& v) {
    add(&v, sizeof v);
  }
};

// The file checksum: FNV-1a's step over 64-bit little-endian words (the last one zero
// padded), ~8x faster than bytewise over tens of MB; fed in pieces of any length.
struct WordSum {
  uint64_t h = 1469598103934665603ull;
  uint64_t part = 0;
  int have = 0;  // bytes in part
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    size_t i = 0;
    for (; i < n && have > 0; ++i) push_byte(b[i]);
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; ++i) push_byte(b[i]);
  }
  void push_byte(uint8_t v) {
    part |= uint64_t(v) << (8 * have);
    if (++have == 8) {
      h = (h ^ part) * 1099511628211ull;
      part = 0;
      have = 0;
    }
  }
  uint64_t value() const { return have ? (h ^ part) * 1099511628211ull : h; }
};

template <class T>
T read_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

PrefixCacheStatus parse_prefix_cache(const uint8_t* data, size_t n, const PrefixCacheKey& want, const uint8_t** kv,
                                     std::string* why) {
  why->clear();
  *kv = nullptr;
  if (n < sizeof kMagic || std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    *why = "not a chatterbox prompt cache (no CBXPREFX magic)";
    return PrefixCacheStatus::NotOurs;
  }
  if (n < kHeaderBytes + 8) {
    *why = "truncated (" + std::to_string(n) + " bytes, the header alone is " + std::to_string(kHeaderBytes + 8) + ")";
    return PrefixCacheStatus::Damaged;
  }
  const uint32_t version = read_at<uint32_t>(data + 8);
  const int64_t n_speaker = read_at<int64_t>(data + 88), n_prompt = read_at<int64_t>(data + 96);
  const uint64_t kv_bytes = read_at<uint64_t>(data + 104);
  if (version != kVersion) {
    *why = "format version " + std::to_string(version) + " (this build reads " + std::to_string(kVersion) + ")";
    return PrefixCacheStatus::Mismatch;
  }
  if (n_speaker < 0 || n_speaker > kMaxCount || n_prompt < 0 || n_prompt > kMaxCount || kv_bytes > kMaxKvBytes) {
    *why = "header sizes out of range (speaker " + std::to_string(n_speaker) + ", prompt " + std::to_string(n_prompt) +
           ", kv " + std::to_string(kv_bytes) + " bytes)";
    return PrefixCacheStatus::Damaged;
  }
  const uint64_t total = kHeaderBytes + 4 * uint64_t(n_speaker) + 4 * uint64_t(n_prompt) + kv_bytes + 8;
  if (total != n) {
    *why = std::to_string(n) + " bytes where its header says " + std::to_string(total);
    return PrefixCacheStatus::Damaged;
  }
  WordSum sum;
  sum.add(data, n - 8);
  if (sum.value() != read_at<uint64_t>(data + n - 8)) {
    *why = "checksum mismatch";
    return PrefixCacheStatus::Damaged;
  }
  char compute[kComputeBytes + 1] = {};
  std::memcpy(compute, data + 24, kComputeBytes);
  if (read_at<uint64_t>(data + 16) != want.model) {
    *why = "made with other T3 weights";
    return PrefixCacheStatus::Mismatch;
  }
  if (want.compute != compute) {
    *why = std::string("made on another kernel path (") + compute + "; here " + want.compute + ")";
    return PrefixCacheStatus::Mismatch;
  }
  const uint8_t* spk = data + kHeaderBytes;
  const uint8_t* ids = spk + 4 * n_speaker;
  // (memcmp only on non-empty ranges: an empty voice part may come as a null pointer)
  if (n_speaker != want.n_speaker || n_prompt != want.n_prompt ||
      (n_speaker > 0 && std::memcmp(spk, want.speaker, size_t(4 * n_speaker)) != 0) ||
      (n_prompt > 0 && std::memcmp(ids, want.tokens, size_t(4 * n_prompt)) != 0)) {
    *why = "holds another voice";
    return PrefixCacheStatus::Mismatch;
  }
  if (kv_bytes != want.kv_bytes) {  // same weights and voice: only a changed KV layout
    *why = "K/V of " + std::to_string(kv_bytes) + " bytes where this model needs " + std::to_string(want.kv_bytes);
    return PrefixCacheStatus::Mismatch;
  }
  *kv = ids + 4 * n_prompt;
  return PrefixCacheStatus::Match;
}

void write_prefix_cache(const std::string& path, const PrefixCacheKey& key, const uint8_t* kv,
                        const std::vector<OutputInput>& inputs) {
  CBX_CHECK(key.compute.size() < kComputeBytes, "prompt cache: compute key '%s' too long", key.compute.c_str());
  check_prefix_cache_path(path);
  OutputFile out(path, inputs, "prompt cache");
  uint8_t head[kHeaderBytes] = {};
  std::memcpy(head, kMagic, sizeof kMagic);
  std::memcpy(head + 8, &kVersion, 4);
  std::memcpy(head + 16, &key.model, 8);
  std::memcpy(head + 24, key.compute.data(), key.compute.size());
  std::memcpy(head + 88, &key.n_speaker, 8);
  std::memcpy(head + 96, &key.n_prompt, 8);
  const uint64_t kvb = key.kv_bytes;
  std::memcpy(head + 104, &kvb, 8);
  WordSum sum;
  auto put = [&](const void* p, size_t n) {
    if (n == 0) return;
    sum.add(p, n);
    out.write(p, n);
  };
  put(head, sizeof head);
  put(key.speaker, size_t(4 * key.n_speaker));
  put(key.tokens, size_t(4 * key.n_prompt));
  put(kv, key.kv_bytes);
  const uint64_t h = sum.value();
  out.write(&h, 8);
  out.commit();
}

void check_prefix_cache_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail("prompt cache '%s' is not a regular file (a device, FIFO or directory): not using it", path.c_str());
}

uint64_t prefix_cache_model_key(const GgufFile& f) {
  Fnv h;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.compare(0, 3, "t3.") != 0) continue;
    h.add(t.name.data(), t.name.size());
    h.add_value(int32_t(t.dtype));
    h.add_value(int32_t(t.ndim));
    for (int d = 0; d < t.ndim; ++d) h.add_value(t.shape[d]);
    h.add_value(uint64_t(t.nbytes));
    const auto* p = static_cast<const uint8_t*>(f.tensor(t).data);
    for (size_t o = 0; o < t.nbytes; o += 65536) h.add(p + o, std::min<size_t>(64, t.nbytes - o));
    if (t.nbytes >= 64) h.add(p + t.nbytes - 64, 64);
  }
  return h.h;
}

std::string prefix_cache_compute_key(const char* kv_type_name, GemmPrecision gemm) {
  char s[kComputeBytes];
  std::snprintf(s, sizeof s, "isa=%s vnni=%d bf16=%s gemm=%s kv=%s", isa_name(active_isa()), int(cpu_has_avx512_vnni()),
                gemm_bf16_kind(), gemm_precision_name(gemm), kv_type_name);
  return s;
}

}  // namespace cbx
