// Fused attention: front-end (CBX_DEBUG_FORCE_ISA) vs the generic kernel vs a double-precision
// reference that materialises the scores. Covers GQA, causal with a decode offset over a
// KV-cache slice, F16 K/V, broadcast and per-head masks, fully masked rows, [T, H*D]
// layouts through transposed views, head dims that are not a multiple of the lane width.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/nn.h"
#include "nn_test_util.h"
#include "ops/attention.h"

using namespace cbx;
using nn_test::Buf;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Each output is a convex combination of V rows (|v| <= 1): tolerance 1e-5 absolute
// (f32 dot products of length D, exp at ~2 ulp, online rescaling).
constexpr double kAttnTol = 1e-5;

float getf(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data) + i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2];
  if (t.dtype == DType::F16) return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
  return *reinterpret_cast<const float*>(p);
}

struct Case {
  int64_t H, Hkv, Tq, Tk, D;
  bool causal;
  int64_t q_offset;
  DType kv;
  int mask_kind;  // 0 none, 1 [Tq, Tk], 2 [H, Tq, Tk]
  bool bshd;      // q/out given as transposed views of [T, H*D]
};

void run_case(const Case& c, uint32_t seed) {
  const int64_t Tcap = c.Tk + 9;  // KV cache capacity larger than Tk
  Buf qb({c.H, c.Tq, c.D}, seed, -1.5f, 1.5f);
  Buf qt({c.Tq, c.H, c.D});  // [T, H, D] copy for the bshd layout
  Buf kf({c.Hkv, Tcap, c.D}, seed + 1), vf({c.Hkv, Tcap, c.D}, seed + 2);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) kh[i] = f32_to_f16(kf.v[i]), vh[i] = f32_to_f16(vf.v[i]);
  Tensor kc, vc;
  if (c.kv == DType::F16) {
    kc = make_tensor(DType::F16, {c.Hkv, Tcap, c.D}, kh.data(), kh.size() * 2);
    vc = make_tensor(DType::F16, {c.Hkv, Tcap, c.D}, vh.data(), vh.size() * 2);
  } else {
    kc = kf.t;
    vc = vf.t;
  }
  Tensor k = slice(kc, 1, 0, c.Tk), v = slice(vc, 1, 0, c.Tk);
  const float ninf = -std::numeric_limits<float>::infinity();
  Buf mask2({c.Tq, c.Tk}, seed + 3, -2, 2), mask3({c.H, c.Tq, c.Tk}, seed + 4, -2, 2);
  for (int64_t j = 0; j < c.Tk; j += 3) mask2.v[size_t(j)] = ninf;  // row 0 partly masked
  if (c.Tq > 1)
    for (int64_t j = 0; j < c.Tk; ++j) mask2.v[size_t(c.Tk + j)] = ninf;  // row 1 fully masked
  Tensor mask = c.mask_kind == 1 ? mask2.t : c.mask_kind == 2 ? mask3.t : Tensor{};

  Buf ob({c.H, c.Tq, c.D}), gb({c.H, c.Tq, c.D}), ot({c.Tq, c.H, c.D});
  AttentionParams p;
  p.causal = c.causal;
  p.q_offset = c.q_offset;
  Tensor q = qb.t, out = ob.t;
  if (c.bshd) {
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.Tq; ++t)
        for (int64_t d = 0; d < c.D; ++d)
          qt.v[size_t((t * c.H + h) * c.D + d)] = qb.v[size_t((h * c.Tq + t) * c.D + d)];
    q = transpose(qt.t, 0, 1);
    out = transpose(ot.t, 0, 1);
  }
  Arena arena(16 << 20);
  attention(pool(), q, k, v, mask, out, p, &arena);
  EXPECT_EQ(arena.used(), 0u);
  attention(pool(), q, k, v, mask, gb.t, p, nullptr, Isa::Generic);

  const double scale = 1.0 / std::sqrt(double(c.D));
  double worst = 0, worst_g = 0;
  std::vector<double> s(size_t(c.Tk));
  for (int64_t h = 0; h < c.H; ++h) {
    const int64_t hk = h / (c.H / c.Hkv);
    for (int64_t i = 0; i < c.Tq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.Tk; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < c.D; ++d) acc += double(qb.v[size_t((h * c.Tq + i) * c.D + d)]) * getf(k, hk, j, d);
        acc *= scale;
        if (c.mask_kind == 1) acc += mask2.v[size_t(i * c.Tk + j)];
        if (c.mask_kind == 2) acc += mask3.v[size_t((h * c.Tq + i) * c.Tk + j)];
        if (c.causal && j > c.q_offset + i) acc = -INFINITY;
        s[size_t(j)] = acc;
        mx = std::max(mx, acc);
      }
      double sum = 0;
      for (int64_t j = 0; j < c.Tk; ++j) sum += mx == -INFINITY ? 0 : std::exp(s[size_t(j)] - mx);
      for (int64_t d = 0; d < c.D; ++d) {
        double o = 0;
        if (mx != -INFINITY)
          for (int64_t j = 0; j < c.Tk; ++j) o += std::exp(s[size_t(j)] - mx) / sum * getf(v, hk, j, d);
        float got = getf(out, h, i, d);
        worst = std::max(worst, std::fabs(got - o));
        worst_g = std::max(worst_g, std::fabs(double(got) - gb.v[size_t((h * c.Tq + i) * c.D + d)]));
      }
    }
  }
  EXPECT_LE(worst, kAttnTol) << "vs reference H " << c.H << " Tq " << c.Tq << " Tk " << c.Tk << " D " << c.D;
  EXPECT_LE(worst_g, kAttnTol) << "vs generic H " << c.H << " Tq " << c.Tq << " Tk " << c.Tk << " D " << c.D;
}

}  // namespace

TEST(NnAttention, PrefillDecodeMasksLayouts) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const Case cases[] = {
      {4, 2, 37, 37, 64, true, 0, DType::F32, 0, false},        // GQA causal prefill
      {16, 16, 1, 1400, 64, true, 1399, DType::F16, 0, false},  // decode over a KV-cache slice
      {2, 1, 1, 300, 64, true, 299, DType::F32, 0, false},      // decode, MQA
      {3, 3, 5, 70, 36, false, 0, DType::F32, 1, false},        // broadcast mask, odd D
      {2, 2, 9, 130, 20, false, 0, DType::F16, 2, true},        // per-head mask, [T, H*D] views
      {2, 1, 7, 20, 64, true, 13, DType::F32, 1, true},         // chunked decode with offset
      {2, 2, 150, 150, 64, true, 0, DType::F32, 0, false},      // threaded, several key tiles
      {1, 1, 3, 5, 8, true, 0, DType::F32, 0, false},           // tiny
      // One query (the single-query kernel): odd D, masks, Tk below one key group,
      // causal limit inside the slice, D below the lane width.
      {3, 3, 1, 70, 36, false, 0, DType::F16, 1, false},
      {2, 2, 1, 13, 20, false, 0, DType::F32, 2, true},
      {4, 2, 1, 200, 64, true, 150, DType::F16, 0, false},
      {1, 1, 1, 130, 8, true, 129, DType::F32, 0, false},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) run_case(c, seed += 10);
}

// The K^T copy of the multi-query path: every ISA's kv_transpose gives the generic kernel's
// bits (the exact widening), zero padding past tk, only the asked dims written; key counts
// around the lane widths, rows wider than the dims, dims above the SIMD tile width (128).
TEST(NnAttention, KvTransposeMatchesGenericOnEveryIsa) {
  struct Shape {
    int64_t tk, d, k_rs, c0, c1;
  };
  const Shape shapes[] = {{1, 8, 8, 0, 8},      {7, 64, 64, 0, 64},     {17, 64, 1024, 0, 64},
                          {130, 20, 40, 3, 17}, {64, 136, 136, 0, 136}, {33, 200, 256, 70, 190}};
  uint32_t seed = 5;
  for (const Shape& sh : shapes)
    for (DType dt : {DType::F32, DType::F16}) {
      Buf src({sh.tk, sh.k_rs}, seed += 3, -3.f, 3.f);
      std::vector<uint16_t> h(src.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(src.v[i]);
      const void* k = dt == DType::F16 ? static_cast<const void*>(h.data()) : src.v.data();
      const int64_t kt_rs = (sh.tk + 63) / 64 * 64;
      std::vector<float> want(size_t(sh.d * kt_rs), -7.f);
      nn_kernels_generic().kv_transpose(k, dt, sh.k_rs, sh.tk, sh.c0, sh.c1, want.data(), kt_rs);
      for (int64_t c = 0; c < sh.d; ++c)
        for (int64_t j = 0; j < kt_rs; ++j) {
          const float e = c < sh.c0 || c >= sh.c1 ? -7.f
                          : j >= sh.tk            ? 0.f
                          : dt == DType::F16      ? f16_to_f32(h[size_t(j * sh.k_rs + c)])
                                                  : src.v[size_t(j * sh.k_rs + c)];
          ASSERT_EQ(want[size_t(c * kt_rs + j)], e) << "generic c " << c << " j " << j;
        }
      for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        if (int(isa) > int(detected_isa())) continue;
        std::vector<float> got(want.size(), -7.f);
        nn_kernels(isa).kv_transpose(k, dt, sh.k_rs, sh.tk, sh.c0, sh.c1, got.data(), kt_rs);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
            << isa_name(isa) << " " << dtype_name(dt) << " tk " << sh.tk << " d " << sh.d << " dims [" << sh.c0 << ", "
            << sh.c1 << ")";
      }
    }
}

TEST(NnAttention, ValidationErrors) {
  Buf q({4, 3, 8}), k({3, 5, 8}), v({3, 5, 8}), o({4, 3, 8});
  try {
    attention(pool(), q.t, k.t, v.t, Tensor{}, o.t, AttentionParams{});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("attention"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5, 8]"), std::string::npos) << m;
  }
  Buf k2({2, 5, 8}), v2({2, 5, 8}), badmask({3, 4});
  EXPECT_THROW(attention(pool(), q.t, k2.t, v2.t, badmask.t, o.t, AttentionParams{}), Error);
  std::vector<uint16_t> h(80);
  Tensor vh = make_tensor(DType::F16, {2, 5, 8}, h.data(), h.size() * 2);
  EXPECT_THROW(attention(pool(), q.t, k2.t, vh, Tensor{}, o.t, AttentionParams{}), Error);
}

// attention_part_split (a shared voice prefix + a sequence's own keys in two buffers) gives
// the bits of attention_part over one cache holding both, for split points inside and at the
// edges of a 64-key tile, f32 and f16, head dims 64 (the unrolled kernel) and 40, GQA.
TEST(NnAttention, SplitSegmentsMatchOneCacheBitwise) {
  for (DType kv : {DType::F32, DType::F16})
    for (int64_t D : {64, 40})
      for (int64_t split : {1, 37, 64, 100, 130}) {
        const int64_t H = 4, Hkv = 2, Tk = 150, own = Tk - split, es = kv == DType::F16 ? 2 : 4;
        Buf qb({H, 1, D}, uint32_t(split + D), -1.5f, 1.5f);
        Buf kf({Hkv, Tk, D}, uint32_t(split + 1)), vf({Hkv, Tk, D}, uint32_t(split + 2));
        // One cache [Hkv, Tk, D]; the same keys as a prefix [Hkv, split, D] and an own buffer
        // [Hkv, own + 5, D] (capacity above its rows, as a KV slot).
        std::vector<uint8_t> one(size_t(Hkv * Tk * D * es)), pre(size_t(Hkv * split * D * es)),
            mine(size_t(Hkv * (own + 5) * D * es), 0);
        auto fill = [&](const Buf& src, std::vector<uint8_t>& o, std::vector<uint8_t>& p, std::vector<uint8_t>& m) {
          for (int64_t h = 0; h < Hkv; ++h)
            for (int64_t j = 0; j < Tk; ++j)
              for (int64_t c = 0; c < D; ++c) {
                const float x = src.v[size_t((h * Tk + j) * D + c)];
                uint8_t* dst[3] = {o.data() + ((h * Tk + j) * D + c) * es,
                                   j < split ? p.data() + ((h * split + j) * D + c) * es : nullptr,
                                   j >= split ? m.data() + ((h * (own + 5) + j - split) * D + c) * es : nullptr};
                for (uint8_t* d : dst) {
                  if (!d) continue;
                  if (kv == DType::F16) {
                    const uint16_t b = f32_to_f16(x);
                    std::memcpy(d, &b, 2);
                  } else {
                    std::memcpy(d, &x, 4);
                  }
                }
              }
        };
        std::vector<uint8_t> onev(one.size()), prev(pre.size()), minev(mine.size(), 0);
        fill(kf, one, pre, mine);
        fill(vf, onev, prev, minev);
        const Tensor k1 = make_tensor(kv, {Hkv, Tk, D}, one.data(), one.size());
        const Tensor v1 = make_tensor(kv, {Hkv, Tk, D}, onev.data(), onev.size());
        const Tensor k0 = make_tensor(kv, {Hkv, split, D}, pre.data(), pre.size());
        const Tensor v0 = make_tensor(kv, {Hkv, split, D}, prev.data(), prev.size());
        const Tensor kslot = make_tensor(kv, {Hkv, own + 5, D}, mine.data(), mine.size());
        const Tensor vslot = make_tensor(kv, {Hkv, own + 5, D}, minev.data(), minev.size());
        const Tensor km = slice(kslot, 1, 0, own), vm = slice(vslot, 1, 0, own);
        Buf oa({H, 1, D}), ob({H, 1, D});
        AttentionParams p;
        p.causal = true;
        p.q_offset = Tk - 1;
        attention_part(0, 1, qb.t, k1, v1, Tensor{}, oa.t, p);
        attention_part_split(0, 1, qb.t, k0, v0, km, vm, ob.t, p);
        for (size_t i = 0; i < oa.size(); ++i)
          ASSERT_EQ(oa.v[i], ob.v[i]) << dtype_name(kv) << " D " << D << " split " << split << " at " << i;
      }
}

// attention_part_split_multi (several sequences' single queries against one shared prefix,
// each with its own keys after it) gives every query the bits attention_part_split gives it
// alone, on every ISA the CPU runs: 1 to 8 queries (groups of 1 to 4 in the kernel), prefix
// lengths inside / at the edges of a 64-key tile, own segments of different lengths (1
// included), causal ends past the keys and inside the prefix, f32 and f16, D 64 and 40.
TEST(NnAttention, SplitMultiMatchesEachQueryAloneBitwise) {
  const int64_t H = 4, Hkv = 2;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512})
    for (DType kv : {DType::F32, DType::F16})
      for (int64_t D : {64, 40})
        for (int64_t P : {1, 37, 64, 130, 375})
          for (int nq = 1; nq <= 8; ++nq) {
            const size_t es = kv == DType::F16 ? 2 : 4;
            auto fill = [&](std::vector<uint8_t>& b, int64_t rows, uint32_t seed) {
              Buf src({Hkv, rows, D}, seed);
              b.assign(src.size() * es, 0);
              for (size_t i = 0; i < src.size(); ++i) {
                if (kv == DType::F16) {
                  const uint16_t h = f32_to_f16(src.v[i]);
                  std::memcpy(b.data() + i * 2, &h, 2);
                } else {
                  std::memcpy(b.data() + i * 4, &src.v[i], 4);
                }
              }
              return make_tensor(kv, {Hkv, rows, D}, b.data(), b.size());
            };
            const uint32_t seed = uint32_t(P * 131 + D * 7 + nq);
            std::vector<uint8_t> kp, vp;
            const Tensor k0 = fill(kp, P, seed), v0 = fill(vp, P, seed + 1);
            std::vector<std::vector<uint8_t>> kb(static_cast<size_t>(nq)), vb(static_cast<size_t>(nq));
            std::vector<Tensor> ks(static_cast<size_t>(nq)), vs(static_cast<size_t>(nq));
            std::vector<Buf> qb, oa, ob;  // reserved: each Buf's tensor points into it
            qb.reserve(size_t(nq)), oa.reserve(size_t(nq)), ob.reserve(size_t(nq));
            std::vector<AttnSplitQuery> qs(static_cast<size_t>(nq));
            for (int r = 0; r < nq; ++r) {
              const int64_t own = r == 0 ? 1 : 1 + (r * 29 + P) % 97;
              // A slot with room past its rows, as a KV cache holds.
              const Tensor kslot = fill(kb[size_t(r)], own + 3, seed + 10 + uint32_t(r));
              const Tensor vslot = fill(vb[size_t(r)], own + 3, seed + 50 + uint32_t(r));
              ks[size_t(r)] = slice(kslot, 1, 0, own);
              vs[size_t(r)] = slice(vslot, 1, 0, own);
              qb.emplace_back(std::initializer_list<int64_t>{H, 1, D}, seed + 100 + uint32_t(r), -1.5f, 1.5f);
              oa.emplace_back(std::initializer_list<int64_t>{H, 1, D});
              ob.emplace_back(std::initializer_list<int64_t>{H, 1, D});
              int64_t qo = P + own - 1;    // the decode step: the last key is the query's own
              if (r % 4 == 2) qo += 5;     // the causal end past the keys
              if (r % 4 == 3) qo = P / 2;  // the causal end inside the prefix
              qs[size_t(r)].q_offset = qo;
            }
            for (int r = 0; r < nq; ++r) {
              qs[size_t(r)].q = &qb[size_t(r)].t;
              qs[size_t(r)].k = &ks[size_t(r)];
              qs[size_t(r)].v = &vs[size_t(r)];
              qs[size_t(r)].out = &ob[size_t(r)].t;
            }
            AttentionParams p;
            p.causal = true;
            for (int r = 0; r < nq; ++r) {
              p.q_offset = qs[size_t(r)].q_offset;
              attention_part_split(0, 1, qb[size_t(r)].t, k0, v0, ks[size_t(r)], vs[size_t(r)], oa[size_t(r)].t, p, 0,
                                   -1, isa);
            }
            // Two threads' halves of the heads, as a decode step splits them.
            for (int ith = 0; ith < 2; ++ith) attention_part_split_multi(ith, 2, k0, v0, qs.data(), nq, p, 0, -1, isa);
            for (int r = 0; r < nq; ++r)
              for (size_t i = 0; i < oa[size_t(r)].size(); ++i)
                ASSERT_EQ(oa[size_t(r)].v[i], ob[size_t(r)].v[i])
                    << isa_name(isa) << " " << dtype_name(kv) << " D " << D << " P " << P << " nq " << nq << " query "
                    << r << " at " << i;
          }
}

TEST(NnAttention, SplitMultiRejectsBadInput) {
  Buf q({2, 1, 8}, 1), o({2, 1, 8}), k0({2, 5, 8}, 2), v0({2, 5, 8}, 3), k({2, 3, 8}, 4), v({2, 3, 8}, 5);
  Buf kd({2, 3, 6}, 6), q2({2, 2, 8}, 7);
  AttnSplitQuery a{&q.t, &k.t, &v.t, &o.t, 7};
  AttentionParams p;
  p.causal = true;
  EXPECT_NO_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, &a, 1, p));
  EXPECT_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, &a, 0, p), Error);  // no query
  AttnSplitQuery bad[2] = {a, a};
  bad[1].k = &kd.t;  // own keys' D differs
  EXPECT_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, bad, 2, p), Error);
  bad[1] = a;
  bad[1].q = &q2.t;  // two queries in one
  EXPECT_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, bad, 2, p), Error);
  bad[1] = a;
  bad[1].out = nullptr;
  EXPECT_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, bad, 2, p), Error);
  EXPECT_THROW(attention_part_split_multi(0, 1, kd.t, v0.t, &a, 1, p), Error);        // prefix D differs
  EXPECT_THROW(attention_part_split_multi(0, 1, k0.t, v0.t, &a, 1, p, 0, 3), Error);  // heads past H
}
