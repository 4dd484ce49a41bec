// Int8 GEMM (kernels/matmul_int8.h): the weight packer every ISA shares, the generic kernel
// (the reference the VNNI kernel is tested against) and the ISA dispatch.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul_int8.h"

namespace cbx {
namespace {

constexpr int kGenericNr = 4;

// d and the inverse step of one row (d = 0, inv = 0 for an all-zero row).
void row_scale(const float* r, int64_t k, float* d, float* inv) {
  float amax = 0.f;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(r[i]));
  *d = amax / 127.f;
  *inv = amax > 0.f ? 127.f / amax : 0.f;
}

int quant(float v, float inv) {
  const float q = std::nearbyint(v * inv);  // round half to even (default rounding mode)
  return int(std::min(127.f, std::max(-127.f, q)));
}

void pack_x_generic(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  const int nr = kGenericNr;
  const int64_t kq = (k + 3) / 4 * 4;
  auto* p = static_cast<uint8_t*>(dst);
  std::memset(p, 0, size_t(int8_panel_k(k)) * nr);
  auto* dx = reinterpret_cast<float*>(p + kq * nr);
  for (int i = 0; i < rows; ++i) {
    const auto* r = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + i * xs);
    float d, inv;
    row_scale(r, k, &d, &inv);
    dx[i] = d;
    for (int64_t j = 0; j < k; ++j) p[(j / 4 * nr + i) * 4 + j % 4] = uint8_t(quant(r[j], inv) + 128);
  }
}

void tile_generic(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  const int nr = kGenericNr, mr = kInt8Mr;
  const int64_t kq = kc - kInt8Trailer;
  const auto* x = static_cast<const uint8_t*>(xp);
  const auto* w = static_cast<const int8_t*>(wp);
  const auto* dx = reinterpret_cast<const float*>(x + kq * nr);
  const auto* dw = reinterpret_cast<const float*>(w + kq * mr);
  const auto* corr = reinterpret_cast<const int32_t*>(w + kq * mr + mr * 4);
  for (int i = 0; i < nrows; ++i)
    for (int j = 0; j < mcols; ++j) {
      int32_t s = 0;
      for (int64_t g = 0; g < kq / 4; ++g)
        for (int b = 0; b < 4; ++b) s += int32_t(x[(g * nr + i) * 4 + b]) * int32_t(w[(g * mr + j) * 4 + b]);
      const float v = float(s - corr[j]) * dx[i] * dw[j];
      float* o = y + i * ldy + j;
      *o = acc ? *o + v : v;
    }
}

}  // namespace

void int8_pack_w(const float* w, int64_t ws, int rows, int64_t k, void* dst) {
  const int mr = kInt8Mr;
  const int64_t kq = (k + 3) / 4 * 4;
  auto* p = static_cast<int8_t*>(dst);
  std::memset(p, 0, size_t(int8_panel_k(k)) * mr);
  auto* dw = reinterpret_cast<float*>(p + kq * mr);
  auto* corr = reinterpret_cast<int32_t*>(p + kq * mr + mr * 4);
  for (int j = 0; j < rows; ++j) {
    const float* r = w + j * ws;
    float d, inv;
    row_scale(r, k, &d, &inv);
    dw[j] = d;
    int32_t sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      const int q = quant(r[c], inv);
      p[(c / 4 * mr + j) * 4 + c % 4] = int8_t(q);
      sum += q;
    }
    corr[j] = 128 * sum;
  }
}

const GemmKernel& matmul_int8_gemm_generic() {
  static const GemmKernel g{kGenericNr, kInt8Mr, 1, 1, pack_x_generic, nullptr, tile_generic};
  return g;
}

const GemmKernel& matmul_int8_gemm(Isa isa) {
  if (isa == Isa::Avx512)
    if (const GemmKernel* g = matmul_int8_gemm_avx512()) return *g;
  return matmul_int8_gemm_generic();
}

const char* matmul_int8_kind(Isa isa) {
  return isa == Isa::Avx512 && matmul_int8_gemm_avx512() ? "vpdpbusd" : "generic";
}

}  // namespace cbx
