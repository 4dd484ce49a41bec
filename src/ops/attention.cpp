#include "ops/attention.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/nn.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

constexpr int64_t kMaxHeadDim = 512;

int64_t elem_stride(const char* op, const char* name, const Tensor& t, int dim) {
  const int64_t es = int64_t(type_traits(t.dtype).block_bytes);
  CBX_CHECK(t.stride[dim] % es == 0, "%s: %s %s has a stride not a multiple of its element", op,
            name, t.shape_str().c_str());
  return t.stride[dim] / es;
}

}  // namespace

void attention(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& mask, Tensor& out, const AttentionParams& p, Arena* arena,
               Isa isa) {
  const char* op = "attention";
  nn_detail::check_f32(op, "q", q);
  nn_detail::check_f32(op, "out", out);
  CBX_CHECK(k.data && v.data, "%s: k or v is empty", op);
  CBX_CHECK((k.dtype == DType::F32 || k.dtype == DType::F16) && v.dtype == k.dtype,
            "%s: k (%s) and v (%s) must both be f32 or both f16", op, dtype_name(k.dtype),
            dtype_name(v.dtype));
  CBX_CHECK(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && out.ndim == 3,
            "%s: q %s, k %s, v %s, out %s must be 3-D [heads, T, D]", op, q.shape_str().c_str(),
            k.shape_str().c_str(), v.shape_str().c_str(), out.shape_str().c_str());
  CBX_CHECK(nn_detail::inner_contiguous(k) && nn_detail::inner_contiguous(v),
            "%s: k %s / v %s must be contiguous in D", op, k.shape_str().c_str(),
            v.shape_str().c_str());
  const int64_t H = q.shape[0], Tq = q.shape[1], D = q.shape[2];
  const int64_t Hkv = k.shape[0], Tk = k.shape[1];
  CBX_CHECK(same_shape(k, v) && k.shape[2] == D && Hkv >= 1 && H % Hkv == 0,
            "%s: k %s and v %s must be [H_kv, Tk, %lld] with H_kv dividing %lld (q %s)", op,
            k.shape_str().c_str(), v.shape_str().c_str(), (long long)D, (long long)H,
            q.shape_str().c_str());
  nn_detail::check_same_shape(op, q, "q", out, "out");
  CBX_CHECK(D >= 1 && D <= kMaxHeadDim, "%s: head dim %lld of q %s outside [1, %lld]", op,
            (long long)D, q.shape_str().c_str(), (long long)kMaxHeadDim);
  CBX_CHECK(p.q_offset >= 0, "%s: negative q_offset %lld", op, (long long)p.q_offset);
  const float* mbase = nullptr;
  int64_t m_hs = 0, m_rs = 0;
  if (!mask.empty()) {
    nn_detail::check_f32(op, "mask", mask);
    const bool ok2 = mask.ndim == 2 && mask.shape[0] == Tq && mask.shape[1] == Tk;
    const bool ok3 = mask.ndim == 3 && (mask.shape[0] == H || mask.shape[0] == 1) &&
                     mask.shape[1] == Tq && mask.shape[2] == Tk;
    CBX_CHECK(ok2 || ok3, "%s: mask %s must be [%lld, %lld] or [%lld, %lld, %lld]", op,
              mask.shape_str().c_str(), (long long)Tq, (long long)Tk, (long long)H, (long long)Tq,
              (long long)Tk);
    mbase = mask.ptr<float>();
    m_rs = elem_stride(op, "mask", mask, mask.ndim - 2);
    m_hs = ok3 && mask.shape[0] == H ? elem_stride(op, "mask", mask, 0) : 0;
  }
  const int64_t q_hs = elem_stride(op, "q", q, 0), q_rs = elem_stride(op, "q", q, 1);
  const int64_t o_hs = elem_stride(op, "out", out, 0), o_rs = elem_stride(op, "out", out, 1);
  const int64_t k_hs = elem_stride(op, "k", k, 0), k_rs = elem_stride(op, "k", k, 1);
  const int64_t v_hs = elem_stride(op, "v", v, 0), v_rs = elem_stride(op, "v", v, 1);
  const size_t kv_es = type_traits(k.dtype).block_bytes;
  const NnKernels& kern = nn_kernels(isa);
  const float scale = p.scale != 0.f ? p.scale : float(1.0 / std::sqrt(double(D)));
  const int64_t group = H / Hkv;
  const int64_t qb = Tq <= 16 ? Tq : 16;  // queries per task
  const int64_t nqb = (Tq + qb - 1) / qb, tasks = H * nqb;

  // K^T copies (F32, rows padded to whole key tiles) for the multi-query SIMD path.
  const bool use_kt = kern.isa != Isa::Generic && Tq >= 8 && Tk > 0;
  const int64_t kt_rs = (Tk + kAttnKeyTile - 1) / kAttnKeyTile * kAttnKeyTile;
  std::vector<float> heap;
  const size_t mark = arena ? arena->mark() : 0;
  float* kt = nullptr;
  if (use_kt) {
    const int64_t n = Hkv * D * kt_rs;
    if (arena) {
      kt = static_cast<float*>(arena->alloc_bytes(size_t(n) * 4, 64, "attention K^T"));
    } else {
      heap.resize(size_t(n));
      kt = heap.data();
    }
  }
  auto transpose_k = [&](int ith, int nth) {
    const int64_t rows = Hkv * D;
    int64_t r0, r1;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t hk = r / D, d = r % D;
      float* dst = kt + r * kt_rs;
      const uint8_t* src = static_cast<const uint8_t*>(k.data) + size_t(hk * k_hs + d) * kv_es;
      if (k.dtype == DType::F16) {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(src);
        for (int64_t j = 0; j < Tk; ++j) dst[j] = f16_to_f32(s16[j * k_rs]);
      } else {
        const float* s32 = reinterpret_cast<const float*>(src);
        for (int64_t j = 0; j < Tk; ++j) dst[j] = s32[j * k_rs];
      }
      for (int64_t j = Tk; j < kt_rs; ++j) dst[j] = 0.f;
    }
  };

  auto work = [&](int ith, int nth) {
    if (use_kt) {
      transpose_k(ith, nth);
      if (nth > 1) pool.barrier();
    }
    alignas(64) float scratch[attn_scratch_floats(kMaxHeadDim)];
    for (int64_t task = ith; task < tasks; task += nth) {
      const int64_t h = task / nqb, q0 = (task % nqb) * qb, q1 = q0 + qb < Tq ? q0 + qb : Tq;
      const int64_t hk = h / group;
      AttnHead a;
      a.q = q.ptr<float>() + h * q_hs;
      a.q_rs = q_rs;
      a.k = static_cast<const uint8_t*>(k.data) + size_t(hk * k_hs) * kv_es;
      a.k_rs = k_rs;
      a.v = static_cast<const uint8_t*>(v.data) + size_t(hk * v_hs) * kv_es;
      a.v_rs = v_rs;
      a.kv_dtype = k.dtype;
      a.o = out.ptr<float>() + h * o_hs;
      a.o_rs = o_rs;
      a.mask = mbase ? mbase + h * m_hs : nullptr;
      a.mask_rs = m_rs;
      a.tq = Tq;
      a.tk = Tk;
      a.d = D;
      a.scale = scale;
      a.causal = p.causal;
      a.q_offset = p.q_offset;
      if (use_kt) {
        a.kt = kt + hk * D * kt_rs;
        a.kt_rs = kt_rs;
      }
      kern.attn(a, q0, q1, scratch);
    }
  };
  if (H * Tq * Tk * D < 4 * nn_detail::kParallelMin || pool.size() <= 1 || tasks < 2) {
    work(0, 1);
  } else {
    pool.run(work);
  }
  if (arena) arena->rewind(mark);
}

}  // namespace cbx
