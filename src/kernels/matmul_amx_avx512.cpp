// AMX-BF16 GEMM micro-kernel for BF16 weights (Sapphire Rapids and later), used by the
// AVX-512 table when the CPU has AMX-TILE + AMX-BF16, the OS enables the tile state and
// grants this process the permission (Linux arch_prctl). CBX_DEBUG_NO_AMX=1 disables it.
// vdpbf16ps runs at half the f32 FMA rate on these CPUs, so without tiles a BF16 GEMM is
// slower than an f32 one; a tile multiply does 16 x 16 x 32 MACs per instruction.
//
// Micro-tile: 32 activation rows x 32 weight rows = 4 accumulator tiles (16 x 16 f32),
// two A tiles (16 rows x 32 bf16 of x) and two B tiles (16 k-pairs x 16 weight rows).
//   x panel: [kp / 32][32 rows][32 bf16]  (one A tile pair per 32 k, 64-byte rows)
//   w panel: [kp / 2][32 rows][2 bf16]    (the B tiles are its left and right halves)
// The same tile serves every weight type for the bf16 GEMM precision (Bf16Gemm): F32,
// F16, Q8_0 and Q4_0 rows are widened to f32 and rounded to bf16 while packing, and
// pack_bt packs a k-major B (convolution input columns) into the w panel layout.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/debug_env.h"
#include "kernels/amx_tile_config.h"
#include "kernels/bf16_pack_avx512.h"
#include "kernels/matmul.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_avx512_q.h"

// GCC 12 reports the undefined start value inside _mm512_cvtph_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cbx {
namespace {

constexpr int kNr = 32;
constexpr int kMr = 32;

bool probe_amx() {
  if (debug_env().no_amx) return false;  // CBX_DEBUG_NO_AMX=1
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t(hi) << 32) | lo;
  if ((xcr0 & (3ull << 17)) != (3ull << 17)) return false;  // XTILECFG + XTILEDATA
#ifdef __linux__
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

void pack_x_amx(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  const int64_t kb_n = (k + 31) / 32;
  for (int j = 0; j < kNr; ++j) {
    if (j >= rows) {
      for (int64_t kb = 0; kb < kb_n; ++kb) _mm512_storeu_si512(p + (kb * kNr + j) * 32, _mm512_setzero_si512());
      continue;
    }
    const float* xr = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + j * xs);
    for (int64_t kb = 0; kb < kb_n; ++kb) {
      const int64_t i = kb * 32, left = k - i;
      const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left > 16 ? __mmask16((1u << (left - 16)) - 1) : 0;
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, xr + i + 16), _mm512_maskz_loadu_ps(m0, xr + i));
      _mm512_storeu_si512(p + (kb * kNr + j) * 32, (__m512i)v);
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) void tile_amx(const void* xp, const void* wp, int64_t kc, float* y,
                                                           int64_t ldy, int nrows, int mcols, bool acc) {
  configure_amx_tiles();
  const bool full = nrows == kNr && mcols == kMr;
  alignas(64) float tmp[kNr * kMr];
  float* out = y;
  int64_t ld = ldy;
  if (!full) {
    out = tmp;
    ld = kMr;
    if (acc)
      for (int r = 0; r < nrows; ++r) std::memcpy(tmp + r * kMr, y + r * ldy, size_t(mcols) * 4);
  }
  const size_t stride = size_t(ld) * 4;
  if (acc) {
    _tile_loadd(0, out, stride);
    _tile_loadd(1, out + 16, stride);
    _tile_loadd(2, out + 16 * ld, stride);
    _tile_loadd(3, out + 16 * ld + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const auto* a = static_cast<const uint8_t*>(xp);
  const auto* b = static_cast<const uint8_t*>(wp);
  for (int64_t kb = 0; kb < kc / 32; ++kb) {
    _tile_loadd(4, a + kb * 2048, 64);
    _tile_loadd(5, a + kb * 2048 + 1024, 64);
    _tile_loadd(6, b + kb * 2048, 128);
    _tile_loadd(7, b + kb * 2048 + 64, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, stride);
  _tile_stored(1, out + 16, stride);
  _tile_stored(2, out + 16 * ld, stride);
  _tile_stored(3, out + 16 * ld + 16, stride);
  if (!full)
    for (int r = 0; r < nrows; ++r) std::memcpy(y + r * ldy, tmp + r * kMr, size_t(mcols) * 4);
}

__attribute__((target("amx-tile,amx-bf16"))) void conv_tiles_amx(const Bf16Gemm::Conv& c, int64_t i0, int64_t i1) {
  configure_amx_tiles();
  const int64_t cout_pad = (c.cout + 31) / 32 * 32, o_tiles = cout_pad / 32, n_blocks = c.cin_pad / 32;
  const size_t xstride = size_t(c.cols) * 4;  // bytes between channel pairs
  alignas(64) float tmp[kNr * kMr];
  for (int64_t it = i0; it < i1; ++it) {
    const int64_t t0 = it / o_tiles * 32, o0 = it % o_tiles * 32;
    _tile_loadd(0, c.bias16 + o0 * 16, 64);
    _tile_loadd(1, c.bias16 + o0 * 16, 64);
    _tile_loadd(2, c.bias16 + (o0 + 16) * 16, 64);
    _tile_loadd(3, c.bias16 + (o0 + 16) * 16, 64);
    for (int64_t kk = 0; kk < c.k; ++kk) {
      const uint16_t* xb = c.xp + (t0 + kk * c.dilation) * 2;
      const uint16_t* wb = c.wp + (kk * n_blocks * cout_pad + o0) * 32;
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint16_t* xa = xb + b * 16 * c.cols * 2;
        const uint16_t* wa = wb + b * cout_pad * 32;
        _tile_loadd(4, wa, 64);
        _tile_loadd(5, wa + 16 * 32, 64);
        _tile_loadd(6, xa, xstride);
        _tile_loadd(7, xa + 32, xstride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    const int rows = int(c.cout - o0 < 32 ? c.cout - o0 : 32), ncols = int(c.tout - t0 < 32 ? c.tout - t0 : 32);
    float* y = c.y + o0 * c.ys + t0;
    if (rows == 32 && ncols == 32 && !c.res) {
      const size_t st = size_t(c.ys) * 4;
      _tile_stored(0, y, st);
      _tile_stored(1, y + 16, st);
      _tile_stored(2, y + 16 * c.ys, st);
      _tile_stored(3, y + 16 * c.ys + 16, st);
    } else {
      _tile_stored(0, tmp, 128);
      _tile_stored(1, tmp + 16, 128);
      _tile_stored(2, tmp + 16 * 32, 128);
      _tile_stored(3, tmp + 16 * 32 + 16, 128);
      if (c.res) {  // y = res + conv; res may be y (read before the store, per element)
        for (int r = 0; r < rows; ++r) {
          const float* rr = c.res + (o0 + r) * c.rs + t0;
          for (int j = 0; j < ncols; ++j) y[r * c.ys + j] = rr[j] + tmp[r * 32 + j];
        }
      } else {
        for (int r = 0; r < rows; ++r) std::memcpy(y + r * c.ys, tmp + r * 32, size_t(ncols) * 4);
      }
    }
  }
}

}  // namespace

bool amx_bf16_usable() {
  static const bool ok = probe_amx();
  return ok;
}

GemmKernel amx_bf16_gemm_kernel() { return GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_pad32, tile_amx}; }

const Bf16Gemm* amx_bf16_gemm() {
  static const Bf16Gemm g = [] {
    Bf16Gemm r{};
    r.name = "amx";
    r.gemm[kWF32] = GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_widen<DType::F32>, tile_amx};
    r.gemm[kWF16] = GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_widen<DType::F16>, tile_amx};
    r.gemm[kWBF16] = amx_bf16_gemm_kernel();
    r.gemm[kWQ8_0] = GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_widen<DType::Q8_0>, tile_amx};
    r.gemm[kWQ4_0] = GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_widen<DType::Q4_0>, tile_amx};
    r.gemm[kWQ4_K] = GemmKernel{kNr, kMr, 32, 2, pack_x_amx, pack_w_bf16_widen<DType::Q4_K>, tile_amx};
    r.pack_bt = pack_bt_bf16;
    r.kc = kAmxKc;  // <= kBf16PackMaxKc
    // On AMX tiles the direct conv wins up to C_out 128; wider convs run faster k-major.
    r.direct_conv_max_cout = 128;
    r.conv_pack_x = conv_pack_x_bf16;
    r.conv_pack_w = conv_pack_w_bf16;
    r.conv_tiles = conv_tiles_amx;
    return r;
  }();
  return amx_bf16_usable() ? &g : nullptr;
}

}  // namespace cbx
