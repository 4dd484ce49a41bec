// Deterministic PRNG (splitmix64 seeding, xoshiro256**) and small helpers.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/output_file.h"
#include "mkckpt.h"

namespace mk {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

uint64_t stream_key(uint64_t seed, std::string_view a, std::string_view b) {
  uint64_t h = mix64(seed ^ 0x6368617474657262ull);  // "chatterb"
  h = fnv1a(h, a);
  h = mix64(h);
  h = fnv1a(h ^ 0xFF, b);
  return mix64(h);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

Rng::Rng(uint64_t key) {
  uint64_t z = key;
  for (auto& s : s_) {
    z += 0x9E3779B97F4A7C15ull;
    s = mix64(z);
  }
}

uint64_t Rng::next() {
  const uint64_t r = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return r;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

int64_t Rng::below(int64_t n) { return n <= 1 ? 0 : int64_t(next() % uint64_t(n)); }

float Rng::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * M_PI * u2;
  spare_ = float(r * std::sin(a));
  have_spare_ = true;
  return float(r * std::cos(a));
}

void write_text_file(const std::string& path, const std::string& text) {
  cbx::OutputFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace mk
