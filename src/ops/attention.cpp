#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/nn.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

constexpr int64_t kMaxHeadDim = 512;

int64_t elem_stride(const char* op, const char* name, const Tensor& t, int dim) {
  const int64_t es = int64_t(type_traits(t.dtype).block_bytes);
  CBX_CHECK(t.stride[dim] % es == 0, "%s: %s %s has a stride not a multiple of its element", op, name,
            t.shape_str().c_str());
  return t.stride[dim] / es;
}

}  // namespace

namespace {

// Everything attention() and attention_part() check and derive once per call.
struct Setup {
  const NnKernels* kern = nullptr;
  const float* q = nullptr;
  float* o = nullptr;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  const float* mbase = nullptr;
  DType kv_dtype = DType::F32;
  size_t kv_es = 0;
  int64_t H = 0, Tq = 0, D = 0, Hkv = 0, Tk = 0, group = 1;
  int64_t q_hs = 0, q_rs = 0, o_hs = 0, o_rs = 0, k_hs = 0, k_rs = 0, v_hs = 0, v_rs = 0, m_hs = 0, m_rs = 0;
  float scale = 1.f;
  bool causal = false;
  int64_t q_offset = 0;
  int64_t qb = 1, nqb = 1, tasks = 0;  // queries per task, query blocks per head, H * nqb
  // attention_part_split: the first segment (k, v above are the second), split = its rows.
  const uint8_t* k0 = nullptr;
  const uint8_t* v0 = nullptr;
  int64_t k0_hs = 0, k0_rs = 0, v0_hs = 0, v0_rs = 0, split = 0;
};

Setup setup(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
            const AttentionParams& p, Isa isa) {
  nn_detail::check_f32(op, "q", q);
  nn_detail::check_f32(op, "out", out);
  CBX_CHECK(k.data && v.data, "%s: k or v is empty", op);
  CBX_CHECK((k.dtype == DType::F32 || k.dtype == DType::F16) && v.dtype == k.dtype,
            "%s: k (%s) and v (%s) must both be f32 or both f16", op, dtype_name(k.dtype), dtype_name(v.dtype));
  CBX_CHECK(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && out.ndim == 3,
            "%s: q %s, k %s, v %s, out %s must be 3-D [heads, T, D]", op, q.shape_str().c_str(), k.shape_str().c_str(),
            v.shape_str().c_str(), out.shape_str().c_str());
  CBX_CHECK(nn_detail::inner_contiguous(k) && nn_detail::inner_contiguous(v), "%s: k %s / v %s must be contiguous in D",
            op, k.shape_str().c_str(), v.shape_str().c_str());
  Setup s;
  s.H = q.shape[0], s.Tq = q.shape[1], s.D = q.shape[2];
  s.Hkv = k.shape[0], s.Tk = k.shape[1];
  const int64_t H = s.H, Tq = s.Tq, D = s.D, Hkv = s.Hkv, Tk = s.Tk;
  CBX_CHECK(same_shape(k, v) && k.shape[2] == D && Hkv >= 1 && H % Hkv == 0,
            "%s: k %s and v %s must be [H_kv, Tk, %lld] with H_kv dividing %lld (q %s)", op, k.shape_str().c_str(),
            v.shape_str().c_str(), (long long)D, (long long)H, q.shape_str().c_str());
  nn_detail::check_same_shape(op, q, "q", out, "out");
  CBX_CHECK(D >= 1 && D <= kMaxHeadDim, "%s: head dim %lld of q %s outside [1, %lld]", op, (long long)D,
            q.shape_str().c_str(), (long long)kMaxHeadDim);
  CBX_CHECK(p.q_offset >= 0, "%s: negative q_offset %lld", op, (long long)p.q_offset);
  if (!mask.empty()) {
    nn_detail::check_f32(op, "mask", mask);
    const bool ok2 = mask.ndim == 2 && mask.shape[0] == Tq && mask.shape[1] == Tk;
    const bool ok3 =
        mask.ndim == 3 && (mask.shape[0] == H || mask.shape[0] == 1) && mask.shape[1] == Tq && mask.shape[2] == Tk;
    CBX_CHECK(ok2 || ok3, "%s: mask %s must be [%lld, %lld] or [%lld, %lld, %lld]", op, mask.shape_str().c_str(),
              (long long)Tq, (long long)Tk, (long long)H, (long long)Tq, (long long)Tk);
    s.mbase = mask.ptr<float>();
    s.m_rs = elem_stride(op, "mask", mask, mask.ndim - 2);
    s.m_hs = ok3 && mask.shape[0] == H ? elem_stride(op, "mask", mask, 0) : 0;
  }
  s.q_hs = elem_stride(op, "q", q, 0), s.q_rs = elem_stride(op, "q", q, 1);
  s.o_hs = elem_stride(op, "out", out, 0), s.o_rs = elem_stride(op, "out", out, 1);
  s.k_hs = elem_stride(op, "k", k, 0), s.k_rs = elem_stride(op, "k", k, 1);
  s.v_hs = elem_stride(op, "v", v, 0), s.v_rs = elem_stride(op, "v", v, 1);
  s.kv_dtype = k.dtype;
  s.kv_es = type_traits(k.dtype).block_bytes;
  s.kern = &nn_kernels(isa);
  s.q = q.ptr<float>();
  s.o = out.ptr<float>();
  s.k = static_cast<const uint8_t*>(k.data);
  s.v = static_cast<const uint8_t*>(v.data);
  s.scale = p.scale != 0.f ? p.scale : float(1.0 / std::sqrt(double(D)));
  s.causal = p.causal;
  s.q_offset = p.q_offset;
  s.group = H / Hkv;
  s.qb = Tq <= 16 ? Tq : 16;  // queries per task
  s.nqb = (Tq + s.qb - 1) / s.qb;
  s.tasks = H * s.nqb;
  return s;
}

// The kernel's view of head h; kt: the K^T copy or nullptr.
AttnHead make_head(const Setup& s, int64_t h, const float* kt, int64_t kt_rs) {
  const int64_t hk = h / s.group;
  AttnHead a;
  a.q = s.q + h * s.q_hs;
  a.q_rs = s.q_rs;
  a.k = s.k + size_t(hk * s.k_hs) * s.kv_es;
  a.k_rs = s.k_rs;
  a.v = s.v + size_t(hk * s.v_hs) * s.kv_es;
  a.v_rs = s.v_rs;
  a.kv_dtype = s.kv_dtype;
  a.o = s.o + h * s.o_hs;
  a.o_rs = s.o_rs;
  a.mask = s.mbase ? s.mbase + h * s.m_hs : nullptr;
  a.mask_rs = s.m_rs;
  a.tq = s.Tq;
  a.tk = s.Tk;
  a.d = s.D;
  a.scale = s.scale;
  a.causal = s.causal;
  a.q_offset = s.q_offset;
  if (kt) {
    a.kt = kt + hk * s.D * kt_rs;
    a.kt_rs = kt_rs;
  }
  if (s.k0) {  // two segments: the first from k0 / v0, then k / v
    a.k2 = a.k;
    a.k2_rs = a.k_rs;
    a.v2 = a.v;
    a.v2_rs = a.v_rs;
    a.k = s.k0 + size_t(hk * s.k0_hs) * s.kv_es;
    a.k_rs = s.k0_rs;
    a.v = s.v0 + size_t(hk * s.v0_hs) * s.kv_es;
    a.v_rs = s.v0_rs;
    a.split = s.split;
  }
  return a;
}

// One task (head h = task / nqb, one block of queries); kt: the K^T copy or nullptr.
void run_task(const Setup& s, int64_t task, const float* kt, int64_t kt_rs, float* scratch) {
  const int64_t h = task / s.nqb, q0 = (task % s.nqb) * s.qb, q1 = q0 + s.qb < s.Tq ? q0 + s.qb : s.Tq;
  s.kern->attn(make_head(s, h, kt, kt_rs), q0, q1, scratch);
}

// attention_part_split's checks and setup of one query (q, its own segment k / v, out)
// whose keys start with the segment k0 / v0.
Setup setup_split(const char* op, const Tensor& q, const Tensor& k0, const Tensor& v0, const Tensor& k, const Tensor& v,
                  const Tensor& out, const AttentionParams& p, int ith, int nth, int64_t h0, int64_t* h1, Isa isa) {
  Setup s = setup(op, q, k, v, Tensor{}, out, p, isa);
  CBX_CHECK(s.Tq == 1, "%s: %lld queries (q %s); one only", op, (long long)s.Tq, q.shape_str().c_str());
  CBX_CHECK(k0.data && v0.data && k0.ndim == 3 && same_shape(k0, v0) && k0.dtype == k.dtype && v0.dtype == k.dtype &&
                k0.shape[0] == s.Hkv && k0.shape[2] == s.D && nn_detail::inner_contiguous(k0) &&
                nn_detail::inner_contiguous(v0),
            "%s: first segment k %s / v %s must be %s [%lld, T0, %lld] like k %s, contiguous in D", op,
            k0.shape_str().c_str(), v0.shape_str().c_str(), dtype_name(k.dtype), (long long)s.Hkv, (long long)s.D,
            k.shape_str().c_str());
  CBX_CHECK(nth >= 1 && ith >= 0 && ith < nth, "%s: thread %d of %d", op, ith, nth);
  if (*h1 < 0) *h1 = s.H;
  CBX_CHECK(h0 >= 0 && h0 <= *h1 && *h1 <= s.H, "%s: heads [%lld, %lld) outside [0, %lld)", op, (long long)h0,
            (long long)*h1, (long long)s.H);
  s.k0 = static_cast<const uint8_t*>(k0.data);
  s.v0 = static_cast<const uint8_t*>(v0.data);
  s.k0_hs = elem_stride(op, "k0", k0, 0), s.k0_rs = elem_stride(op, "k0", k0, 1);
  s.v0_hs = elem_stride(op, "v0", v0, 0), s.v0_rs = elem_stride(op, "v0", v0, 1);
  s.split = k0.shape[1];
  s.Tk += s.split;
  if (s.split == 0) s.k0 = nullptr;  // one segment after all
  return s;
}

}  // namespace

size_t attention_scratch_bytes(int64_t Hkv, int64_t Tk, int64_t D) {
  // Only the SIMD kernels take the K^T copies: none on a CPU whose best ISA is the generic one
  // (e.g. aarch64); otherwise planned for them, whichever ISA runs.
  if (detected_isa() == Isa::Generic) return 0;
  const int64_t kt_rs = (Tk + kAttnKeyTile - 1) / kAttnKeyTile * kAttnKeyTile;
  return size_t(Hkv * D * kt_rs) * 4;
}

void attention(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, Tensor& out,
               const AttentionParams& p, Arena* arena, Isa isa) {
  const Setup s = setup("attention", q, k, v, mask, out, p, isa);
  const int64_t Hkv = s.Hkv, Tk = s.Tk, D = s.D;

  // K^T copies (F32, rows padded to whole key tiles) for the multi-query SIMD path.
  const bool use_kt = s.kern->isa != Isa::Generic && s.Tq >= kAttnPartMaxQueries && Tk > 0;
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
    // Rows r = hk D + c of the copies; each thread its contiguous share, head by head.
    int64_t r0, r1;
    ThreadPool::split(Hkv * D, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1;) {
      const int64_t hk = r / D, c0 = r % D, c1 = std::min(D, c0 + (r1 - r));
      s.kern->kv_transpose(s.k + size_t(hk * s.k_hs) * s.kv_es, s.kv_dtype, s.k_rs, Tk, c0, c1, kt + hk * D * kt_rs,
                           kt_rs);
      r += c1 - c0;
    }
  };

  auto work = [&](int ith, int nth) {
    if (use_kt) {
      transpose_k(ith, nth);
      if (nth > 1) pool.barrier();
    }
    alignas(64) float scratch[attn_scratch_floats(kMaxHeadDim)];
    for (int64_t task = ith; task < s.tasks; task += nth) run_task(s, task, kt, kt_rs, scratch);
  };
  if (s.H * s.Tq * Tk * D < 4 * nn_detail::kParallelMin || pool.size() <= 1 || s.tasks < 2) {
    work(0, 1);
  } else {
    pool.run(work);
  }
  if (arena) arena->rewind(mark);
}

void attention_part(int ith, int nth, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                    Tensor& out, const AttentionParams& p, int64_t h0, int64_t h1, Isa isa) {
  const Setup s = setup("attention_part", q, k, v, mask, out, p, isa);
  CBX_CHECK(s.Tq < kAttnPartMaxQueries, "attention_part: %lld queries (q %s); at most %lld", (long long)s.Tq,
            q.shape_str().c_str(), (long long)(kAttnPartMaxQueries - 1));
  CBX_CHECK(nth >= 1 && ith >= 0 && ith < nth, "attention_part: thread %d of %d", ith, nth);
  if (h1 < 0) h1 = s.H;
  CBX_CHECK(h0 >= 0 && h0 <= h1 && h1 <= s.H, "attention_part: heads [%lld, %lld) outside [0, %lld)", (long long)h0,
            (long long)h1, (long long)s.H);
  alignas(64) float scratch[attn_scratch_floats(kMaxHeadDim)];
  // One query block per head (Tq < 16): task = head.
  for (int64_t h = h0 + ith; h < h1; h += nth) run_task(s, h, nullptr, 0, scratch);
}

void attention_part_split(int ith, int nth, const Tensor& q, const Tensor& k0, const Tensor& v0, const Tensor& k,
                          const Tensor& v, Tensor& out, const AttentionParams& p, int64_t h0, int64_t h1, Isa isa) {
  const Setup s = setup_split("attention_part_split", q, k0, v0, k, v, out, p, ith, nth, h0, &h1, isa);
  alignas(64) float scratch[attn_scratch_floats(kMaxHeadDim)];
  for (int64_t h = h0 + ith; h < h1; h += nth) run_task(s, h, nullptr, 0, scratch);
}

void attention_part_split_multi(int ith, int nth, const Tensor& k0, const Tensor& v0, const AttnSplitQuery* qs, int nq,
                                const AttentionParams& p, int64_t h0, int64_t h1, Isa isa) {
  const char* op = "attention_part_split_multi";
  CBX_CHECK(nq >= 1 && nq <= kAttnSplitMaxQueries, "%s: %d queries; 1 to %d", op, nq, kAttnSplitMaxQueries);
  // Per thread, made once: a local array of kAttnSplitMaxQueries Setups and AttnHeads (27 KB
  // of default member initializers) was filled on every call, and a decode step makes one
  // call a head. Only the first nq entries are used, each written before it is read.
  thread_local Setup s[kAttnSplitMaxQueries];
  thread_local AttnHead heads[kAttnSplitMaxQueries];
  int64_t hend = h1;
  for (int r = 0; r < nq; ++r) {
    const AttnSplitQuery& a = qs[r];
    CBX_CHECK(a.q && a.k && a.v && a.out, "%s: query %d lacks its q, k, v or out", op, r);
    AttentionParams pr = p;
    pr.q_offset = a.q_offset;
    int64_t e = h1;
    s[r] = setup_split(op, *a.q, k0, v0, *a.k, *a.v, *a.out, pr, ith, nth, h0, &e, isa);
    CBX_CHECK(r == 0 || s[r].H == s[0].H, "%s: query %d has %lld heads (q %s), query 0 %lld", op, r, (long long)s[r].H,
              a.q->shape_str().c_str(), (long long)s[0].H);
    hend = e;
  }
  const NnKernels& kern = *s[0].kern;
  alignas(64) float scratch[std::max(attn_scratch_floats(kMaxHeadDim), attn_multi_scratch_floats(kMaxHeadDim))];
  for (int64_t h = h0 + ith; h < hend; h += nth) {
    if (nq == 1 || s[0].split == 0) {  // nothing shared: the one-query kernel per query
      for (int r = 0; r < nq; ++r) run_task(s[r], h, nullptr, 0, scratch);
      continue;
    }
    for (int r = 0; r < nq; ++r) heads[r] = make_head(s[r], h, nullptr, 0);
    kern.attn_multi(heads, nq, scratch);
  }
}

}  // namespace cbx
