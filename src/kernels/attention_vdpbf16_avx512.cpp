// Fused bf16 attention on vdpbf16ps, for AVX-512-BF16 CPUs without AMX tiles where the bf16
// GEMM is chosen (AMD Zen 4 and later; the same rule as kernels/matmul.h's Bf16Gemm:
// CBX_DEBUG_VDPBF16). Same operands, layouts, softmax and numerics as the AMX kernel
// (kernels/attention_amx.h): per block of 32 queries, S = q k^T for all keys into the
// thread's score buffer (f32, L2), the softmax rows (exact max, exp2 polynomial, p rounded
// to bf16 in place), O = P v, out = O / sum. Only the products run on vdpbf16ps instead of
// tiles, one after the other (both phases use the same FMA units, nothing to overlap).
//   S: 8 queries x 32 keys per step (16 zmm), one q dim pair broadcast against the kp
//      vector of 16 keys x that pair.
//   O: 16 / (D / 16) queries x D dims per step, one P key pair broadcast against the vp
//      vector of 16 dims x that pair.
#include <immintrin.h>

#include <cstring>

#include "kernels/attention_amx.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/matmul_avx512_q.h"

namespace cbx {
using namespace attn_bf16;
namespace {

inline __m512bh bcast_pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(v);
}

// S rows [r0, r0 + 8) x key tiles [t, t + NT) (NT = 1 or 2) over D / 2 dim pairs.
template <int ND, int NT>
inline void scores_step(const uint16_t* qb, const uint16_t* kp, int r0, int64_t t, float* s, int64_t lds) {
  constexpr int64_t D = ND * 32, np = D / 2;
  __m512 acc[8][NT];
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_setzero_ps();
  const uint16_t* kb = kp + t * 16 * D;
  for (int64_t p = 0; p < np; ++p) {
    __m512bh kv[NT];
    for (int j = 0; j < NT; ++j) kv[j] = (__m512bh)_mm512_loadu_si512(kb + j * 16 * D + p * 32);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m512bh qv = bcast_pair(qb + (r0 + r) * D + 2 * p);
      for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], qv, kv[j]);
    }
  }
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < NT; ++j) _mm512_storeu_ps(s + (r0 + r) * lds + (t + j) * 16, acc[r][j]);
}

// S [32][lds] for all nkt key tiles of 16 (rows past the valid queries are zero q rows).
template <int ND>
void scores(const uint16_t* qb, const uint16_t* kp, int64_t nkt, float* s, int64_t lds) {
  for (int r0 = 0; r0 < kQb; r0 += 8) {
    int64_t t = 0;
    for (; t + 2 <= nkt; t += 2) scores_step<ND, 2>(qb, kp, r0, t, s, lds);
    if (t < nkt) scores_step<ND, 1>(qb, kp, r0, t, s, lds);
  }
}

// out rows [r0, r0 + R) = (P v) / sum over nkc chunks of 32 keys (P: bf16 rows 2 lds apart).
template <int ND, int R>
inline void output_step(const uint16_t* p, int64_t lds, const uint16_t* vp, int64_t nkc, int r0, int nq,
                        const float* inv, const AttnAmxHead& h, int64_t q0) {
  constexpr int NV = ND * 2;  // 16-dim vectors per row
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < nkc; ++c) {
    const uint16_t* vb = vp + c * NV * 512;
    for (int kr = 0; kr < 16; ++kr) {  // key pair 32 c + 2 kr
      __m512bh vv[NV];
      for (int v = 0; v < NV; ++v) vv[v] = (__m512bh)_mm512_loadu_si512(vb + (v * 16 + kr) * 32);
      for (int r = 0; r < R; ++r) {
        const __m512bh pv = bcast_pair(p + (r0 + r) * 2 * lds + c * 32 + 2 * kr);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], pv, vv[v]);
      }
    }
  }
  for (int r = 0; r < R && r0 + r < nq; ++r) {
    float* o = h.o + (q0 + r0 + r) * h.o_rs;
    const __m512 sc = _mm512_set1_ps(inv[r0 + r]);
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + v * 16, _mm512_mul_ps(acc[r][v], sc));
  }
}

// Query row i of head h (relp set): s[j] = scale s[j] + bd[i, j] for j < Tk, where bd[i, j] =
// qv[i] . p[Tk - 1 - i + j] summed over the dim pairs in order from zero on vdpbf16ps (the
// bits of a bf16 GEMM tile of qv p^T), 64 keys (four windows of 16 p rows) per pass.
template <int ND>
inline void relpos_row(const AttnAmxHead& h, int64_t i, float* s, int64_t Tk, float scale) {
  constexpr int64_t D = ND * 32, np = D / 2;
  alignas(64) uint16_t qb[D];
  row_bf16(h.qv + i * h.qv_rs, D, qb);
  const uint32_t* base = h.relp + (Tk - 1 - i);
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < Tk; j0 += 64) {
    __m512 acc[4];
    for (int t = 0; t < 4; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; ++p) {
      const __m512bh a = bcast_pair(qb + 2 * p);
      const uint32_t* w = base + p * h.relp_rs + j0;
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) acc[t] = _mm512_dpbf16_ps(acc[t], a, (__m512bh)_mm512_loadu_si512(w + 16 * t));
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __mmask16 m = lanes(Tk - j0 - 16 * t);
      float* sp = s + j0 + 16 * t;
      _mm512_mask_storeu_ps(sp, m, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, sp), vs, acc[t]));
    }
  }
}

template <int ND>
void run_vdp(const AttnAmxHead* heads, int64_t nqb, int64_t i0, int64_t i1, void* ws) {
  constexpr int R = ND == 1 ? 8 : ND == 2 ? 4 : 2;  // <= 16 accumulators
  if (i0 >= i1) return;
  const int64_t Tk = heads[0].Tk, lds = attention_amx_score_stride(Tk), nkt = (Tk + 15) / 16;
  const int64_t nkc = (Tk + 31) / 32;
  const float scale = heads[0].scale;
  float* s = reinterpret_cast<float*>(align64(ws));
  auto* qb = reinterpret_cast<uint16_t*>(align64(s + kQb * lds));
  alignas(64) float inv[kQb];
  for (int64_t it = i0; it < i1; ++it) {
    const AttnAmxHead& h = heads[it / nqb];
    const int64_t q0 = (it % nqb) * kQb;
    const int nq = load_q<ND>(h, q0, qb);
    scores<ND>(qb, h.kp, nkt, s, lds);
    if (h.relp) {
      for (int r = 0; r < nq; ++r) {
        relpos_row<ND>(h, q0 + r, s + r * lds, Tk, scale);
        inv[r] = softmax_row_bf16(s + r * lds, Tk, 1.f);
      }
    } else {
      for (int r = 0; r < nq; ++r) inv[r] = softmax_row_head(h, q0 + r, s + r * lds, Tk, scale);
    }
    const auto* p = reinterpret_cast<const uint16_t*>(s);
    for (int r0 = 0; r0 < nq; r0 += R) output_step<ND, R>(p, lds, h.vp, nkc, r0, nq, inv, h, q0);
  }
}

void run_dispatch(const AttnAmxHead* heads, int64_t nqb, int64_t i0, int64_t i1, void* ws) {
  with_head_dim(heads[0].D, [&](auto nd) { run_vdp<decltype(nd)::value>(heads, nqb, i0, i1, ws); });
}

void pack_relpos(const float* p, int64_t p_rs, int64_t P, int64_t D, int64_t rows, uint32_t* relp) {
  const int64_t np = D / 2;
  alignas(64) uint32_t pairs[kAttnAmxMaxHeadDim / 2];
  for (int64_t m = 0; m < rows; ++m) {
    if (m < P)
      row_bf16(p + m * p_rs, D, reinterpret_cast<uint16_t*>(pairs));
    else
      std::memset(pairs, 0, size_t(np) * 4);
    for (int64_t d = 0; d < np; ++d) relp[d * rows + m] = pairs[d];
  }
}

}  // namespace

const AttentionAmxKernels* attention_vdpbf16_kernels() {
  static const AttentionAmxKernels k{attention_bf16_pack_k, attention_bf16_pack_v, run_dispatch, pack_relpos};
  return vdp_bf16_gemm() ? &k : nullptr;
}

}  // namespace cbx
