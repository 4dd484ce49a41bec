#include "core/dtype.h"

#include <strings.h>

#include <cmath>
#include <cstring>

#include "core/dtype_kquant.h"
#include "core/error.h"

namespace cbx {

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400));
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520 -> inf
  if (absx < 0x38800000u) {                                 // subnormal or zero in f16
    if (absx < 0x33000000u) return uint16_t(sign);          // < 2^-25 -> 0
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffff) | 0x800000;
    int shift = 126 - int(e);  // 14 - (e - 127) + 9 ... bits to drop
    uint32_t q = m >> (shift);
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t e = (absx >> 23) - 127 + 15;
  uint32_t m = absx & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

namespace {

void f32_to_float(const void* s, float* d, int64_t n) { std::memcpy(d, s, size_t(n) * 4); }
void f32_from_float(const float* s, void* d, int64_t n) { std::memcpy(d, s, size_t(n) * 4); }
void f16_to_float(const void* s, float* d, int64_t n) {
  auto* p = static_cast<const uint16_t*>(s);
  for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(p[i]);
}
void f16_from_float(const float* s, void* d, int64_t n) {
  auto* p = static_cast<uint16_t*>(d);
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(s[i]);
}
void bf16_to_float(const void* s, float* d, int64_t n) {
  auto* p = static_cast<const uint16_t*>(s);
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(p[i]);
}
void bf16_from_float(const float* s, void* d, int64_t n) {
  auto* p = static_cast<uint16_t*>(d);
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(s[i]);
}
void f64_to_float(const void* s, float* d, int64_t n) {
  auto* p = static_cast<const double*>(s);
  for (int64_t i = 0; i < n; ++i) d[i] = float(p[i]);
}
void f64_from_float(const float* s, void* d, int64_t n) {
  auto* p = static_cast<double*>(d);
  for (int64_t i = 0; i < n; ++i) p[i] = s[i];
}

void q8_0_to_float(const void* s, float* d, int64_t n) {
  auto* b = static_cast<const BlockQ8_0*>(s);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    float scale = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) d[i * kQK8_0 + j] = scale * float(b[i].qs[j]);
  }
}
// Reference Q8_0 quantizer: d = max|x| / 127, q = round(x / d).
void q8_0_from_float(const float* s, void* d, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(d);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* x = s + i * kQK8_0;
    float amax = 0.f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    float scale = amax / 127.f;
    float inv = scale != 0.f ? 1.f / scale : 0.f;
    b[i].d = f32_to_f16(scale);
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = int8_t(std::lround(x[j] * inv));
  }
}
void q4_0_to_float(const void* s, float* d, int64_t n) {
  auto* b = static_cast<const BlockQ4_0*>(s);
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    float scale = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      d[i * kQK4_0 + j] = scale * float(int(b[i].qs[j] & 0x0f) - 8);
      d[i * kQK4_0 + j + kQK4_0 / 2] = scale * float(int(b[i].qs[j] >> 4) - 8);
    }
  }
}
// Reference Q4_0 quantizer: the element of largest magnitude maps to -8 exactly,
// d = max / -8, q = clamp(round(x / d) + 8, 0, 15).
void q4_0_from_float(const float* s, void* d, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(d);
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* x = s + i * kQK4_0;
    float amax = 0.f, vmax = 0.f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    float scale = vmax / -8.f;
    float inv = scale != 0.f ? 1.f / scale : 0.f;
    b[i].d = f32_to_f16(scale);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      int q0 = int(x[j] * inv + 8.5f);
      int q1 = int(x[j + kQK4_0 / 2] * inv + 8.5f);
      q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
      q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
      b[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

struct Row {
  DType type;
  TypeTraits traits;
};

const Row kTable[] = {
    {DType::F32, {"f32", 1, 4, false, true, f32_to_float, f32_from_float, DType::F32}},
    {DType::F16, {"f16", 1, 2, false, true, f16_to_float, f16_from_float, DType::F32}},
    {DType::BF16, {"bf16", 1, 2, false, true, bf16_to_float, bf16_from_float, DType::F32}},
    {DType::Q8_0, {"q8_0", kQK8_0, sizeof(BlockQ8_0), true, true, q8_0_to_float, q8_0_from_float, DType::Q8_0}},
    {DType::Q4_0, {"q4_0", kQK4_0, sizeof(BlockQ4_0), true, true, q4_0_to_float, q4_0_from_float, DType::Q8_0}},
    {DType::Q4_K, {"q4_k", kQK_K, sizeof(BlockQ4_K), true, true, q4_k_to_float, q4_k_from_float, DType::Q8_0}},
    {DType::Q5_K, {"q5_k", kQK_K, sizeof(BlockQ5_K), true, true, q5_k_to_float, q5_k_from_float, DType::Q8_0}},
    {DType::F64, {"f64", 1, 8, false, false, f64_to_float, f64_from_float, DType::F32}},
    {DType::I8, {"i8", 1, 1, false, false, nullptr, nullptr, DType::I8}},
    {DType::I16, {"i16", 1, 2, false, false, nullptr, nullptr, DType::I16}},
    {DType::I32, {"i32", 1, 4, false, false, nullptr, nullptr, DType::I32}},
    {DType::I64, {"i64", 1, 8, false, false, nullptr, nullptr, DType::I64}},
};

const Row* find(uint32_t id) {
  for (const Row& r : kTable)
    if (uint32_t(r.type) == id) return &r;
  return nullptr;
}

}  // namespace

bool dtype_known(uint32_t id) { return find(id) != nullptr; }

const TypeTraits& type_traits(DType t) {
  const Row* r = find(uint32_t(t));
  if (!r) fail("dtype: unsupported type id %u", unsigned(t));
  return r->traits;
}

const char* dtype_name(DType t) {
  const Row* r = find(uint32_t(t));
  return r ? r->traits.name : "unknown";
}

DType dtype_from_name(const char* name) {
  for (const Row& r : kTable)
    if (!strcasecmp(r.traits.name, name)) return r.type;
  fail("dtype: unknown type name '%s' (expected f32, f16, bf16, q8_0, q4_0, q4_k, q5_k)", name);
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  CBX_CHECK(n >= 0 && n % tr.block_size == 0, "dtype: %lld elements is not a multiple of the %s block size %lld",
            (long long)n, tr.name, (long long)tr.block_size);
  return size_t(n / tr.block_size) * tr.block_bytes;
}

}  // namespace cbx
