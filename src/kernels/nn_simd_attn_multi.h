// Multi-query decode attention over a shared first key segment (NnKernels::attn_multi),
// and the per-ISA kernel table; included by nn_avx2.cpp and nn_avx512.cpp.
#pragma once
#include "kernels/nn_simd_gemm.h"

namespace cbx::nn_simd {

// NQ single queries h[0 .. NQ) (row 0 of each) sharing the rows [0, split) of h[0].k / .v;
// rows from split on are each query's own k2 / v2. Per query this is attn_one<V, kF16, kD,
// true>'s arithmetic step for step: the same key tiles, the same FMA chain per key over the
// head dim, V::sum_lanes_t over the same W keys, the same max / exp / psum / l order, and
// in P.V the same even / odd accumulator split of the tile's keys (key jj of a tile goes to
// a0 when jj is even, a1 when odd; acc = a0 + a1). Only the nesting changes: key by key,
// a shared row is loaded (and widened from f16) once and used by every query of the group,
// so the queries also give independent FMA chains. P.V runs over column chunks of NC
// vectors (columns are independent: the chunking does not change any bit) so that the
// 2 NQ NC accumulators stay in registers.
template <class V, bool kF16, int kD, int NQ>
void attn_multi_group(const AttnHead* hs, float* scratch) {
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int64_t KT = kAttnKeyTile;
  constexpr int NC = V::kAttnNV / 2 > 0 ? V::kAttnNV / 2 : 1;
  static_assert(KT % W == 0 && kD % W == 0 && NQ >= 1 && NQ <= kAttnMultiGroup);
  const float ninf = -std::numeric_limits<float>::infinity();
  const AttnHead& h0 = hs[0];
  const int64_t d = kD ? kD : h0.d, dv = d / W * W, dt = d - dv;
  const int64_t split = h0.split;
  const DType kdt = kF16 ? DType::F16 : DType::F32;
  float* S[NQ];    // [KT] scores, then probabilities
  float* acc[NQ];  // [d]
  float* qs[NQ];   // [d] query x scale
  int64_t kend[NQ];
  float m[NQ], l[NQ];
  int64_t kmax = 0;
  for (int r = 0; r < NQ; ++r) {
    const AttnHead& h = hs[r];
    S[r] = scratch + r * (KT + 2 * d);
    acc[r] = S[r] + KT;
    qs[r] = acc[r] + d;
    for (int64_t c = 0; c < d; ++c) {
      qs[r][c] = h.q[c] * h.scale;
      acc[r][c] = 0.f;
    }
    kend[r] = h.causal ? imin(h.tk, imax(0, h.q_offset + 1)) : h.tk;
    kmax = imax(kmax, kend[r]);
    m[r] = ninf;
    l[r] = 0.f;
  }
  const int64_t shared_end = imin(split, kmax);  // shared rows any query reads
  // Where query r's key / value row `row` lives (a shared row: the same for every query).
  auto base = [&](int r, bool is_v, int64_t row, int64_t* at) { return kv_base<true>(hs[r], is_v, row, at); };
  auto prefetch = [&](bool is_v, int64_t row) CBX_ALWAYS_INLINE {
    const int64_t ahead = row + kAttnPrefetchRows;
    if (ahead < shared_end) {
      int64_t at;
      const void* b = base(0, is_v, ahead, &at);
      prefetch_kv_row(b, kdt, at, d);
    }
    for (int r = 0; r < NQ; ++r)
      if (ahead >= split && ahead < kend[r]) {
        int64_t at;
        const void* b = base(r, is_v, ahead, &at);
        prefetch_kv_row(b, kdt, at, d);
      }
  };
  for (int64_t row = 0, warm = imin(shared_end, kAttnPrefetchRows); row < warm; ++row) {
    int64_t ka, va;
    const void* kb = base(0, false, row, &ka);
    const void* vb = base(0, true, row, &va);
    prefetch_kv_row(kb, kdt, ka, d);
    prefetch_kv_row(vb, kdt, va, d);
  }
  constexpr int kQv = kD ? kD / W : 1;
  R qv[NQ][kQv];
  if constexpr (kD != 0)
    for (int r = 0; r < NQ; ++r)
      for (int c = 0; c < kQv; ++c) qv[r][c] = V::load(qs[r] + c * W);
  // One key's score partial (W lanes) for query r from its row at kb + at.
  auto score = [&](int r, const void* kb, int64_t at) {
    R a = V::zero();
    if constexpr (kD != 0) {
      for (int c = 0; c < kQv; ++c) a = V::fma(qv[r][c], kv_row_load<V, kF16>(kb, at + c * W), a);
    } else {
      for (int64_t c = 0; c < dv; c += W) a = V::fma(V::load(qs[r] + c), kv_row_load<V, kF16>(kb, at + c), a);
      if (dt) a = V::fma(V::load_n(qs[r] + dv, dt), kv_row_load_n<V, kF16>(kb, at + dv, dt), a);
    }
    return a;
  };

  // The prefetch of `row`'s key (or value) row kAttnPrefetchRows ahead when that row is a
  // shared one (one address for all queries), else prefetch()'s per-query walk.
  auto prefetch_shared = [&](bool is_v, int64_t row) CBX_ALWAYS_INLINE {
    const int64_t ahead = row + kAttnPrefetchRows;
    if (ahead < shared_end)
      prefetch_kv_row(is_v ? h0.v : h0.k, kdt, ahead * (is_v ? h0.v_rs : h0.k_rs), d);
    else
      prefetch(is_v, row);
  };

  R part[NQ][W];
  for (int64_t j0 = 0; j0 < kmax; j0 += KT) {
    int64_t nk[NQ];  // keys of this tile query r sees (<= 0: none, it is done)
    int64_t nkmax = 0;
    for (int r = 0; r < NQ; ++r) {
      nk[r] = imin(KT, kend[r] - j0);
      nkmax = imax(nkmax, nk[r]);
    }
    R vmax[NQ];
    for (int r = 0; r < NQ; ++r) vmax[r] = V::set1(ninf);
    for (int64_t g = 0; g < nkmax; g += W) {
      // W shared keys every query sees: the general loop's arithmetic without its per-key,
      // per-query bounds checks and segment lookups.
      bool all_shared = kD != 0 && j0 + g + W <= shared_end;
      for (int r = 0; r < NQ; ++r) all_shared = all_shared && g + W <= nk[r];
      if (all_shared) {
        for (int j = 0; j < W; ++j) {
          const int64_t row = j0 + g + j;
          prefetch_shared(false, row);
          prefetch_kv_row(h0.v, kdt, row * h0.v_rs, d);
          R kc[kQv];
          for (int c = 0; c < kQv; ++c) kc[c] = kv_row_load<V, kF16>(h0.k, row * h0.k_rs + c * W);
          for (int r = 0; r < NQ; ++r) {
            R a = V::zero();
            for (int c = 0; c < kQv; ++c) a = V::fma(qv[r][c], kc[c], a);
            part[r][j] = a;
          }
        }
      }
      for (int j = 0; j < W && !all_shared; ++j) {
        const int64_t jj = g + j, row = j0 + jj;
        prefetch(false, row);
        // This tile's value rows, asked for while its scores are computed: P.V comes after
        // the whole tile's scores, and its rows are read from memory (a shared row once for
        // all queries, past the prefix each query's own row).
        if (row < shared_end) {
          int64_t at;
          const void* vb = base(0, true, row, &at);
          prefetch_kv_row(vb, kdt, at, d);
        } else {
          for (int r = 0; r < NQ; ++r)
            if (jj < nk[r]) {
              int64_t at;
              const void* vb = base(r, true, row, &at);
              prefetch_kv_row(vb, kdt, at, d);
            }
        }
        if (kD != 0 && row < shared_end) {  // one load (and f16 widening) of the row for all
          int64_t at;
          const void* kb = base(0, false, row, &at);
          R kc[kQv];
          for (int c = 0; c < kQv; ++c) kc[c] = kv_row_load<V, kF16>(kb, at + c * W);
          for (int r = 0; r < NQ; ++r) {
            if (jj >= nk[r]) {
              part[r][j] = V::zero();
              continue;
            }
            R a = V::zero();
            for (int c = 0; c < kQv; ++c) a = V::fma(qv[r][c], kc[c], a);
            part[r][j] = a;
          }
        } else {
          for (int r = 0; r < NQ; ++r) {
            if (jj >= nk[r]) {
              part[r][j] = V::zero();
              continue;
            }
            int64_t at;
            const void* kb = base(r, false, row, &at);
            part[r][j] = score(r, kb, at);
          }
        }
      }
      for (int r = 0; r < NQ; ++r) {
        if (g >= nk[r]) continue;
        const int64_t ng = imin(W, nk[r] - g);
        R sv = V::sum_lanes_t(part[r]);
        V::store(S[r] + g, sv);
        if (ng < W) {
          for (int64_t jj = ng; jj < W; ++jj) S[r][g + jj] = ninf;
          sv = V::load(S[r] + g);
        }
        vmax[r] = V::max(vmax[r], sv);
      }
    }
    bool act[NQ];  // query r takes part in this tile's P.V
    float alpha[NQ];
    for (int r = 0; r < NQ; ++r) {
      act[r] = false;
      alpha[r] = 0.f;
      if (nk[r] <= 0) continue;
      const float mt = V::reduce_max(vmax[r]);
      const float mn = mt > m[r] ? mt : m[r];
      if (mn == ninf) continue;  // nothing visible yet: acc and l stay 0
      alpha[r] = std::exp(m[r] - mn);
      const R vm = V::set1(mn);
      R psum = V::zero();
      for (int64_t g = 0; g < nk[r]; g += W) {  // lanes past nk hold -inf: p = 0
        R p = vexp<V>(V::sub(V::load(S[r] + g), vm));
        V::store(S[r] + g, p);
        psum = V::add(psum, p);
      }
      l[r] = l[r] * alpha[r] + V::reduce_add(psum);
      m[r] = mn;
      act[r] = true;
    }
    int64_t nkv = 0;  // keys of the tile some active query weighs
    for (int r = 0; r < NQ; ++r)
      if (act[r]) nkv = imax(nkv, nk[r]);
    if (nkv == 0) continue;
    for (int64_t c0 = 0; c0 < d; c0 += NC * W) {
      const int64_t cols = imin(NC * W, d - c0);
      const int nv = int((cols + W - 1) / W);
      const int64_t last = cols - int64_t(nv - 1) * W;  // lanes of the last vector
      R a0[NQ][NC], a1[NQ][NC];
      for (int r = 0; r < NQ; ++r)
        for (int v = 0; v < NC; ++v) {
          a0[r][v] = act[r] && v < nv ? V::mul(V::load_n(acc[r] + c0 + v * W, v + 1 < nv ? W : last), V::set1(alpha[r]))
                                      : V::zero();
          a1[r][v] = V::zero();
        }
      auto keys = [&](auto full) {  // full: NC whole vectors
        auto load_row = [&](const void* vb, int64_t at, R* vv) {
          if constexpr (decltype(full)::value) {
            for (int v = 0; v < NC; ++v) vv[v] = kv_row_load<V, kF16>(vb, at + v * W);
          } else {
            for (int v = 0; v < NC; ++v)
              if (v < nv) vv[v] = kv_row_load_n<V, kF16>(vb, at + v * W, v + 1 < nv ? W : last);
          }
        };
        auto key = [&](int64_t jj, auto odd) {
          const int64_t row = j0 + jj;
          if (c0 == 0) prefetch(true, row);
          const bool shared = row < shared_end;
          R vv[NC];
          for (int v = 0; v < NC; ++v) vv[v] = V::zero();
          if (shared) {
            int64_t at;
            const void* vb = base(0, true, row, &at);
            load_row(vb, at + c0, vv);
          }
          for (int r = 0; r < NQ; ++r) {
            if (!act[r] || jj >= nk[r]) continue;
            if (!shared) {
              int64_t at;
              const void* vb = base(r, true, row, &at);
              load_row(vb, at + c0, vv);
            }
            const R p = V::set1(S[r][jj]);
            R* a = decltype(odd)::value ? a1[r] : a0[r];
            for (int v = 0; v < NC; ++v)
              if (decltype(full)::value || v < nv) a[v] = V::fma(p, vv[v], a[v]);
          }
        };
        int64_t jj = 0;
        for (; jj + 2 <= nkv; jj += 2) {
          key(jj, std::false_type{});
          key(jj + 1, std::true_type{});
        }
        if (jj < nkv) key(jj, std::false_type{});
      };
      // A tile of shared keys that every query weighs in full: key() without the per-key,
      // per-query checks and segment lookups (same FMAs in the same order).
      bool all_shared = nv == NC && last == W && j0 + nkv <= shared_end;
      for (int r = 0; r < NQ; ++r) all_shared = all_shared && act[r] && nk[r] == nkv;
      if (all_shared) {
        auto key = [&](int64_t jj, auto odd) {
          const int64_t row = j0 + jj;
          if (c0 == 0) prefetch_shared(true, row);
          R vv[NC];
          for (int v = 0; v < NC; ++v) vv[v] = kv_row_load<V, kF16>(h0.v, row * h0.v_rs + c0 + v * W);
          for (int r = 0; r < NQ; ++r) {
            const R p = V::set1(S[r][jj]);
            R* a = decltype(odd)::value ? a1[r] : a0[r];
            for (int v = 0; v < NC; ++v) a[v] = V::fma(p, vv[v], a[v]);
          }
        };
        int64_t jj = 0;
        for (; jj + 2 <= nkv; jj += 2) {
          key(jj, std::false_type{});
          key(jj + 1, std::true_type{});
        }
        if (jj < nkv) key(jj, std::false_type{});
      } else if (nv == NC && last == W)
        keys(std::true_type{});
      else
        keys(std::false_type{});
      for (int r = 0; r < NQ; ++r) {
        if (!act[r]) continue;
        for (int v = 0; v < nv; ++v) V::store_n(acc[r] + c0 + v * W, V::add(a0[r][v], a1[r][v]), v + 1 < nv ? W : last);
      }
    }
  }
  for (int r = 0; r < NQ; ++r) {
    const R inv = V::set1(l[r] > 0.f ? 1.f / l[r] : 0.f);
    for (int64_t c = 0; c < d; c += W) {
      const int64_t cnt = imin(W, d - c);
      V::store_n(hs[r].o + c, V::mul(V::load_n(acc[r] + c, cnt), inv), cnt);
    }
  }
}

template <class V, int NQ>
void attn_multi_n(const AttnHead* h, float* scratch) {
  const bool f16 = h[0].kv_dtype == DType::F16;
  if (h[0].d == 64)
    f16 ? attn_multi_group<V, true, 64, NQ>(h, scratch) : attn_multi_group<V, false, 64, NQ>(h, scratch);
  else
    f16 ? attn_multi_group<V, true, 0, NQ>(h, scratch) : attn_multi_group<V, false, 0, NQ>(h, scratch);
}

// Groups of at most kAttnMultiGroup queries, sizes as even as they go (5 = 3 + 2).
template <class V>
void attn_multi(const AttnHead* h, int nq, float* scratch) {
  static_assert(kAttnMultiGroup == 4);
  const int groups = (nq + kAttnMultiGroup - 1) / kAttnMultiGroup;
  for (int gi = 0, r = 0; gi < groups; ++gi) {
    const int n = nq / groups + (gi < nq % groups ? 1 : 0);
    switch (n) {
      case 4:
        attn_multi_n<V, 4>(h + r, scratch);
        break;
      case 3:
        attn_multi_n<V, 3>(h + r, scratch);
        break;
      case 2:
        attn_multi_n<V, 2>(h + r, scratch);
        break;
      default:
        attn_multi_n<V, 1>(h + r, scratch);
        break;
    }
    r += n;
  }
}

template <class V>
constexpr NnKernels make_table(Isa isa) {
  return NnKernels{isa,     unary<V>, binary<V>,     snake<V>,      layer_norm<V>, rms_norm<V>, softmax<V>,     rope<V>,
                   gemm<V>, attn<V>,  attn_multi<V>, lstm_gates<V>, dot<V>,        to_f16<V>,   kv_transpose<V>};
}

}  // namespace cbx::nn_simd
