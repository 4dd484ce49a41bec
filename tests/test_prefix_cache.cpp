// pipeline/prefix_cache: the prompt cache file (say --prompt-cache) round trip, and every way a
// file can fail to match: another model, kernel path, voice, version (Mismatch), truncation,
// resizing, a flipped byte, absurd header sizes (Damaged), no magic (NotOurs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/prefix_cache.h"

using namespace cbx;

namespace {

struct Fixture {
  std::vector<float> spk = {0.5f, -1.25f, 3.f, 0.f};
  std::vector<int32_t> ids = {7, 4299, 12, 6560, 0};
  std::vector<uint8_t> kv;
  PrefixCacheKey key;
  Fixture() {
    for (int i = 0; i < 1000; ++i) kv.push_back(uint8_t(i * 37 + 11));
    key.model = 0x1234567890abcdefull;
    key.compute = prefix_cache_compute_key("f16");
    key.speaker = spk.data();
    key.n_speaker = int64_t(spk.size());
    key.tokens = ids.data();
    key.n_prompt = int64_t(ids.size());
    key.kv_bytes = kv.size();
  }
};

std::string temp_path(const char* name) {
  return std::string(::testing::TempDir()) + "/cbx_prefix_" + name + "_" + std::to_string(::getpid());
}

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The bytes write_prefix_cache gives for key and kv (through a temporary file).
std::vector<uint8_t> written(const PrefixCacheKey& key, const std::vector<uint8_t>& kv, const char* name) {
  const std::string path = temp_path(name);
  write_prefix_cache(path, key, kv.data());
  std::vector<uint8_t> d = read_file(path);
  std::remove(path.c_str());
  return d;
}

PrefixCacheStatus parse(const std::vector<uint8_t>& d, const PrefixCacheKey& k, std::string* why,
                        const uint8_t** kv = nullptr) {
  const uint8_t* p = nullptr;
  PrefixCacheStatus s = parse_prefix_cache(d.data(), d.size(), k, &p, why);
  if (kv) *kv = p;
  return s;
}

}  // namespace

TEST(PrefixCache, RoundTrip) {
  Fixture fx;
  const std::string path = temp_path("rt");
  write_prefix_cache(path, fx.key, fx.kv.data());
  std::FILE* tmp = std::fopen((path + ".tmp").c_str(), "rb");
  EXPECT_EQ(tmp, nullptr) << "the .tmp file must be renamed away";
  if (tmp) std::fclose(tmp);
  const std::vector<uint8_t> d = read_file(path);
  ASSERT_EQ(d.size(), 112 + 4 * fx.spk.size() + 4 * fx.ids.size() + fx.kv.size() + 8);
  std::string why;
  const uint8_t* kv = nullptr;
  ASSERT_EQ(parse(d, fx.key, &why, &kv), PrefixCacheStatus::Match) << why;
  EXPECT_TRUE(why.empty());
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(std::memcmp(kv, fx.kv.data(), fx.kv.size()), 0);
  std::remove(path.c_str());
}

TEST(PrefixCache, EmptyPromptRoundTrip) {  // a voice part may be empty (a null pointer)
  Fixture fx;
  fx.key.tokens = nullptr;
  fx.key.n_prompt = 0;
  const std::vector<uint8_t> d = written(fx.key, fx.kv, "empty");
  std::string why;
  EXPECT_EQ(parse(d, fx.key, &why), PrefixCacheStatus::Match) << why;
  EXPECT_EQ(parse(d, Fixture().key, &why), PrefixCacheStatus::Mismatch);
}

TEST(PrefixCache, MismatchesNameWhat) {
  Fixture fx;
  const std::vector<uint8_t> d = written(fx.key, fx.kv, "mm");
  std::string why;
  PrefixCacheKey k = fx.key;
  k.model ^= 1;
  EXPECT_EQ(parse(d, k, &why), PrefixCacheStatus::Mismatch);
  EXPECT_NE(why.find("T3 weights"), std::string::npos) << why;
  k = fx.key;
  k.compute = prefix_cache_compute_key("f32");
  EXPECT_EQ(parse(d, k, &why), PrefixCacheStatus::Mismatch);
  EXPECT_NE(why.find("kernel path"), std::string::npos) << why;
  std::vector<float> spk2 = fx.spk;
  spk2[2] = 3.5f;
  k = fx.key;
  k.speaker = spk2.data();
  EXPECT_EQ(parse(d, k, &why), PrefixCacheStatus::Mismatch);
  EXPECT_NE(why.find("another voice"), std::string::npos) << why;
  k = fx.key;
  k.n_prompt = 4;  // a shorter prompt of the same tokens
  EXPECT_EQ(parse(d, k, &why), PrefixCacheStatus::Mismatch);
  k = fx.key;
  k.kv_bytes = 999;
  EXPECT_EQ(parse(d, k, &why), PrefixCacheStatus::Mismatch);
  std::vector<uint8_t> v2 = d;
  v2[8] = 2;  // version
  EXPECT_EQ(parse(v2, fx.key, &why), PrefixCacheStatus::Mismatch);
  EXPECT_NE(why.find("version 2"), std::string::npos) << why;
}

TEST(PrefixCache, DamagedAndForeignFiles) {
  Fixture fx;
  const std::vector<uint8_t> d = written(fx.key, fx.kv, "dm");
  std::string why;
  for (size_t cut : {size_t(8), size_t(100), d.size() / 2, d.size() - 1}) {
    std::vector<uint8_t> t(d.begin(), d.begin() + std::ptrdiff_t(cut));
    EXPECT_EQ(parse(t, fx.key, &why), PrefixCacheStatus::Damaged) << "cut at " << cut;
  }
  std::vector<uint8_t> longer = d;
  longer.push_back(0);
  EXPECT_EQ(parse(longer, fx.key, &why), PrefixCacheStatus::Damaged);
  for (size_t at : {size_t(20), size_t(130), d.size() - 500, d.size() - 3}) {
    std::vector<uint8_t> f = d;
    f[at] ^= 0x40;
    EXPECT_EQ(parse(f, fx.key, &why), PrefixCacheStatus::Damaged) << "byte " << at;
  }
  std::vector<uint8_t> huge = d;
  const int64_t big = int64_t(1) << 40;
  std::memcpy(huge.data() + 96, &big, 8);  // n_prompt
  EXPECT_EQ(parse(huge, fx.key, &why), PrefixCacheStatus::Damaged);
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  const std::string wav = "RIFF....WAVEfmt ";
  const std::vector<uint8_t> other(wav.begin(), wav.end());
  EXPECT_EQ(parse(other, fx.key, &why), PrefixCacheStatus::NotOurs);
  EXPECT_NE(why.find("not a chatterbox prompt cache"), std::string::npos) << why;
  EXPECT_EQ(parse({}, fx.key, &why), PrefixCacheStatus::NotOurs);
}

TEST(PrefixCache, UnwritablePathNamesIt) {
  Fixture fx;
  try {
    write_prefix_cache("/nonexistent-dir/x.cache", fx.key, fx.kv.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.cache"), std::string::npos) << e.what();
  }
}
