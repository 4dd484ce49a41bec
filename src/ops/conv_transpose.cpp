// conv_transpose1d (ops/conv.h): Z[(o, k), t] = sum_c w[c, o, k] x[c, t] per chunk of input
// positions, A read transposed through its strides (f32) or w transposed to [(o, k), c] rows in
// scratch (bf16 k-major GEMM), then col2im adds Z into y[o, t * stride - padding + k * dilation].
#include <algorithm>

#include "core/error.h"
#include "ops/conv.h"
#include "ops/conv_detail.h"
#include "ops/matmul.h"

namespace cbx {

using namespace conv_detail;
using nn_detail::check_f32;

namespace {

// w [cin, mk] -> at [mk, cin].
void transpose_weights(ThreadPool& pool, const float* w, int64_t cin, int64_t mk, float* at) {
  run_threads(pool, mk * cin, [&](int ith, int nth) {
    int64_t r0, r1;
    ThreadPool::split(mk, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cin; ++c) at[r * cin + c] = w[c * mk + r];
  });
}

}  // namespace

ConvTranspose1dPacked conv_transpose1d_pack(ThreadPool& pool, const Tensor& w, Isa isa) {
  const char* op = "conv_transpose1d_pack";
  check_f32(op, "w", w);
  CBX_CHECK(w.ndim == 3 && w.is_contiguous(), "%s: w %s must be a contiguous [C_in, C_out, K]", op,
            w.shape_str().c_str());
  ConvTranspose1dPacked pk;
  if (isa != Isa::Avx512 || !bf16_kernels() || prepack_disabled()) return pk;
  const int64_t Cin = w.shape[0], Cout = w.shape[1], K = w.shape[2];
  pk.at = HugePiece(size_t(Cin * Cout * K) * 4);
  transpose_weights(pool, w.ptr<float>(), Cin, Cout * K, reinterpret_cast<float*>(pk.at.data()));
  pk.w = w.ptr<float>();
  pk.cin = Cin;
  pk.cout = Cout;
  pk.k = K;
  return pk;
}

int64_t conv_transpose1d_out_len(int64_t T, int64_t K, const ConvTranspose1dParams& p) {
  return (T - 1) * p.stride - 2 * p.padding + p.dilation * (K - 1) + p.output_padding + 1;
}

void conv_transpose1d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                      const ConvTranspose1dParams& p, Arena* arena, Isa isa) {
  const char* op = "conv_transpose1d";
  check_f32(op, "x", x);
  check_f32(op, "w", w);
  check_f32(op, "y", y);
  CBX_CHECK(x.ndim == 2 && y.ndim == 2, "%s: x %s and y %s must be [C, T]", op, x.shape_str().c_str(),
            y.shape_str().c_str());
  CBX_CHECK(w.ndim == 3 && w.is_contiguous() && w.shape[0] == x.shape[0],
            "%s: w %s must be a contiguous [C_in, C_out, K] with C_in of x %s", op, w.shape_str().c_str(),
            x.shape_str().c_str());
  CBX_CHECK(p.stride >= 1 && p.dilation >= 1 && p.padding >= 0 && p.output_padding >= 0 &&
                p.output_padding < std::max(p.stride, p.dilation),
            "%s: bad params stride %lld padding %lld output_padding %lld dilation %lld", op, (long long)p.stride,
            (long long)p.padding, (long long)p.output_padding, (long long)p.dilation);
  const int64_t Cin = x.shape[0], T = x.shape[1], Cout = w.shape[1], K = w.shape[2];
  const int64_t Tout = conv_transpose1d_out_len(T, K, p);
  CBX_CHECK(Tout >= 1 && y.shape[0] == Cout && y.shape[1] == Tout, "%s: y %s must be [%lld, %lld] for x %s and w %s",
            op, y.shape_str().c_str(), (long long)Cout, (long long)Tout, x.shape_str().c_str(), w.shape_str().c_str());
  const float* bp = check_bias(op, bias, Cout);
  const int64_t xs = row_stride_floats(op, "x", x, 0), ys = row_stride_floats(op, "y", y, 0);
  const NnKernels& k = nn_kernels(isa);
  const int64_t MK = Cout * K;
  const int64_t NT = conv_transpose1d_chunk_cols(MK, T);
  Scratch sc(arena);
  float* Z = sc.get<float>(MK * NT, "conv_transpose1d columns");
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  const int64_t s = p.stride, pad = p.padding, d = p.dilation;
  // y[o, t * s - pad + k * d] += Z[(o, k), t - t0] for output channels [o0, o1) of the chunk
  // of nt input positions at t0.
  auto col2im = [&](int64_t o0, int64_t o1, int64_t t0, int64_t nt) {
    for (int64_t o = o0; o < o1; ++o) {
      float* yr = yp + o * ys;
      for (int64_t kk = 0; kk < K; ++kk) {
        const float* zr = Z + (o * K + kk) * NT;
        const int64_t base = t0 * s - pad + kk * d;
        for (int64_t t = 0; t < nt; ++t) {
          const int64_t to = base + t * s;
          if (to >= 0 && to < Tout) yr[to] += zr[t];
        }
      }
    }
  };
  if (conv_uses_bf16(isa)) {  // A = w transposed to [(o, k), c] rows, then the k-major bf16 GEMM
    const ConvTranspose1dPacked* pk = p.packed && !p.packed->empty() ? p.packed : nullptr;
    if (pk)
      CBX_CHECK(pk->w == w.ptr<float>() && pk->cin == Cin && pk->cout == Cout && pk->k == K,
                "%s: the packed weights (%lld x %lld x %lld) were made from other weights than this call's %s", op,
                (long long)pk->cin, (long long)pk->cout, (long long)pk->k, w.shape_str().c_str());
    const float* At = pk ? reinterpret_cast<const float*>(pk->at.data()) : nullptr;
    if (!pk) {
      float* t = sc.get<float>(MK * Cin, "conv_transpose1d bf16 weights");
      transpose_weights(pool, w.ptr<float>(), Cin, MK, t);
      At = t;
    }
    for (int64_t o = 0; o < Cout; ++o) {
      float v = bp ? bp[o] : 0.f;
      for (int64_t t = 0; t < Tout; ++t) yp[o * ys + t] = v;
    }
    for (int64_t t0 = 0; t0 < T; t0 += NT) {
      const int64_t nt = std::min(NT, T - t0);
      KMajorGemm q;
      q.a = At;
      q.a_rs = Cin;
      q.b = xp + t0;
      q.b_rs = xs;
      q.c = Z;
      q.c_rs = NT;
      q.m = MK;
      q.n = nt;
      q.k = Cin;
      CBX_ASSERT(gemm_bf16_kmajor(pool, q, arena));
      run_threads(pool, MK * nt, [&](int ith, int nth) {
        int64_t o0, o1;
        ThreadPool::split(Cout, ith, nth, &o0, &o1);
        col2im(o0, o1, t0, nt);
      });
    }
    return;
  }
  GemmJob j;
  j.t.a = w.ptr<float>();
  j.t.a_rs = 1;  // A[(o, k), c] = w[c, o, k]
  j.t.a_cs = MK;
  j.t.b_rs = xs;
  j.t.c = Z;
  j.t.c_rs = NT;
  j.t.m = MK;
  j.t.k = Cin;
  run_threads(pool, MK * Cin * T, [&](int ith, int nth) {
    int64_t o0, o1;
    ThreadPool::split(Cout, ith, nth, &o0, &o1);
    for (int64_t o = o0; o < o1; ++o) {
      float v = bp ? bp[o] : 0.f;
      for (int64_t t = 0; t < Tout; ++t) yp[o * ys + t] = v;
    }
    for (int64_t t0 = 0; t0 < T; t0 += NT) {
      const int64_t nt = std::min(NT, T - t0);
      GemmJob jc = j;
      jc.t.b = xp + t0;
      jc.t.n = nt;
      run_job(k, jc, ith, nth);
      if (nth > 1) pool.barrier();
      col2im(o0, o1, t0, nt);
      if (nth > 1) pool.barrier();
    }
  });
}

}  // namespace cbx
