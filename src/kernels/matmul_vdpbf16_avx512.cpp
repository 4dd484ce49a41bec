// The bf16 GEMM precision (Bf16Gemm) on vdpbf16ps, for AVX-512-BF16 CPUs without AMX tiles
// where vdpbf16ps (32 bf16 products per instruction) runs at the f32 FMA instruction rate,
// i.e. twice the f32 GEMM's products (AMD Zen 4 and later). On Intel cores it issues at
// half that rate and the f32 GEMM is faster, so it is not chosen there by default.
//
// GEMM: the 14 x 32 vdpbf16ps tile of the BF16-weight GEMM (matmul_avx512.cpp) with the w
// panels of the shared packers (kernels/bf16_pack_avx512.h: every weight type widened and
// rounded to bf16, [kcp / 2][32][2] with k padded to 32) and x panels [kp / 2][14][2] padded
// with zero pairs to the same k. Stride-1 conv1d: the shared Bf16Gemm::Conv layouts, each
// 32 x 32 output tile as four groups of 8 output channels x 32 time steps.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "core/cpu.h"
#include "core/debug_env.h"
#include "kernels/bf16_pack_avx512.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx512_q.h"

namespace cbx {
namespace {

// 32 weight rows x 512 k in bf16: a 32 KB w panel (L1-sized; fewer passes over the C tile
// than 256, which helped the T3 prefill and left the CFM and HiFT alike).
constexpr int64_t kVdpKc = 512;
constexpr int kConvGroup = 8;  // output channels per conv accumulator group (16 zmm)

const GemmKernel& pairs() {
  static const GemmKernel g = vdp_bf16_pairs_kernel();
  return g;
}

// The pairs kernel's x panel, then zero pairs up to k rounded to 32 (the w panels' padding).
void pack_x_pad32(const float* x, size_t xs, int rows, int64_t k, void* dst) {
  const GemmKernel& g = pairs();
  g.pack_x(x, xs, rows, k, dst);
  const int64_t have = (k + 1) / 2, want = (k + 31) / 32 * 16;
  if (want > have) std::memset(static_cast<uint8_t*>(dst) + size_t(have) * g.nr * 4, 0, size_t(want - have) * g.nr * 4);
}

void tile(const void* xp, const void* wp, int64_t kc, float* y, int64_t ldy, int nrows, int mcols, bool acc) {
  pairs().tile(xp, wp, kc, y, ldy, nrows, mcols, acc);
}

// Output channels [o0, o0 + 8) x time [t0, t0 + 32) of a Bf16Gemm::Conv.
void conv_group(const Bf16Gemm::Conv& c, int64_t o0, int64_t t0, int64_t cout_pad) {
  const int64_t n_blocks = c.cin_pad / 32;
  __m512 acc[kConvGroup][2];
  for (int o = 0; o < kConvGroup; ++o) acc[o][0] = acc[o][1] = _mm512_load_ps(c.bias16 + (o0 + o) * 16);
  for (int64_t kk = 0; kk < c.k; ++kk) {
    const uint16_t* xk = c.xp + (t0 + kk * c.dilation) * 2;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint16_t* wb = c.wp + ((kk * n_blocks + b) * cout_pad + o0) * 32;
      const uint16_t* xb = xk + b * 16 * c.cols * 2;
      for (int pp = 0; pp < 16; ++pp) {
        const uint16_t* xr = xb + pp * c.cols * 2;
        const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xr), x1 = (__m512bh)_mm512_loadu_si512(xr + 32);
#pragma GCC unroll 8
        for (int o = 0; o < kConvGroup; ++o) {
          int32_t pair;
          std::memcpy(&pair, wb + o * 32 + 2 * pp, 4);
          const __m512bh w = (__m512bh)_mm512_set1_epi32(pair);
          acc[o][0] = _mm512_dpbf16_ps(acc[o][0], w, x0);
          acc[o][1] = _mm512_dpbf16_ps(acc[o][1], w, x1);
        }
      }
    }
  }
  const int64_t ncols = c.tout - t0 < 32 ? c.tout - t0 : 32;
  const __mmask16 m0 = ncols >= 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= 32 ? __mmask16(0xffff) : ncols > 16 ? __mmask16((1u << (ncols - 16)) - 1) : 0;
  for (int o = 0; o < kConvGroup && o0 + o < c.cout; ++o) {
    float* y = c.y + (o0 + o) * c.ys + t0;
    __m512 v0 = acc[o][0], v1 = acc[o][1];
    if (c.res) {
      const float* r = c.res + (o0 + o) * c.rs + t0;
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, r), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, r + 16), v1);
    }
    _mm512_mask_storeu_ps(y, m0, v0);
    _mm512_mask_storeu_ps(y + 16, m1, v1);
  }
}

void conv_tiles(const Bf16Gemm::Conv& c, int64_t i0, int64_t i1) {
  const int64_t cout_pad = (c.cout + 31) / 32 * 32, o_tiles = cout_pad / 32;
  for (int64_t it = i0; it < i1; ++it) {
    const int64_t t0 = it / o_tiles * 32, o0 = it % o_tiles * 32;
    for (int64_t g = 0; g < 32 / kConvGroup && o0 + g * kConvGroup < c.cout; ++g)
      conv_group(c, o0 + g * kConvGroup, t0, cout_pad);
  }
}

// Whether vdpbf16ps is worth it on this CPU: CBX_DEBUG_VDPBF16=0|1 decides, else AMD only.
bool choose_vdp() {
  if (const int forced = debug_env().vdpbf16; forced >= 0) return forced == 1;
  return cpu_is_amd();
}

}  // namespace

const Bf16Gemm* vdp_bf16_gemm() {
  static const Bf16Gemm g = [] {
    const GemmKernel& p = pairs();
    Bf16Gemm r{};
    r.name = "vdpbf16ps";
    r.gemm[kWF32] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_widen<DType::F32>, tile};
    r.gemm[kWF16] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_widen<DType::F16>, tile};
    r.gemm[kWBF16] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_pad32, tile};
    r.gemm[kWQ8_0] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_widen<DType::Q8_0>, tile};
    r.gemm[kWQ4_0] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_widen<DType::Q4_0>, tile};
    r.gemm[kWQ4_K] = GemmKernel{p.nr, p.mr, 32, 2, pack_x_pad32, pack_w_bf16_widen<DType::Q4_K>, tile};
    r.pack_bt = pack_bt_bf16;
    r.kc = kVdpKc;
    r.conv_pack_x = conv_pack_x_bf16;
    r.conv_pack_w = conv_pack_w_bf16;
    r.conv_tiles = conv_tiles;
    // With vdpbf16ps HiFT's resblocks run faster on the direct conv than k-major, the CFM
    // resnets no slower: the direct conv takes every C_out up to 512.
    r.direct_conv_max_cout = 512;
    return r;
  }();
  static const bool on = choose_vdp();
  return on ? &g : nullptr;
}

}  // namespace cbx
