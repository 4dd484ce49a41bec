// Element types and their traits. Type ids and block layouts follow the published GGUF
// format (ggml type ids), so files from that ecosystem load. Adding a type = one table row.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cbx {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Q8_0: 32 weights, one f16 scale d, x = d * q.
constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;  // f16 bits
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: 32 weights, one f16 scale d, x = d * (q - 8); byte j holds element j (low nibble)
// and element j+16 (high nibble).
constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;  // f16 bits
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// K-quants: super-blocks of 256 weights in 8 sub-blocks of 32. Sub-block j has a 6-bit
// scale sc[j] and a 6-bit min m[j]; x = d * sc[j] * q - dmin * m[j] with q in 0..15 (Q4_K)
// or 0..31 (Q5_K). The 12 scale bytes pack them as (b = scales):
//   j < 4:  sc = b[j] & 63,                          m = b[j + 4] & 63
//   j >= 4: sc = (b[j + 4] & 15) | (b[j - 4] >> 6) << 4, m = (b[j + 4] >> 4) | (b[j] >> 6) << 4
// qs holds 4 chunks of 32 bytes; chunk c covers elements 64c .. 64c + 63: byte l's low nibble
// is element 64c + l (sub-block 2c), its high nibble element 64c + 32 + l (sub-block 2c + 1).
// Q5_K: bit j of qh[l] is the fifth bit (16) of element 32j + l.
constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;
struct BlockQ4_K {
  uint16_t d;     // f16 bits: scale of the sub-block scales
  uint16_t dmin;  // f16 bits: scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);
// The 8 sub-block scales and mins of a K-quant scales field, as above.
inline void kquant_scales(const uint8_t* b, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = b[j] & 63;
    m[j] = b[j + 4] & 63;
    sc[j + 4] = uint8_t((b[j + 8] & 15) | ((b[j] >> 6) << 4));
    m[j + 4] = uint8_t((b[j + 8] >> 4) | ((b[j + 4] >> 6) << 4));
  }
}
// The inverse (sc, m < 64).
void kquant_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t b[kKScaleBytes]);

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);    // n % block_size == 0
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);  // n % block_size == 0

struct TypeTraits {
  const char* name;    // "f32", "q4_0", ...
  int64_t block_size;  // elements per block (1 for plain types)
  size_t block_bytes;  // bytes per block
  bool is_quantized;
  bool is_float;           // usable as a weight/activation float type
  ToFloatFn to_float;      // nullptr for integer types
  FromFloatFn from_float;  // nullptr for integer types
  // Type activations are converted to before a dot with this weight type (Q8_0 for
  // quantized weights, F32 otherwise). The dot itself lives in kernels/ (per ISA).
  DType vec_dot_type;
};

// Throws cbx::Error for an id outside the table.
const TypeTraits& type_traits(DType t);
bool dtype_known(uint32_t id);
const char* dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k" (case-insensitive); throws on unknown.
DType dtype_from_name(const char* name);
// Bytes for n elements; throws if n is not a multiple of the block size.
size_t dtype_row_bytes(DType t, int64_t n);

// Scalar conversions used everywhere (exact IEEE round-to-nearest-even).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v{uint32_t(h) << 16};
  return v.f;
}
uint16_t f32_to_bf16(float f);  // round-to-nearest-even, NaN preserved

}  // namespace cbx
