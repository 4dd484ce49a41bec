// GEMM tile (for convolutions) and flash-style attention, written once against a lane
// wrapper V; included by nn_avx2.cpp and nn_avx512.cpp (see nn_simd_math.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/nn.h"
#include "kernels/nn_simd_kernels.h"

namespace cbx::nn_simd {

// ---- GEMM: C[m, n] += A[m, k] B[k, n] ----
// Register tile MR rows x NV vectors: per k, NV loads of B, MR broadcasts of A, MR*NV FMAs.
template <class V, int MR, int NV, bool Full>
inline void gemm_micro(const GemmTile& t, int64_t i0, int64_t j0, int64_t k0, int64_t k1, int64_t ncols) {
  using R = typename V::R;
  constexpr int W = V::W;
  R acc[MR][NV];
  int64_t cnt[NV];
  for (int v = 0; v < NV; ++v) cnt[v] = Full ? W : iclamp(ncols - v * W, 0, W);
  for (int r = 0; r < MR; ++r) {
    float* c = t.c + (i0 + r) * t.c_rs + j0;
    for (int v = 0; v < NV; ++v) acc[r][v] = Full ? V::load(c + v * W) : V::load_n(c + v * W, cnt[v]);
  }
  const float* a = t.a + i0 * t.a_rs;
  for (int64_t kk = k0; kk < k1; ++kk) {
    const float* b = t.b + (t.b_off ? t.b_off[kk] : kk * t.b_rs) + j0;
    R bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Full ? V::load(b + v * W) : V::load_n(b + v * W, cnt[v]);
    const float* ak = a + kk * t.a_cs;
    for (int r = 0; r < MR; ++r) {
      R av = V::set1(ak[r * t.a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* c = t.c + (i0 + r) * t.c_rs + j0;
    for (int v = 0; v < NV; ++v) {
      if (Full)
        V::store(c + v * W, acc[r][v]);
      else if (cnt[v] > 0)
        V::store_n(c + v * W, acc[r][v], cnt[v]);
    }
  }
}

template <class V, int MR, int NV>
inline void gemm_rows(const GemmTile& t, int64_t i0, int64_t k0, int64_t k1) {
  constexpr int64_t NR = NV * V::W;
  int64_t j0 = 0;
  for (; j0 + NR <= t.n; j0 += NR) gemm_micro<V, MR, NV, true>(t, i0, j0, k0, k1, NR);
  if (j0 < t.n) gemm_micro<V, MR, NV, false>(t, i0, j0, k0, k1, t.n - j0);
}

template <class V>
void gemm(const GemmTile& t) {
  constexpr int MR = 6, NV = 2;
  constexpr int64_t KC = 256;
  for (int64_t k0 = 0; k0 < t.k; k0 += KC) {
    int64_t k1 = imin(t.k, k0 + KC);
    int64_t i0 = 0;
    for (; i0 + MR <= t.m; i0 += MR) gemm_rows<V, MR, NV>(t, i0, k0, k1);
    switch (t.m - i0) {
      case 5:
        gemm_rows<V, 5, NV>(t, i0, k0, k1);
        break;
      case 4:
        gemm_rows<V, 4, NV>(t, i0, k0, k1);
        break;
      case 3:
        gemm_rows<V, 3, NV>(t, i0, k0, k1);
        break;
      case 2:
        gemm_rows<V, 2, NV>(t, i0, k0, k1);
        break;
      case 1:
        gemm_rows<V, 1, NV>(t, i0, k0, k1);
        break;
      default:
        break;
    }
  }
}

// ---- attention ----
template <class V>
inline typename V::R load_kv(const void* p, DType dt, int64_t at, int64_t cnt) {
  if (dt == DType::F16) {
    const uint16_t* h = static_cast<const uint16_t*>(p) + at;
    return cnt == V::W ? V::load_h(h) : V::load_h_n(h, cnt);
  }
  const float* f = static_cast<const float*>(p) + at;
  return cnt == V::W ? V::load(f) : V::load_n(f, cnt);
}

// Software prefetch (into L2) of the K or V row this many rows ahead, up to the last key
// the block reads: each head's K and V are short streams (~600 rows of 128 bytes at
// decode), too short for the hardware prefetcher to ramp up; far enough ahead to cover a
// DRAM access at the kernel's pace (docs/benchmarks.md, "Tried and not kept").
constexpr int64_t kAttnPrefetchRows = 32;
CBX_ALWAYS_INLINE inline void prefetch_kv_row(const void* base, DType dt, int64_t at, int64_t d) {
  const char* p = static_cast<const char*>(base) + at * (dt == DType::F16 ? 2 : 4);
  const int64_t bytes = d * (dt == DType::F16 ? 2 : 4);
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
}

// NQ queries (rows i0..i0+NQ) against all their keys, online softmax over key tiles.
template <class V, int NQ>
void attn_block(const AttnHead& h, int64_t i0, float* scratch) {
  using R = typename V::R;
  constexpr int64_t KT = kAttnKeyTile;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t d = h.d;
  float* S = scratch;        // [NQ][KT] scores, then probabilities
  float* acc = S + NQ * KT;  // [NQ][d]
  float m[NQ], l[NQ], alpha[NQ];
  int64_t kend_q[NQ];
  int64_t kend = 0;
  for (int r = 0; r < NQ; ++r) {
    kend_q[r] = h.tk;
    if (h.causal) kend_q[r] = imin(h.tk, imax(0, h.q_offset + i0 + r + 1));
    kend = imax(kend, kend_q[r]);
    m[r] = ninf;
    l[r] = 0.f;
    for (int64_t c = 0; c < d; ++c) acc[r * d + c] = 0.f;
  }
  const float* q[NQ];
  for (int r = 0; r < NQ; ++r) q[r] = h.q + (i0 + r) * h.q_rs;
  const bool use_kt = h.kt != nullptr;
  float* qs = acc + NQ * d;  // [NQ][d] queries pre-multiplied by scale (kt path)
  if (use_kt)
    for (int r = 0; r < NQ; ++r)
      for (int64_t c = 0; c < d; ++c) qs[r * d + c] = q[r][c] * h.scale;
  const R vscale = V::set1(use_kt ? 1.f : h.scale);

  for (int64_t j0 = 0; j0 < kend; j0 += KT) {
    const int64_t nk = imin(KT, kend - j0);
    if (use_kt) {
      // Scores for KS keys x NQ queries in registers: per dim c, NVS loads of K^T row c
      // and NQ broadcasts of q. Keys past nk (zero padding or causally hidden) are
      // computed and ignored below.
      constexpr int NVS = V::kAttnNV;
      constexpr int64_t KS = NVS * V::W;
      for (int64_t kv0 = 0; kv0 < nk; kv0 += KS) {
        R sacc[NQ][NVS];
        for (int r = 0; r < NQ; ++r)
          for (int v = 0; v < NVS; ++v) sacc[r][v] = V::zero();
        const float* kt = h.kt + j0 + kv0;
        for (int64_t c = 0; c < d; ++c) {
          R kv[NVS];
          for (int v = 0; v < NVS; ++v) kv[v] = V::load(kt + c * h.kt_rs + v * V::W);
          for (int r = 0; r < NQ; ++r) {
            R qb = V::set1(qs[r * d + c]);
            for (int v = 0; v < NVS; ++v) sacc[r][v] = V::fma(qb, kv[v], sacc[r][v]);
          }
        }
        for (int r = 0; r < NQ; ++r)
          for (int v = 0; v < NVS; ++v) V::store(S + r * KT + kv0 + v * V::W, sacc[r][v]);
      }
    } else
      // Scores: one K row is loaded once for all NQ queries.
      for (int64_t jj = 0; jj < nk; ++jj) {
        if (j0 + jj + kAttnPrefetchRows < kend)
          prefetch_kv_row(h.k, h.kv_dtype, (j0 + jj + kAttnPrefetchRows) * h.k_rs, d);
        R sacc[NQ];
        for (int r = 0; r < NQ; ++r) sacc[r] = V::zero();
        const int64_t krow = (j0 + jj) * h.k_rs;
        for (int64_t c = 0; c < d; c += V::W) {
          int64_t cnt = imin(V::W, d - c);
          R kv = load_kv<V>(h.k, h.kv_dtype, krow + c, cnt);
          for (int r = 0; r < NQ; ++r) {
            R qv = cnt == V::W ? V::load(q[r] + c) : V::load_n(q[r] + c, cnt);
            sacc[r] = V::fma(qv, kv, sacc[r]);
          }
        }
        for (int r = 0; r < NQ; ++r) S[r * KT + jj] = V::reduce_add(sacc[r]);
      }
    // Scale, mask, online-softmax update.
    for (int r = 0; r < NQ; ++r) {
      float* s = S + r * KT;
      const float* mk = h.mask ? h.mask + (i0 + r) * h.mask_rs + j0 : nullptr;
      if (!use_kt || mk) {  // the kt path has the scale folded into q already
        for (int64_t jj = 0; jj < nk; jj += V::W) {
          int64_t cnt = imin(V::W, nk - jj);
          R sv = V::mul(V::load_n(s + jj, cnt), vscale);
          if (mk) sv = V::add(sv, V::load_n(mk + jj, cnt));
          V::store_n(s + jj, sv, cnt);
        }
      }
      for (int64_t jj = imax(0, kend_q[r] - j0); jj < nk; ++jj) s[jj] = ninf;
      const float mt = max_of<V>(s, nk);
      float mn = (mt > m[r] ? mt : m[r]);
      if (mn == ninf) {  // nothing visible yet: p = 0, acc unchanged
        for (int64_t jj = 0; jj < nk; ++jj) s[jj] = 0.f;
        alpha[r] = 1.f;
        continue;
      }
      alpha[r] = std::exp(m[r] - mn);
      R vm = V::set1(mn), psum = V::zero();
      for (int64_t jj = 0; jj < nk; jj += V::W) {
        int64_t cnt = imin(V::W, nk - jj);
        R p = V::keep_n(vexp<V>(V::sub(V::load_n(s + jj, cnt), vm)), cnt);
        V::store_n(s + jj, p, cnt);
        psum = V::add(psum, p);
      }
      l[r] = l[r] * alpha[r] + V::reduce_add(psum);
      m[r] = mn;
    }
    // acc = alpha acc + P V, V row chunks loaded once for all NQ queries.
    constexpr int NVD = V::kAttnNV;
    if (d % (NVD * V::W) == 0) {
      for (int64_t c0 = 0; c0 < d; c0 += NVD * V::W) {
        R a[NQ][NVD];
        for (int r = 0; r < NQ; ++r)
          for (int v = 0; v < NVD; ++v) a[r][v] = V::mul(V::load(acc + r * d + c0 + v * V::W), V::set1(alpha[r]));
        for (int64_t jj = 0; jj < nk; ++jj) {
          if (c0 == 0 && j0 + jj + kAttnPrefetchRows < kend)
            prefetch_kv_row(h.v, h.kv_dtype, (j0 + jj + kAttnPrefetchRows) * h.v_rs, d);
          R vv[NVD];
          for (int v = 0; v < NVD; ++v) vv[v] = load_kv<V>(h.v, h.kv_dtype, (j0 + jj) * h.v_rs + c0 + v * V::W, V::W);
          for (int r = 0; r < NQ; ++r) {
            R p = V::set1(S[r * KT + jj]);
            for (int v = 0; v < NVD; ++v) a[r][v] = V::fma(p, vv[v], a[r][v]);
          }
        }
        for (int r = 0; r < NQ; ++r)
          for (int v = 0; v < NVD; ++v) V::store(acc + r * d + c0 + v * V::W, a[r][v]);
      }
      continue;
    }
    for (int64_t c = 0; c < d; c += V::W) {
      int64_t cnt = imin(V::W, d - c);
      R a[NQ];
      for (int r = 0; r < NQ; ++r) a[r] = V::mul(V::load_n(acc + r * d + c, cnt), V::set1(alpha[r]));
      for (int64_t jj = 0; jj < nk; ++jj) {
        R vv = load_kv<V>(h.v, h.kv_dtype, (j0 + jj) * h.v_rs + c, cnt);
        for (int r = 0; r < NQ; ++r) a[r] = V::fma(V::set1(S[r * KT + jj]), vv, a[r]);
      }
      for (int r = 0; r < NQ; ++r) V::store_n(acc + r * d + c, a[r], cnt);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    float* o = h.o + (i0 + r) * h.o_rs;
    for (int64_t c = 0; c < d; c += V::W) {
      int64_t cnt = imin(V::W, d - c);
      V::store_n(o + c, V::mul(V::load_n(acc + r * d + c, cnt), V::set1(inv)), cnt);
    }
  }
}

// ---- one query (decode over a KV cache) ----
template <class V, bool kF16>
inline typename V::R kv_row_load(const void* p, int64_t at) {
  if constexpr (kF16)
    return V::load_h(static_cast<const uint16_t*>(p) + at);
  else
    return V::load(static_cast<const float*>(p) + at);
}
template <class V, bool kF16>
inline typename V::R kv_row_load_n(const void* p, int64_t at, int64_t n) {
  if constexpr (kF16)
    return V::load_h_n(static_cast<const uint16_t*>(p) + at, n);
  else
    return V::load_n(static_cast<const float*>(p) + at, n);
}

// Prefetch of the row kAttnPrefetchRows ahead of `row`, up to the last key. (Continuing
// into the next head's first rows was tried: no gain in the decode step.)
template <bool kF16>
CBX_ALWAYS_INLINE inline void prefetch_ahead(const void* base, int64_t row, int64_t kend, int64_t rs, int64_t d) {
  const int64_t r = row + kAttnPrefetchRows;
  if (r < kend) prefetch_kv_row(base, kF16 ? DType::F16 : DType::F32, r * rs, d);
}

// Where key / value row `row` of a head lives: (base, element offset). kSplit: rows before
// h.split in k / v, the rest in k2 / v2 (AttnHead).
template <bool kSplit>
inline const void* kv_base(const AttnHead& h, bool is_v, int64_t row, int64_t* at) {
  if (kSplit && row >= h.split) {
    *at = (row - h.split) * (is_v ? h.v2_rs : h.k2_rs);
    return is_v ? h.v2 : h.k2;
  }
  *at = row * (is_v ? h.v_rs : h.k_rs);
  return is_v ? h.v : h.k;
}
template <bool kF16, bool kSplit>
CBX_ALWAYS_INLINE inline void prefetch_ahead2(const AttnHead& h, bool is_v, int64_t row, int64_t kend, int64_t d) {
  if constexpr (!kSplit) {
    prefetch_ahead<kF16>(is_v ? h.v : h.k, row, kend, is_v ? h.v_rs : h.k_rs, d);
  } else {
    const int64_t r = row + kAttnPrefetchRows;
    if (r >= kend) return;
    int64_t at;
    const void* b = kv_base<true>(h, is_v, r, &at);
    prefetch_kv_row(b, kF16 ? DType::F16 : DType::F32, at, d);
  }
}

// One query against its keys, tiles of kAttnKeyTile keys with online softmax. Scores
// W keys at a time: each key leaves a W-lane vector of partial products (d / W FMAs,
// the scale folded into q), and V::sum_lanes_t turns W such vectors into W scores at
// once instead of W horizontal sums. P.V keeps two accumulator sets (even / odd keys)
// so consecutive keys do not wait on each other's FMAs.
// kD: the head dimension when known at compile time (a multiple of W; 0: h.d at run time).
// With it the per-key score loop unrolls and the query stays in registers: the same FMAs
// in the same order, so the same bits, without the run-time-d loop's overhead around one
// dependent FMA chain per key.
template <class V, bool kF16, int kD, bool kSplit = false>
void attn_one(const AttnHead& h, int64_t i, float* scratch) {
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int64_t KT = kAttnKeyTile;
  static_assert(KT % W == 0 && kD % W == 0);
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t d = kD ? kD : h.d, dv = d / W * W, dt = d - dv;
  float* S = scratch;   // [KT] scores, then probabilities
  float* acc = S + KT;  // [d]
  float* qs = acc + d;  // [d] query x scale
  const float* q = h.q + i * h.q_rs;
  for (int64_t c = 0; c < d; ++c) {
    qs[c] = q[c] * h.scale;
    acc[c] = 0.f;
  }
  const int64_t kend = h.causal ? imin(h.tk, imax(0, h.q_offset + i + 1)) : h.tk;
  const float* mrow = h.mask ? h.mask + i * h.mask_rs : nullptr;
  float m = ninf, l = 0.f;
  // The in-loop prefetch starts kAttnPrefetchRows rows in: ask for the first rows of K and V
  // up front (a decode step starts 16 x 24 such heads cold, each waiting on DRAM otherwise).
  for (int64_t r = 0, warm = imin(kend, kAttnPrefetchRows); r < warm; ++r) {
    int64_t ka, va;
    const void* kb = kv_base<kSplit>(h, false, r, &ka);
    const void* vb = kv_base<kSplit>(h, true, r, &va);
    prefetch_kv_row(kb, kF16 ? DType::F16 : DType::F32, ka, d);
    prefetch_kv_row(vb, kF16 ? DType::F16 : DType::F32, va, d);
  }
  constexpr int kQv = kD ? kD / W : 1;
  R qv[kQv];
  if constexpr (kD != 0)
    for (int c = 0; c < kQv; ++c) qv[c] = V::load(qs + c * W);
  for (int64_t j0 = 0; j0 < kend; j0 += KT) {
    const int64_t nk = imin(KT, kend - j0);
    R vmax = V::set1(ninf);
    for (int64_t g = 0; g < nk; g += W) {
      const int64_t ng = imin(W, nk - g);
      R part[W];
      for (int j = 0; j < W; ++j) {
        if (j >= ng) {
          part[j] = V::zero();
          continue;
        }
        const int64_t row = j0 + g + j;
        prefetch_ahead2<kF16, kSplit>(h, false, row, kend, d);
        int64_t at;
        const void* kb = kv_base<kSplit>(h, false, row, &at);
        R a = V::zero();
        if constexpr (kD != 0) {
          for (int c = 0; c < kQv; ++c) a = V::fma(qv[c], kv_row_load<V, kF16>(kb, at + c * W), a);
        } else {
          for (int64_t c = 0; c < dv; c += W) a = V::fma(V::load(qs + c), kv_row_load<V, kF16>(kb, at + c), a);
          if (dt) a = V::fma(V::load_n(qs + dv, dt), kv_row_load_n<V, kF16>(kb, at + dv, dt), a);
        }
        part[j] = a;
      }
      R sv = V::sum_lanes_t(part);
      if (mrow) sv = V::add(sv, V::load_n(mrow + j0 + g, ng));
      V::store(S + g, sv);
      if (ng < W) {
        for (int64_t jj = ng; jj < W; ++jj) S[g + jj] = ninf;
        sv = V::load(S + g);
      }
      vmax = V::max(vmax, sv);
    }
    const float mt = V::reduce_max(vmax);
    const float mn = mt > m ? mt : m;
    if (mn == ninf) continue;  // nothing visible yet: acc and l stay 0
    const float alpha = std::exp(m - mn);
    const R vm = V::set1(mn);
    R psum = V::zero();
    for (int64_t g = 0; g < nk; g += W) {  // lanes past nk hold -inf: p = 0
      R p = vexp<V>(V::sub(V::load(S + g), vm));
      V::store(S + g, p);
      psum = V::add(psum, p);
    }
    l = l * alpha + V::reduce_add(psum);
    m = mn;
    // acc = alpha acc + P V over column chunks of NVD vectors (the last may be partial).
    constexpr int NVD = V::kAttnNV;
    const R va = V::set1(alpha);
    for (int64_t c0 = 0; c0 < d; c0 += NVD * W) {
      const int64_t cols = imin(NVD * W, d - c0);
      const int nv = int((cols + W - 1) / W);
      const int64_t last = cols - int64_t(nv - 1) * W;  // lanes of the last vector
      R a0[NVD], a1[NVD];
      for (int v = 0; v < NVD; ++v) {
        a0[v] = v < nv ? V::mul(V::load_n(acc + c0 + v * W, v + 1 < nv ? W : last), va) : V::zero();
        a1[v] = V::zero();
      }
      auto keys = [&](auto full) {  // full: NVD whole vectors (the common case, d % (NVD W) == 0)
        auto key = [&](int64_t jj, R* a) {
          const int64_t row = j0 + jj;
          if (c0 == 0) prefetch_ahead2<kF16, kSplit>(h, true, row, kend, d);
          const R p = V::set1(S[jj]);
          int64_t at;
          const void* vb = kv_base<kSplit>(h, true, row, &at);
          at += c0;
          if constexpr (decltype(full)::value) {
            for (int v = 0; v < NVD; ++v) a[v] = V::fma(p, kv_row_load<V, kF16>(vb, at + v * W), a[v]);
          } else {
            for (int v = 0; v < nv; ++v)
              a[v] = V::fma(p, kv_row_load_n<V, kF16>(vb, at + v * W, v + 1 < nv ? W : last), a[v]);
          }
        };
        int64_t jj = 0;
        for (; jj + 2 <= nk; jj += 2) {
          key(jj, a0);
          key(jj + 1, a1);
        }
        if (jj < nk) key(jj, a0);
      };
      if (nv == NVD && last == W)
        keys(std::true_type{});
      else
        keys(std::false_type{});
      for (int v = 0; v < nv; ++v) V::store_n(acc + c0 + v * W, V::add(a0[v], a1[v]), v + 1 < nv ? W : last);
    }
  }
  const R inv = V::set1(l > 0.f ? 1.f / l : 0.f);
  float* o = h.o + i * h.o_rs;
  for (int64_t c = 0; c < d; c += W) {
    const int64_t cnt = imin(W, d - c);
    V::store_n(o + c, V::mul(V::load_n(acc + c, cnt), inv), cnt);
  }
}

template <class V>
void attn(const AttnHead& h, int64_t q0, int64_t q1, float* scratch) {
  static_assert(kAttnQueryBlock == 4);
  if (q1 - q0 == 1 && !h.kt && h.k2) {
    const bool f16 = h.kv_dtype == DType::F16;
    if (h.d == 64)
      f16 ? attn_one<V, true, 64, true>(h, q0, scratch) : attn_one<V, false, 64, true>(h, q0, scratch);
    else
      f16 ? attn_one<V, true, 0, true>(h, q0, scratch) : attn_one<V, false, 0, true>(h, q0, scratch);
    return;
  }
  if (q1 - q0 == 1 && !h.kt) {
    const bool f16 = h.kv_dtype == DType::F16;
    if (h.d == 64)
      f16 ? attn_one<V, true, 64>(h, q0, scratch) : attn_one<V, false, 64>(h, q0, scratch);
    else
      f16 ? attn_one<V, true, 0>(h, q0, scratch) : attn_one<V, false, 0>(h, q0, scratch);
    return;
  }
  int64_t i = q0;
  for (; i + 4 <= q1; i += 4) attn_block<V, 4>(h, i, scratch);
  switch (q1 - i) {
    case 3:
      attn_block<V, 3>(h, i, scratch);
      break;
    case 2:
      attn_block<V, 2>(h, i, scratch);
      break;
    case 1:
      attn_block<V, 1>(h, i, scratch);
      break;
    default:
      break;
  }
}

}  // namespace cbx::nn_simd
