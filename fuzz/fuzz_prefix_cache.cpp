// libFuzzer target for prompt cache files (pipeline/prefix_cache.h, say --prompt-cache).
// Byte 0 picks the image: bit 0 clear, the rest of the input as is; bit 0 set, a valid cache
// (written by write_prefix_cache) patched by the input's (offset u16, value) pairs and cut to
// a length the input gives; bit 1 then re-seals its checksum, so that the header checks behind
// it are reached. Whatever the image: parse_prefix_cache must return without reading outside
// it, a Match must point at K/V bytes inside it, anything else must say why and give no K/V.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pipeline/prefix_cache.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_prefix_cache: %s\n", what);
  std::abort();
}

struct Valid {
  std::vector<float> spk = {0.25f, -2.f, 1.f};
  std::vector<int32_t> ids = {5, 6561, 17, 0};
  std::vector<uint8_t> kv = std::vector<uint8_t>(96, 0x5a);
  cbx::PrefixCacheKey key;
  std::vector<uint8_t> image;
  Valid() {
    key.model = 42;
    key.compute = cbx::prefix_cache_compute_key("f16");
    key.speaker = spk.data();
    key.n_speaker = int64_t(spk.size());
    key.tokens = ids.data();
    key.n_prompt = int64_t(ids.size());
    key.kv_bytes = kv.size();
    const std::string path = "/tmp/fuzz_prefix_cache_seed_" + std::to_string(getpid());
    cbx::write_prefix_cache(path, key, kv.data());
    std::ifstream in(path, std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), {});
    std::remove(path.c_str());
    if (image.size() < 120) finding("could not build the valid image");
  }
};

void seal(std::vector<uint8_t>& img) {
  if (img.size() < 8) return;
  const size_t n = img.size() - 8;  // the layout's checksum (pipeline/prefix_cache.h)
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, img.data() + i, std::min<size_t>(8, n - i));
    h = (h ^ w) * 1099511628211ull;
  }
  std::memcpy(img.data() + n, &h, 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Valid valid;
  if (size == 0) return 0;
  std::vector<uint8_t> img;
  if ((data[0] & 1) == 0) {
    img.assign(data + 1, data + size);
  } else {
    img = valid.image;
    size_t i = 1;
    if (size >= 3) {  // the length: the valid size minus a cut, or plus an extension
      const uint16_t cut = uint16_t(data[1] | (data[2] << 8));
      if (cut & 0x8000)
        img.resize(img.size() + (cut & 0x7f), 0);
      else
        img.resize(img.size() - std::min<size_t>(img.size(), cut & 0x1ff));
      i = 3;
    }
    for (; i + 3 <= size && !img.empty(); i += 3) img[(data[i] | (data[i + 1] << 8)) % img.size()] = data[i + 2];
    if (data[0] & 2) seal(img);
  }
  const uint8_t* kv = reinterpret_cast<const uint8_t*>(&img);  // must be overwritten
  std::string why;
  const cbx::PrefixCacheStatus st = cbx::parse_prefix_cache(img.data(), img.size(), valid.key, &kv, &why);
  if (st == cbx::PrefixCacheStatus::Match) {
    if (kv == nullptr || kv < img.data() || kv + valid.key.kv_bytes > img.data() + img.size())
      finding("a Match whose K/V is not inside the image");
    if (!why.empty()) finding("a Match with a reason");
  } else {
    if (kv != nullptr) finding("K/V given without a Match");
    if (why.empty()) finding("no reason given");
  }
  if (img.size() >= 8 && std::memcmp(img.data(), "CBXPREFX", 8) != 0 && st != cbx::PrefixCacheStatus::NotOurs)
    finding("a file without the magic not reported as NotOurs");
  return 0;
}
