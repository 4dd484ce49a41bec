// Fused AMX-BF16 attention (layouts and data flow in kernels/attention_amx.h).
//
// Tiles: every tile is configured as 16 rows x 64 bytes, the same configuration the AMX GEMM
// (matmul_amx_avx512.cpp) loads (kernels/amx_tile_config.h), so the two may run on one thread in any order.
//   S phase (32 queries x 16 keys per step): acc 0, 1 (rows 0-15, 16-31); q tiles 2..5 stay
//     loaded for D = 64 (rows x 32-dim chunks) while the previous block's softmax runs; k tiles 6, 7.
//   O phase (32 queries x 32 dims per pass, D / 32 passes): acc 0..3, P tiles 4, 5, v tiles 6, 7.
// exp: p = 2^n 2^f with n = round(t), f = t - n in [-0.5, 0.5], 2^f by a cubic (minimax for
// the relative error, max 7.5e-5; p is then rounded to bf16, relative error up to 2^-9).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/amx_tile_config.h"
#include "kernels/attention_amx.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/matmul_avx512_q.h"

// GCC 12 reports the undefined start value inside the _mm512_reduce_* / mask intrinsics as
// maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cbx {
using namespace attn_bf16;
namespace {

// Q tiles 2..5 (rows 0-15 / 16-31 x dims 0-31 / 32-63) for D = 64, where they stay loaded.
__attribute__((target("amx-tile"))) void load_q_tiles(const uint16_t* qb) {
  constexpr size_t qs = 128;
  _tile_loadd(2, qb, qs);
  _tile_loadd(3, qb + 32, qs);
  _tile_loadd(4, qb + 16 * 64, qs);
  _tile_loadd(5, qb + 16 * 64 + 32, qs);
}

// S [32][lds], key tiles [t0, t1) = q [32][D] . k^T (for D = 64 the q tiles must be loaded).
template <int ND>
__attribute__((target("amx-tile,amx-bf16"))) void scores_tiles(const uint16_t* qb, const uint16_t* kp, int64_t t0,
                                                               int64_t t1, float* s, int64_t lds) {
  constexpr int64_t D = ND * 32;
  constexpr size_t qs = D * 2;
  const size_t ss = size_t(lds) * 4;
  if constexpr (ND == 2) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint16_t* kb = kp + t * 16 * D;
      _tile_zero(0);
      _tile_zero(1);
      _tile_loadd(6, kb, 64);
      _tile_loadd(7, kb + 512, 64);
      _tile_dpbf16ps(0, 2, 6);
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(0, 3, 7);
      _tile_dpbf16ps(1, 5, 7);
      _tile_stored(0, s + t * 16, ss);
      _tile_stored(1, s + 16 * lds + t * 16, ss);
    }
  } else {
    for (int64_t t = t0; t < t1; ++t) {
      const uint16_t* kb = kp + t * 16 * D;
      _tile_zero(0);
      _tile_zero(1);
      for (int c = 0; c < ND; ++c) {
        _tile_loadd(2, qb + c * 32, qs);
        _tile_loadd(3, qb + 16 * D + c * 32, qs);
        _tile_loadd(6, kb + c * 512, 64);
        _tile_dpbf16ps(0, 2, 6);
        _tile_dpbf16ps(1, 3, 6);
      }
      _tile_stored(0, s + t * 16, ss);
      _tile_stored(1, s + 16 * lds + t * 16, ss);
    }
  }
}

// ot [32][32] = P [32][keys] . v[:, 32 dh .. 32 dh + 31] over nkc chunks of 32 keys.
template <int ND>
__attribute__((target("amx-tile,amx-bf16"))) void output_tiles(const uint16_t* p, int64_t lds, const uint16_t* vp,
                                                               int64_t nkc, int dh, float* ot) {
  constexpr int64_t nt = ND * 2;  // 16-dim tiles
  const size_t ps = size_t(lds) * 4;
  const uint16_t* p1 = p + 32 * lds;  // row 16 (rows are 2 lds uint16 apart)
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < nkc; ++c) {
    const uint16_t* vb = vp + (c * nt + 2 * dh) * 512;
    _tile_loadd(4, p + c * 32, ps);
    _tile_loadd(5, p1 + c * 32, ps);
    _tile_loadd(6, vb, 64);
    _tile_loadd(7, vb + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, ot, 128);
  _tile_stored(1, ot + 16, 128);
  _tile_stored(2, ot + 16 * 32, 128);
  _tile_stored(3, ot + 16 * 32 + 16, 128);
}

template <int ND>
void run_amx(const AttnAmxHead* heads, int64_t nqb, int64_t i0, int64_t i1, void* ws) {
  constexpr int64_t D = ND * 32;
  if (i0 >= i1) return;
  configure_amx_tiles();
  const int64_t Tk = heads[0].Tk, lds = attention_amx_score_stride(Tk), nkt = (Tk + 15) / 16;
  const float scale = heads[0].scale;
  float* sbuf[2];
  sbuf[0] = reinterpret_cast<float*>(align64(ws));
  sbuf[1] = reinterpret_cast<float*>(align64(sbuf[0] + kQb * lds));
  auto* qb = reinterpret_cast<uint16_t*>(align64(sbuf[1] + kQb * lds));
  float* ot = reinterpret_cast<float*>(align64(qb + kQb * D));
  alignas(64) float inv[kQb];

  // Prologue: S of the first block.
  int nq = load_q<ND>(heads[i0 / nqb], (i0 % nqb) * kQb, qb);
  if constexpr (ND == 2) load_q_tiles(qb);
  scores_tiles<ND>(qb, heads[i0 / nqb].kp, 0, nkt, sbuf[0], lds);
  int cur = 0;
  for (int64_t it = i0; it < i1; ++it) {
    const AttnAmxHead& h = heads[it / nqb];
    const int64_t q0 = (it % nqb) * kQb;
    float* s = sbuf[cur];
    // Softmax rows of this block, with the next block's S tiles issued in between.
    const bool next = it + 1 < i1;
    const uint16_t* kp_next = nullptr;
    int nq_next = 0;
    if (next) {
      const AttnAmxHead& hn = heads[(it + 1) / nqb];
      kp_next = hn.kp;
      nq_next = load_q<ND>(hn, ((it + 1) % nqb) * kQb, qb);
      if constexpr (ND == 2) load_q_tiles(qb);
    }
    float* sn = sbuf[cur ^ 1];
    for (int r = 0; r < kQb; ++r) {
      if (r < nq) inv[r] = softmax_row_head(h, q0 + r, s + r * lds, Tk, scale);
      if (next) scores_tiles<ND>(qb, kp_next, nkt * r / kQb, nkt * (r + 1) / kQb, sn, lds);
    }
    const auto* p = reinterpret_cast<const uint16_t*>(s);
    for (int dh = 0; dh < ND; ++dh) {
      output_tiles<ND>(p, lds, h.vp, (Tk + 31) / 32, dh, ot);
      for (int r = 0; r < nq; ++r) {
        float* o = h.o + (q0 + r) * h.o_rs + dh * 32;
        const __m512 sc = _mm512_set1_ps(inv[r]);
        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_load_ps(ot + r * 32), sc));
        _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_load_ps(ot + r * 32 + 16), sc));
      }
    }
    nq = nq_next;
    cur ^= 1;
  }
}

void run_dispatch(const AttnAmxHead* heads, int64_t nqb, int64_t i0, int64_t i1, void* ws) {
  with_head_dim(heads[0].D, [&](auto nd) { run_amx<decltype(nd)::value>(heads, nqb, i0, i1, ws); });
}

}  // namespace

void attention_bf16_pack_k(const float* k, int64_t k_rs, int64_t Tk, int64_t D, uint16_t* kp) {
  const int64_t nkt = (Tk + 15) / 16, np = D / 2;
  alignas(64) uint32_t tmp[16][kAttnAmxMaxHeadDim / 2];
  auto* out = reinterpret_cast<uint32_t*>(kp);
  for (int64_t t = 0; t < nkt; ++t) {
    for (int j = 0; j < 16; ++j) {
      const int64_t key = t * 16 + j;
      if (key < Tk)
        row_bf16(k + key * k_rs, D, reinterpret_cast<uint16_t*>(tmp[j]));
      else
        std::memset(tmp[j], 0, size_t(np) * 4);
    }
    // [16 keys][np pairs] -> [np pairs][16 keys], 16 pairs at a time by a 32-bit gather.
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32(int(kAttnAmxMaxHeadDim / 2)));
    uint32_t* dst = out + t * np * 16;
    for (int64_t p = 0; p < np; ++p) _mm512_storeu_si512(dst + p * 16, _mm512_i32gather_epi32(idx, tmp[0] + p, 4));
  }
}

void attention_bf16_pack_v(const float* v, int64_t v_rs, int64_t Tk, int64_t D, uint16_t* vp) {
  const int64_t nkc = (Tk + 31) / 32, nt = D / 16;
  for (int64_t c = 0; c < nkc; ++c) {
    for (int r = 0; r < 16; ++r) {
      const int64_t k0 = c * 32 + 2 * r, k1 = k0 + 1;
      const float* a = k0 < Tk ? v + k0 * v_rs : nullptr;
      const float* b = k1 < Tk ? v + k1 * v_rs : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        const __m512 va = a ? _mm512_loadu_ps(a + t * 16) : _mm512_setzero_ps();
        const __m512 vb = b ? _mm512_loadu_ps(b + t * 16) : _mm512_setzero_ps();
        _mm512_storeu_si512(vp + ((c * nt + t) * 16 + r) * 32, pair_bf16(va, vb));
      }
    }
  }
}

const AttentionAmxKernels* attention_amx_kernels() {
  static const AttentionAmxKernels k{attention_bf16_pack_k, attention_bf16_pack_v, run_dispatch, nullptr};
  return amx_bf16_usable() ? &k : nullptr;
}

}  // namespace cbx
