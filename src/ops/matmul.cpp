#include "ops/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace cbx {
namespace {

constexpr int64_t kGemmMinRows = 8;
// GEMM cache blocking: one packed weight panel [mr, kKc] (32 KB for f32) stays in L1
// while the x slices of every n-tile ([N, kKc], L2) stream past it.
constexpr int64_t kKc = 256;  // multiple of 32 (quant blocks and AMX k-steps)

size_t align64(size_t b) { return (b + 63) & ~size_t(63); }

// Row stride (bytes) of t seen as [rows(), cols()]; requires the leading dims to collapse.
int64_t row_stride(const Tensor& t, const char* what, const char* name) {
  CBX_CHECK(t.ndim >= 1, "%s: %s is a scalar", what, name);
  if (t.ndim == 1) return int64_t(t.row_bytes());
  for (int i = 0; i + 2 < t.ndim; ++i)
    CBX_CHECK(t.shape[i] <= 1 || t.stride[i] == t.stride[i + 1] * t.shape[i + 1],
              "%s: %s %s has leading dims that do not collapse to one row stride", what, name,
              t.shape_str().c_str());
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
size_t gemm_w_bytes(const GemmKernel& g, int64_t k) {
  int64_t kc = std::min(k, kKc);
  kc = (kc + g.k_pack - 1) / g.k_pack * g.k_pack;
  return align64(size_t(kc) * g.mr * g.elem_bytes);
}

void run_gemm(const GemmKernel& g, ThreadPool& pool, const Problem& p, uint8_t* scratch) {
  const int nr = g.nr, mr = g.mr, kpk = g.k_pack, eb = g.elem_bytes;
  const int64_t kp = (p.k + kpk - 1) / kpk * kpk;
  const size_t xpanel = align64(size_t(kp) * nr * eb);
  const int64_t n_tiles = (p.n + nr - 1) / nr, m_tiles = (p.m + mr - 1) / mr;
  uint8_t* xpack = scratch;
  uint8_t* wpack0 = scratch + gemm_x_bytes(g, p.n, p.k);
  const size_t wbytes = gemm_w_bytes(g, p.k);

  pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(n_tiles, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t)
      g.pack_x(reinterpret_cast<const float*>(p.x + t * nr * p.xs), p.xs,
               int(std::min<int64_t>(nr, p.n - t * nr)), p.k, xpack + t * xpanel);
    pool.barrier();

    // Split the weight tiles across threads, or the activation tiles when M is small.
    int64_t mt0 = 0, mt1 = m_tiles, nt0 = 0, nt1 = n_tiles;
    if (m_tiles >= 2 * nth || n_tiles < nth) ThreadPool::split(m_tiles, ith, nth, &mt0, &mt1);
    else ThreadPool::split(n_tiles, ith, nth, &nt0, &nt1);
    // k blocks outermost: the x slices of all n-tiles ([N, kc], L2) are reused by every
    // weight panel; one packed weight panel ([mr, kc], L1) is reused by every n-tile.
    uint8_t* wpack = wpack0 + size_t(ith) * wbytes;
    for (int64_t k0 = 0; k0 < p.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, p.k - k0);
      const int64_t kcp = (kc + kpk - 1) / kpk * kpk;
      for (int64_t t = mt0; t < mt1; ++t) {
        const int mcols = int(std::min<int64_t>(mr, p.m - t * mr));
        g.pack_w(p.w + t * mr * p.ws, p.ws, mcols, k0, kc, wpack);
        for (int64_t nt = nt0; nt < nt1; ++nt)
          g.tile(xpack + nt * xpanel + size_t(k0) * nr * eb, wpack, kcp, p.y + nt * nr * p.ldy + t * mr, p.ldy,
                 int(std::min<int64_t>(nr, p.n - nt * nr)), mcols, k0 > 0);
      }
    }
    add_bias(p, nt0 * nr, std::min(p.n, nt1 * nr), mt0 * mr, std::min(p.m, mt1 * mr));
  });
}

void run_dot(const DotKernel& d, ThreadPool& pool, const Problem& p, uint8_t* scratch) {
  const uint8_t* act = p.x;
  size_t as = p.xs;
  if (d.act != ActFormat::F32) {
    as = act_row_bytes(d.act, p.k);
    for (int64_t n = 0; n < p.n; ++n)
      d.convert(reinterpret_cast<const float*>(p.x + n * p.xs), p.k, scratch + n * as);
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
  const GemmKernel& g = kern.gemm[slot];
  return gemm_x_bytes(g, n, k) + size_t(n_threads) * gemm_w_bytes(g, k);
}

void check_and_run(const MatmulKernels& kern, ThreadPool& pool, const Tensor& w, const Tensor* bias,
                   const Tensor& x, Tensor& y, Arena* arena, const char* what) {
  const int slot = matmul_weight_slot(w.dtype);
  CBX_CHECK(slot >= 0, "%s: weight %s has unsupported dtype %s (expected f32, f16, bf16, q8_0, q4_0)",
            what, w.shape_str().c_str(), dtype_name(w.dtype));
  CBX_CHECK(w.ndim == 2, "%s: weight %s must be 2-D [M, K]", what, w.shape_str().c_str());
  CBX_CHECK(type_traits(w.dtype).is_quantized || w.shape[1] <= 1 ||
                w.stride[1] == int64_t(type_traits(w.dtype).block_bytes),
            "%s: weight %s rows must be contiguous", what, w.shape_str().c_str());
  CBX_CHECK(x.dtype == DType::F32 && y.dtype == DType::F32, "%s: x (%s) and y (%s) must be f32", what,
            dtype_name(x.dtype), dtype_name(y.dtype));
  const int64_t m = w.shape[0], k = w.shape[1];
  CBX_CHECK(x.ndim >= 1 && x.cols() == k, "%s: x %s does not match weight %s (K = %lld)", what,
            x.shape_str().c_str(), w.shape_str().c_str(), (long long)k);
  CBX_CHECK(x.ndim == y.ndim && y.cols() == m, "%s: y %s does not match x %s . weight %s^T", what,
            y.shape_str().c_str(), x.shape_str().c_str(), w.shape_str().c_str());
  for (int i = 0; i + 1 < x.ndim; ++i)
    CBX_CHECK(x.shape[i] == y.shape[i], "%s: y %s does not match x %s . weight %s^T", what,
              y.shape_str().c_str(), x.shape_str().c_str(), w.shape_str().c_str());
  CBX_CHECK(x.stride[x.ndim - 1] == 4 || k <= 1, "%s: x %s innermost dim must be contiguous", what,
            x.shape_str().c_str());
  CBX_CHECK(y.stride[y.ndim - 1] == 4 || m <= 1, "%s: y %s innermost dim must be contiguous", what,
            y.shape_str().c_str());
  if (bias) {
    CBX_CHECK(bias->dtype == DType::F32 && bias->ndim == 1 && bias->shape[0] == m &&
                  (bias->stride[0] == 4 || m <= 1),
              "%s: bias %s (%s) must be contiguous f32 [%lld] for weight %s", what,
              bias->shape_str().c_str(), dtype_name(bias->dtype), (long long)m, w.shape_str().c_str());
  }
  const int64_t xs = row_stride(x, what, "x"), ys = row_stride(y, what, "y");
  CBX_CHECK(ys % 4 == 0, "%s: y %s row stride %lld is not a multiple of 4 bytes", what,
            y.shape_str().c_str(), (long long)ys);
  CBX_CHECK(!type_traits(w.dtype).is_quantized || k % 32 == 0,
            "%s: quantized weight %s needs K %% 32 == 0", what, w.shape_str().c_str());
  const int64_t n = x.rows();
  if (n == 0 || m == 0) return;

  Problem p{static_cast<const uint8_t*>(w.data), size_t(w.ndim == 2 ? w.stride[0] : 0), slot, m, k, n,
            static_cast<const uint8_t*>(x.data), size_t(xs), y.ptr<float>(), ys / 4,
            bias ? bias->ptr<float>() : nullptr};
  if (k == 0) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) p.y[i * p.ldy + j] = p.bias ? p.bias[j] : 0.f;
    return;
  }
  const size_t mark = arena ? arena->mark() : 0;
  uint8_t* scratch = get_scratch(arena, std::max<size_t>(64, scratch_bytes(kern, slot, n, k, pool.size())));
  try {
    if (n < kGemmMinRows) run_dot(kern.dot[slot], pool, p, scratch);
    else run_gemm(kern.gemm[slot], pool, p, scratch);
  } catch (...) {
    if (arena) arena->rewind(mark);
    throw;
  }
  if (arena) arena->rewind(mark);
}

}  // namespace

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

void matmul_with(const MatmulKernels& kernels, ThreadPool& pool, const Tensor& w, const Tensor* bias,
                 const Tensor& x, Tensor& y, Arena* scratch) {
  check_and_run(kernels, pool, w, bias, x, y, scratch, bias ? "matmul_bias" : "matmul");
}

void matmul(ThreadPool& pool, const Tensor& w, const Tensor& x, Tensor& y, Arena* scratch) {
  check_and_run(matmul_kernels(active_isa()), pool, w, nullptr, x, y, scratch, "matmul");
}

void matmul_bias(ThreadPool& pool, const Tensor& w, const Tensor& bias, const Tensor& x, Tensor& y,
                 Arena* scratch) {
  check_and_run(matmul_kernels(active_isa()), pool, w, &bias, x, y, scratch, "matmul_bias");
}

void gemm_f32(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& c, Arena* scratch) {
  CBX_CHECK(b.dtype == DType::F32, "gemm_f32: b %s must be f32, got %s", b.shape_str().c_str(),
            dtype_name(b.dtype));
  check_and_run(matmul_kernels(active_isa()), pool, b, nullptr, a, c, scratch, "gemm_f32");
}

}  // namespace cbx
