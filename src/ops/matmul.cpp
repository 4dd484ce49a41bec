#include "ops/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "ops/matmul_detail.h"

namespace cbx {
namespace matmul_detail {

// GEMM cache blocking: one packed weight panel [mr, kKc] (32 KB for f32) stays in L1
// while the x slices of every n-tile ([N, kKc], L2) stream past it.
constexpr int64_t kKc = 256;  // multiple of 32 (quant blocks and AMX k-steps)

namespace {
size_t align64(size_t b) { return (b + 63) & ~size_t(63); }
}  // namespace

// Row stride (bytes) of t seen as [rows(), cols()]; requires the leading dims to collapse.
int64_t row_stride(const Tensor& t, const char* what, const char* name) {
  CBX_CHECK(t.ndim >= 1, "%s: %s is a scalar", what, name);
  if (t.ndim == 1) return int64_t(t.row_bytes());
  for (int i = 0; i + 2 < t.ndim; ++i)
    CBX_CHECK(t.shape[i] <= 1 || t.stride[i] == t.stride[i + 1] * t.shape[i + 1],
              "%s: %s %s has leading dims that do not collapse to one row stride", what, name, t.shape_str().c_str());
  return t.stride[t.ndim - 2];
}

// Scratch from the arena (caller restores the mark) or from a grow-only per-thread buffer.
uint8_t* get_scratch(Arena* arena, size_t bytes) {
  if (arena) return static_cast<uint8_t*>(arena->alloc_bytes(bytes, 64, "matmul scratch"));
  struct Buf {
    uint8_t* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  if (buf.n < bytes) {
    std::free(buf.p);
    size_t n = align64(std::max(bytes, buf.n * 3 / 2));
    buf.p = static_cast<uint8_t*>(std::aligned_alloc(64, n));
    CBX_CHECK(buf.p, "matmul: cannot allocate %zu bytes of scratch", n);
    buf.n = n;
  }
  return buf.p;
}

struct Problem {
  const uint8_t* w;
  size_t ws;
  int slot;
  int64_t m, k, n;
  const uint8_t* x;
  size_t xs;
  float* y;
  int64_t ldy;  // floats
  const float* bias;
};

void add_bias(const Problem& p, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
  if (!p.bias) return;
  for (int64_t n = n0; n < n1; ++n) {
    float* yr = p.y + n * p.ldy;
    for (int64_t m = m0; m < m1; ++m) yr[m] += p.bias[m];
  }
}

size_t gemm_x_bytes(const GemmKernel& g, int64_t n, int64_t k) {
  int64_t kp = (k + g.k_pack - 1) / g.k_pack * g.k_pack;
  return size_t((n + g.nr - 1) / g.nr) * align64(size_t(kp) * g.nr * g.elem_bytes);
}
size_t gemm_w_bytes(const GemmKernel& g, int64_t k, int64_t kc_blk) {
  int64_t kc = std::min(k, kc_blk);
  kc = (kc + g.k_pack - 1) / g.k_pack * g.k_pack;
  return align64(size_t(kc) * g.mr * g.elem_bytes);
}

// The precision-dependent choice of GEMM kernel and k block for weight slot `slot`.
struct GemmChoice {
  const GemmKernel* g;
  int64_t kc;
};
const Bf16Gemm* bf16_for(const MatmulKernels& kern) {
  return kern.isa == Isa::Avx512 ? matmul_bf16_gemm_avx512(kern) : nullptr;
}
GemmChoice choose_gemm(const MatmulKernels& kern, int slot, GemmPrecision prec) {
  if (prec == GemmPrecision::BF16 || prec == GemmPrecision::Int8)  // Int8: packed weights only
    if (const Bf16Gemm* b = bf16_for(kern)) return {&b->gemm[slot], b->kc};
  return {&kern.gemm[slot], kKc};
}

// Packed GEMM y[n, m] = x[n, :] . w[m, :] over the pool. pack_x(t, dst) packs activation
// tile t (rows t * nr ...); pack_w(t, k0, kc, dst) packs weight tile t, columns
// [k0, k0 + kc); epilogue(n0, n1, m0, m1) runs on each thread's finished region.
template <class PackX, class PackW, class Epi>
void run_packed(const GemmKernel& g, int64_t kc_blk, ThreadPool& pool, int64_t n, int64_t m, int64_t k, float* y,
                int64_t ldy, uint8_t* scratch, PackX&& pack_x, PackW&& pack_w, Epi&& epilogue) {
  const int nr = g.nr, mr = g.mr, kpk = g.k_pack, eb = g.elem_bytes;
  const int64_t kp = (k + kpk - 1) / kpk * kpk;
  const size_t xpanel = align64(size_t(kp) * nr * eb);
  const int64_t n_tiles = (n + nr - 1) / nr, m_tiles = (m + mr - 1) / mr;
  uint8_t* xpack = scratch;
  uint8_t* wpack0 = scratch + gemm_x_bytes(g, n, k);
  const size_t wbytes = gemm_w_bytes(g, k, kc_blk);

  pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(n_tiles, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) pack_x(t, xpack + t * xpanel);
    pool.barrier();

    // Split the weight tiles across threads, or the activation tiles when M is small.
    int64_t mt0 = 0, mt1 = m_tiles, nt0 = 0, nt1 = n_tiles;
    if (m_tiles >= 2 * nth || n_tiles < nth)
      ThreadPool::split(m_tiles, ith, nth, &mt0, &mt1);
    else
      ThreadPool::split(n_tiles, ith, nth, &nt0, &nt1);
    // k blocks outermost: the x slices of all n-tiles ([N, kc], L2) are reused by every
    // weight panel; one packed weight panel ([mr, kc], L1/L2) is reused by every n-tile.
    uint8_t* wpack = wpack0 + size_t(ith) * wbytes;
    for (int64_t k0 = 0; k0 < k; k0 += kc_blk) {
      const int64_t kc = std::min(kc_blk, k - k0);
      const int64_t kcp = (kc + kpk - 1) / kpk * kpk;
      for (int64_t t = mt0; t < mt1; ++t) {
        const int mcols = int(std::min<int64_t>(mr, m - t * mr));
        pack_w(t, mcols, k0, kc, wpack);
        for (int64_t nt = nt0; nt < nt1; ++nt)
          g.tile(xpack + nt * xpanel + size_t(k0) * nr * eb, wpack, kcp, y + nt * nr * ldy + t * mr, ldy,
                 int(std::min<int64_t>(nr, n - nt * nr)), mcols, k0 > 0);
      }
    }
    epilogue(nt0 * nr, std::min(n, nt1 * nr), mt0 * mr, std::min(m, mt1 * mr));
  });
}

void run_gemm(const GemmChoice& c, ThreadPool& pool, const Problem& p, uint8_t* scratch) {
  const GemmKernel& g = *c.g;
  run_packed(
      g, c.kc, pool, p.n, p.m, p.k, p.y, p.ldy, scratch,
      [&](int64_t t, uint8_t* dst) {
        g.pack_x(reinterpret_cast<const float*>(p.x + t * g.nr * p.xs), p.xs,
                 int(std::min<int64_t>(g.nr, p.n - t * g.nr)), p.k, dst);
      },
      [&](int64_t t, int mcols, int64_t k0, int64_t kc, uint8_t* dst) {
        g.pack_w(p.w + t * g.mr * p.ws, p.ws, mcols, k0, kc, dst);
      },
      [&](int64_t n0, int64_t n1, int64_t m0, int64_t m1) { add_bias(p, n0, n1, m0, m1); });
}

void run_dot(const DotKernel& d, ThreadPool& pool, const Problem& p, uint8_t* scratch) {
  const uint8_t* act = p.x;
  size_t as = p.xs;
  if (d.act != ActFormat::F32) {
    as = act_row_bytes(d.act, p.k);
    for (int64_t n = 0; n < p.n; ++n) d.convert(reinterpret_cast<const float*>(p.x + n * p.xs), p.k, scratch + n * as);
    act = scratch;
  }
  // Chunks of 16 rows keep the threads' output lines apart.
  const int64_t chunks = (p.m + 15) / 16;
  pool.run([&](int ith, int nth) {
    int64_t c0, c1;
    ThreadPool::split(chunks, ith, nth, &c0, &c1);
    const int64_t m0 = c0 * 16, m1 = std::min(p.m, c1 * 16);
    if (m0 >= m1) return;
    d.fn(p.w, p.ws, m0, m1, act, as, p.n, p.k, p.y, p.ldy);
    add_bias(p, 0, p.n, m0, m1);
  });
}

size_t scratch_bytes(const MatmulKernels& kern, int slot, int64_t n, int64_t k, int n_threads) {
  if (n < kGemmMinRows) {
    ActFormat f = kern.dot[slot].act;
    return f == ActFormat::F32 ? 0 : size_t(n) * act_row_bytes(f, k);
  }
  size_t most = 0;
  for (GemmPrecision prec : {GemmPrecision::F32, GemmPrecision::BF16}) {
    const GemmChoice c = choose_gemm(kern, slot, prec);
    most = std::max(most, gemm_x_bytes(*c.g, n, k) + size_t(n_threads) * gemm_w_bytes(*c.g, k, c.kc));
  }
  return most;
}

thread_local GemmPrecision t_scope = GemmPrecision::Auto;

GemmPrecision effective_precision(GemmPrecision requested, DType w_type) {
  if (requested != GemmPrecision::Auto) return requested;
  if (t_scope != GemmPrecision::Auto) return t_scope;
  return resolve_gemm_precision(GemmPrecision::Auto, gemm_weight_is_lossy(w_type));
}

void check_and_run(const MatmulKernels& kern, ThreadPool& pool, const Tensor& w, const Tensor* bias, const Tensor& x,
                   Tensor& y, Arena* arena, const char* what, GemmPrecision prec) {
  const int slot = matmul_weight_slot(w.dtype);
  CBX_CHECK(slot >= 0, "%s: weight %s has unsupported dtype %s (expected f32, f16, bf16, q8_0, q4_0, q4_k)", what,
            w.shape_str().c_str(), dtype_name(w.dtype));
  CBX_CHECK(w.ndim == 2, "%s: weight %s must be 2-D [M, K]", what, w.shape_str().c_str());
  CBX_CHECK(
      type_traits(w.dtype).is_quantized || w.shape[1] <= 1 || w.stride[1] == int64_t(type_traits(w.dtype).block_bytes),
      "%s: weight %s rows must be contiguous", what, w.shape_str().c_str());
  CBX_CHECK(x.dtype == DType::F32 && y.dtype == DType::F32, "%s: x (%s) and y (%s) must be f32", what,
            dtype_name(x.dtype), dtype_name(y.dtype));
  const int64_t m = w.shape[0], k = w.shape[1];
  CBX_CHECK(x.ndim >= 1 && x.cols() == k, "%s: x %s does not match weight %s (K = %lld)", what, x.shape_str().c_str(),
            w.shape_str().c_str(), (long long)k);
  CBX_CHECK(x.ndim == y.ndim && y.cols() == m, "%s: y %s does not match x %s . weight %s^T", what,
            y.shape_str().c_str(), x.shape_str().c_str(), w.shape_str().c_str());
  for (int i = 0; i + 1 < x.ndim; ++i)
    CBX_CHECK(x.shape[i] == y.shape[i], "%s: y %s does not match x %s . weight %s^T", what, y.shape_str().c_str(),
              x.shape_str().c_str(), w.shape_str().c_str());
  CBX_CHECK(x.stride[x.ndim - 1] == 4 || k <= 1, "%s: x %s innermost dim must be contiguous", what,
            x.shape_str().c_str());
  CBX_CHECK(y.stride[y.ndim - 1] == 4 || m <= 1, "%s: y %s innermost dim must be contiguous", what,
            y.shape_str().c_str());
  if (bias) {
    CBX_CHECK(bias->dtype == DType::F32 && bias->ndim == 1 && bias->shape[0] == m && (bias->stride[0] == 4 || m <= 1),
              "%s: bias %s (%s) must be contiguous f32 [%lld] for weight %s", what, bias->shape_str().c_str(),
              dtype_name(bias->dtype), (long long)m, w.shape_str().c_str());
  }
  const int64_t xs = row_stride(x, what, "x"), ys = row_stride(y, what, "y");
  CBX_CHECK(ys % 4 == 0, "%s: y %s row stride %lld is not a multiple of 4 bytes", what, y.shape_str().c_str(),
            (long long)ys);
  CBX_CHECK(!type_traits(w.dtype).is_quantized || k % type_traits(w.dtype).block_size == 0,
            "%s: %s weight %s needs K %% %lld == 0 (its block size)", what, dtype_name(w.dtype), w.shape_str().c_str(),
            (long long)type_traits(w.dtype).block_size);
  const int64_t n = x.rows();
  if (n == 0 || m == 0) return;

  Problem p{static_cast<const uint8_t*>(w.data),
            size_t(w.ndim == 2 ? w.stride[0] : 0),
            slot,
            m,
            k,
            n,
            static_cast<const uint8_t*>(x.data),
            size_t(xs),
            y.ptr<float>(),
            ys / 4,
            bias ? bias->ptr<float>() : nullptr};
  if (k == 0) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) p.y[i * p.ldy + j] = p.bias ? p.bias[j] : 0.f;
    return;
  }
  const size_t mark = arena ? arena->mark() : 0;
  uint8_t* scratch = get_scratch(arena, std::max<size_t>(64, scratch_bytes(kern, slot, n, k, pool.size())));
  try {
    if (n < kGemmMinRows)
      run_dot(kern.dot[slot], pool, p, scratch);
    else
      run_gemm(choose_gemm(kern, slot, effective_precision(prec, w.dtype)), pool, p, scratch);
  } catch (...) {
    if (arena) arena->rewind(mark);
    throw;
  }
  if (arena) arena->rewind(mark);
}

}  // namespace matmul_detail

using namespace matmul_detail;

const char* gemm_precision_name(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::F32:
      return "f32";
    case GemmPrecision::BF16:
      return "bf16";
    case GemmPrecision::Int8:
      return "int8";
    default:
      return "auto";
  }
}

GemmPrecision parse_gemm_precision(const char* s, const char* what) {
  const std::string v = s ? s : "";
  if (v == "auto") return GemmPrecision::Auto;
  if (v == "f32") return GemmPrecision::F32;
  if (v == "bf16") return GemmPrecision::BF16;
  if (v == "int8") return GemmPrecision::Int8;
  fail("%s: GEMM precision '%s' is not one of auto, f32, bf16, int8", what, v.c_str());
}

bool gemm_weight_is_lossy(DType t) { return t != DType::F32; }

GemmPrecision resolve_gemm_precision(GemmPrecision requested, bool lossy_weights) {
  if (requested != GemmPrecision::Auto) return requested;
  return lossy_weights ? GemmPrecision::BF16 : GemmPrecision::F32;
}

GemmPrecisionScope::GemmPrecisionScope(GemmPrecision p) : prev_(t_scope) {
  if (p != GemmPrecision::Auto) t_scope = p;
}
GemmPrecisionScope::~GemmPrecisionScope() { t_scope = prev_; }
GemmPrecision gemm_precision_scope() { return t_scope; }

GemmPrecision gemm_precision_for_f32_weights() { return effective_precision(GemmPrecision::Auto, DType::F32); }

bool gemm_bf16_available() { return bf16_for(matmul_kernels(active_isa())) != nullptr; }

const char* gemm_bf16_kind() {
  const Bf16Gemm* b = bf16_for(matmul_kernels(active_isa()));
  return b ? b->name : "none";
}

void matmul_with_precision(const MatmulKernels& kernels, GemmPrecision prec, ThreadPool& pool, const Tensor& w,
                           const Tensor* bias, const Tensor& x, Tensor& y, Arena* scratch) {
  check_and_run(kernels, pool, w, bias, x, y, scratch, bias ? "matmul_bias" : "matmul", prec);
}

size_t gemm_bf16_kmajor_scratch_bytes(int64_t m, int64_t k, int n_threads) {
  const Bf16Gemm* b = bf16_for(matmul_kernels(active_isa()));
  if (!b) return 0;
  const GemmKernel& g = b->gemm[kWF32];
  return gemm_x_bytes(g, m, k) + size_t(n_threads) * gemm_w_bytes(g, k, b->kc);
}

bool gemm_bf16_kmajor(ThreadPool& pool, const KMajorGemm& q, Arena* arena) {
  const Bf16Gemm* b = bf16_for(matmul_kernels(active_isa()));
  if (!b) return false;
  CBX_ASSERT(q.a && q.b && q.c && q.m >= 0 && q.n >= 0 && q.k >= 0);
  if (q.m == 0 || q.n == 0) return true;
  const GemmKernel& g = b->gemm[kWF32];
  const size_t mark = arena ? arena->mark() : 0;
  // The weights A are the GEMM's x operand (rows of C), B^T its w operand (columns of C).
  uint8_t* scratch = get_scratch(arena, gemm_x_bytes(g, q.m, q.k) + size_t(pool.size()) * gemm_w_bytes(g, q.k, b->kc));
  auto body = [&] {
    if (q.k == 0) {
      for (int64_t i = 0; i < q.m; ++i)
        for (int64_t j = 0; j < q.n; ++j) q.c[i * q.c_rs + j] = q.bias ? q.bias[i] : 0.f;
      return;
    }
    run_packed(
        g, b->kc, pool, q.m, q.n, q.k, q.c, q.c_rs, scratch,
        [&](int64_t t, uint8_t* dst) {
          g.pack_x(q.a + t * g.nr * q.a_rs, size_t(q.a_rs) * 4, int(std::min<int64_t>(g.nr, q.m - t * g.nr)), q.k, dst);
        },
        [&](int64_t t, int mcols, int64_t k0, int64_t kc, uint8_t* dst) {
          b->pack_bt(q.b + t * g.mr, q.b_off, q.b_rs, mcols, k0, kc, dst);
        },
        [&](int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
          if (!q.bias) return;
          for (int64_t i = n0; i < n1; ++i) {
            float* r = q.c + i * q.c_rs;
            const float v = q.bias[i];
            for (int64_t j = m0; j < m1; ++j) r[j] += v;
          }
        });
  };
  try {
    body();
  } catch (...) {
    if (arena) arena->rewind(mark);
    throw;
  }
  if (arena) arena->rewind(mark);
  return true;
}

int64_t matmul_gemm_min_rows() { return kGemmMinRows; }

size_t matmul_scratch_bytes(DType w_type, int64_t n, int64_t m, int64_t k, int n_threads) {
  int slot = matmul_weight_slot(w_type);
  CBX_CHECK(slot >= 0, "matmul_scratch_bytes: unsupported weight dtype %s", dtype_name(w_type));
  size_t most = 0;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512})
    if (int(isa) <= int(detected_isa()))
      most = std::max(most, scratch_bytes(matmul_kernels(isa), slot, n, k, n_threads));
  return most + 128;
}

void matmul_with(const MatmulKernels& kernels, ThreadPool& pool, const Tensor& w, const Tensor* bias, const Tensor& x,
                 Tensor& y, Arena* scratch) {
  check_and_run(kernels, pool, w, bias, x, y, scratch, bias ? "matmul_bias" : "matmul");
}

void matmul(ThreadPool& pool, const Tensor& w, const Tensor& x, Tensor& y, Arena* scratch) {
  check_and_run(matmul_kernels(active_isa()), pool, w, nullptr, x, y, scratch, "matmul");
}

void matmul_bias(ThreadPool& pool, const Tensor& w, const Tensor& bias, const Tensor& x, Tensor& y, Arena* scratch) {
  check_and_run(matmul_kernels(active_isa()), pool, w, &bias, x, y, scratch, "matmul_bias");
}

void gemm_f32(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& c, Arena* scratch, GemmPrecision prec) {
  CBX_CHECK(b.dtype == DType::F32, "gemm_f32: b %s must be f32, got %s", b.shape_str().c_str(), dtype_name(b.dtype));
  check_and_run(matmul_kernels(active_isa()), pool, b, nullptr, a, c, scratch, "gemm_f32",
                prec == GemmPrecision::BF16 ? GemmPrecision::BF16 : GemmPrecision::F32);
}

}  // namespace cbx
