// Pre-packed weights and fused GEMM epilogues (ops/matmul.h: PackedWeight, matmul_packed).
//
// The per-call BF16 GEMM (ops/matmul.cpp) packs every weight panel again on each call and
// packs the activations into a shared buffer behind a barrier. With the panels made once:
//   - a thread takes a contiguous range of (32-row activation tile, weight tile) items,
//     row-tile major, packs its activation tile once for all of K into its own buffer (no
//     barrier), and runs one tile call over all of K (the panels of consecutive k blocks are
//     contiguous), into a 32 x 32 f32 buffer;
//   - the epilogue (bias, GELU / SiLU, residual) runs on that buffer while it is in L1 and
//     writes y once; a LayerNorm prologue normalizes the tile's rows just before packing them;
//   - matmul_mlp chains two GEMMs per row tile (each thread owns whole row tiles), so the
//     hidden rows never leave the thread's scratch.
// Int8 panels (GemmPrecision::Int8, kernels/matmul_int8.h) take the same paths: their x panel
// quantizes the activation rows (after the LayerNorm prologue) and their tile applies the scales,
// so the epilogues and matmul_mlp see f32 tiles as with bf16.
// The weight panels of one matrix (<= 768 KB in the CFM) stay in L2 across the row tiles.
// The tile kernel accumulates the same bf16 products in the same k order whether K is split
// into blocks (the f32 partial sums are stored and reloaded exactly) or not, so the results
// equal the per-call path bit for bit.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/debug_env.h"
#include "core/error.h"
#include "core/huge_buffer.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matmul_int8.h"
#include "kernels/nn.h"
#include "ops/matmul.h"
#include "ops/matmul_detail.h"

namespace cbx {

using namespace matmul_detail;

namespace {

size_t align64(size_t b) { return (b + 63) & ~size_t(63); }

// Bytes of one thread's scratch on the panel path: its activation panel, one output tile and,
// with a LayerNorm prologue, its normalized rows.
size_t thread_bytes(const GemmKernel& g, int64_t kp, bool ln) {
  return align64(size_t(kp) * g.nr * g.elem_bytes) + align64(size_t(g.nr) * g.mr * 4) +
         (ln ? align64(size_t(kp) * g.nr * 4) : 0);
}

// matmul_packed's own temporaries: from the arena (after which matmul takes its scratch there
// too), else from a grow-only per-thread buffer separate from matmul's.
uint8_t* own_scratch(Arena* arena, size_t bytes) {
  if (arena) return static_cast<uint8_t*>(arena->alloc_bytes(bytes, 64, "matmul_packed temporaries"));
  struct Buf {
    uint8_t* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  if (buf.n < bytes) {
    std::free(buf.p);
    buf.n = 0;
    buf.p = static_cast<uint8_t*>(std::aligned_alloc(64, align64(bytes)));
    CBX_CHECK(buf.p, "matmul_packed: cannot allocate %zu bytes of scratch", bytes);
    buf.n = align64(bytes);
  }
  return buf.p;
}

// [lo, hi) byte range a 2-D-collapsible f32 tensor can touch.
void byte_range(const Tensor& t, int64_t rs, const uint8_t** lo, const uint8_t** hi) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  *lo = p;
  *hi = p + (t.rows() > 0 ? (t.rows() - 1) * rs + t.cols() * 4 : 0);
}

Unary unary_of(MatmulAct a) { return a == MatmulAct::Gelu ? Unary::Gelu : Unary::Silu; }

struct Epi {
  const float* ln_w;  // LayerNorm prologue when set
  const float* ln_b;
  float ln_eps;
  const float* bias;
  MatmulAct act;
  const float* res;
  int64_t ldr;  // floats
  const NnKernels* nn;
};

// One finished tile (rows [n0, n0 + nrows), columns [m0, m0 + mcols)), t: [nrows][ld] f32.
void finish_tile(const Epi& e, float* t, int64_t ld, int nrows, int mcols, float* y, int64_t ldy, int64_t n0,
                 int64_t m0) {
  for (int i = 0; i < nrows; ++i) {
    float* v = t + i * ld;
    float* out = y + (n0 + i) * ldy + m0;
    if (e.bias) e.nn->binary(Binary::Add, v, e.bias + m0, v, mcols, false);
    if (e.act != MatmulAct::None) e.nn->unary(unary_of(e.act), v, v, mcols, 0.f, 0.f);
    if (e.res)
      e.nn->binary(Binary::Add, e.res + (n0 + i) * e.ldr + m0, v, out, mcols, false);
    else
      std::memcpy(out, v, size_t(mcols) * 4);
  }
}

// Packs activation rows [n0, n0 + nrows) of x (rows xs bytes apart, k columns) into the x
// panel xp, layer-normed into lnrows ([nr][k] f32) first when e has a prologue.
void pack_rows(const GemmKernel& g, const Epi& e, const uint8_t* x, int64_t xs, int64_t n0, int nrows, int64_t k,
               float* lnrows, uint8_t* xp) {
  if (e.ln_w) {
    for (int i = 0; i < nrows; ++i)
      e.nn->layer_norm(reinterpret_cast<const float*>(x + (n0 + i) * xs), lnrows + i * k, k, e.ln_w, e.ln_b, e.ln_eps);
    g.pack_x(lnrows, size_t(k) * 4, nrows, k, xp);
  } else {
    g.pack_x(reinterpret_cast<const float*>(x + n0 * xs), size_t(xs), nrows, k, xp);
  }
}

// One output tile: rows [n0, n0 + nrows) x weight tile wt, over all of K (kp), with the epilogue.
// Without one the tile kernel stores into y itself; else into `tile` ([nr][mr]: rows past
// nrows and columns past mcols are zero padding), then finish_tile writes y.
void run_tile(const GemmKernel& g, const Epi& e, const uint8_t* xp, const uint8_t* panels, const PackedWeight::Tile& wt,
              int64_t kp, float* tile, int nrows, float* y, int64_t ldy, int64_t n0) {
  if (!e.bias && e.act == MatmulAct::None && !e.res) {
    g.tile(xp, panels + wt.off, kp, y + n0 * ldy + wt.m0, ldy, nrows, wt.mcols, false);
    return;
  }
  g.tile(xp, panels + wt.off, kp, tile, g.mr, g.nr, g.mr, false);
  finish_tile(e, tile, g.mr, nrows, wt.mcols, y, ldy, n0, wt.m0);
}

// The panel path: y = epilogue(x . w^T) with w's panels.
void run_panels(const PackedWeight& w, const GemmKernel& g, const std::vector<PackedWeight::Tile>& tiles,
                const uint8_t* panels, int64_t kp, ThreadPool& pool, const uint8_t* x, int64_t xs, int64_t n, float* y,
                int64_t ldy, const Epi& e, uint8_t* scratch) {
  const int64_t n_tiles = (n + g.nr - 1) / g.nr, m_tiles = int64_t(tiles.size());
  const int64_t items = n_tiles * m_tiles, k = w.cols();
  const size_t xbytes = align64(size_t(kp) * g.nr * g.elem_bytes), per = thread_bytes(g, kp, e.ln_w != nullptr);
  const size_t tbytes = align64(size_t(g.nr) * g.mr * 4);
  // Items row tile major; each thread works its own block a row tile at a time and then takes
  // single items from the back of the other blocks (WorkSplit), packing the x rows of a row
  // tile when it moves to another.
  WorkSplit& ws = pool.work_split();
  ws.reset(items, pool.size(), 1);
  pool.run([&](int ith, int) {
    uint8_t* xp = scratch + size_t(ith) * per;
    float* tile = reinterpret_cast<float*>(xp + xbytes);
    float* lnrows = reinterpret_cast<float*>(xp + xbytes + tbytes);  // [nr][k] with a prologue
    int64_t cur = -1;
    ws.run(ith, m_tiles, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t it = i0; it < i1; ++it) {
        const int64_t nt = it / m_tiles, t = it % m_tiles;
        const int nrows = int(std::min<int64_t>(g.nr, n - nt * g.nr));
        if (nt != cur) {
          pack_rows(g, e, x, xs, nt * g.nr, nrows, k, lnrows, xp);
          cur = nt;
        }
        run_tile(g, e, xp, panels, tiles[size_t(t)], kp, tile, nrows, y, ldy, nt * g.nr);
      }
    });
  });
}

// Bytes of one thread's scratch on the MLP panel path.
size_t mlp_thread_bytes(const GemmKernel& g1, int64_t kp1, const GemmKernel& g2, int64_t kp2, int64_t f) {
  return thread_bytes(g1, kp1, true) + align64(size_t(g2.nr) * size_t(f) * 4) +
         align64(size_t(kp2) * g2.nr * g2.elem_bytes);
}

// The MLP panel path: per 32-row tile, h = e1(x . w1^T) into the thread's [nr][F] rows, then
// y = e2(h . w2^T); threads take their own block of row tiles, then the others' last ones
// (WorkSplit).
struct MlpSide {
  const GemmKernel* g;
  const std::vector<PackedWeight::Tile>* tiles;
  const uint8_t* panels;
  int64_t kp;
  Epi e;
};
void run_mlp_panels(const MlpSide& a, const MlpSide& b, ThreadPool& pool, const uint8_t* x, int64_t xs, int64_t n,
                    int64_t k, int64_t f, float* y, int64_t ldy, uint8_t* scratch) {
  const GemmKernel &g1 = *a.g, &g2 = *b.g;
  const int64_t n_tiles = (n + g1.nr - 1) / g1.nr;
  const size_t x1 = align64(size_t(a.kp) * g1.nr * g1.elem_bytes), t1 = align64(size_t(g1.nr) * g1.mr * 4);
  const size_t ln = align64(size_t(a.kp) * g1.nr * 4), hb = align64(size_t(g2.nr) * size_t(f) * 4);
  const size_t per = mlp_thread_bytes(g1, a.kp, g2, b.kp, f);
  WorkSplit& ws = pool.work_split();
  ws.reset(n_tiles, pool.size(), 1);
  pool.run([&](int ith, int) {
    uint8_t* xp = scratch + size_t(ith) * per;
    float* tile = reinterpret_cast<float*>(xp + x1);
    float* lnrows = reinterpret_cast<float*>(xp + x1 + t1);
    float* h = reinterpret_cast<float*>(xp + x1 + t1 + ln);
    uint8_t* hp = xp + x1 + t1 + ln + hb;
    ws.run(ith, 1, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t nt = r0; nt < r1; ++nt) {
        const int nrows = int(std::min<int64_t>(g1.nr, n - nt * g1.nr));
        pack_rows(g1, a.e, x, xs, nt * g1.nr, nrows, k, lnrows, xp);
        for (const PackedWeight::Tile& wt : *a.tiles) run_tile(g1, a.e, xp, a.panels, wt, a.kp, tile, nrows, h, f, 0);
        g2.pack_x(h, size_t(f) * 4, nrows, f, hp);
        for (const PackedWeight::Tile& wt : *b.tiles)
          run_tile(g2, b.e, hp, b.panels, wt, b.kp, tile, nrows, y, ldy, nt * g1.nr);
      }
    });
  });
}

// The epilogue as separate passes: src rows (the GEMM result, bias included; y itself or a
// buffer) get act in place, then y = residual + src (or a copy into y).
void epilogue_passes(ThreadPool& pool, const NnKernels& nn, MatmulAct act, const float* res, int64_t ldr, float* src,
                     int64_t lds, float* y, int64_t ldy, int64_t n, int64_t m) {
  if (act == MatmulAct::None && !res && src == y) return;
  pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    ThreadPool::split(n, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      float* s = src + r * lds;
      float* out = y + r * ldy;
      if (act != MatmulAct::None) nn.unary(unary_of(act), s, s, m, 0.f, 0.f);
      if (res)
        nn.binary(Binary::Add, res + r * ldr, s, out, m, false);
      else if (s != out)
        std::memmove(out, s, size_t(m) * 4);
    }
  });
}

}  // namespace

// Everything matmul_packed needs from a PackedWeight.
struct PackedAccess {
  static void pack_int8(const MatmulKernels& kern, ThreadPool& pool, PackedWeight& w, const char* what);
  static const MatmulKernels* kernels(const PackedWeight& w) { return w.kernels_; }
  static int64_t kp(const PackedWeight& w) { return w.kp_; }
  static const uint8_t* panels(const PackedWeight& w) { return w.panels_.data(); }
  static const std::vector<PackedWeight::Tile>& tiles(const PackedWeight& w) { return w.tiles_; }
};

// Whether a call with n rows runs on w's panels (int8 panels: always from kGemmMinRows rows).
static bool use_panels(const PackedWeight& w, int64_t n) {
  return w.has_panels() && w.cols() > 0 && n >= kGemmMinRows &&
         (w.int8() || effective_precision(GemmPrecision::Auto, w.dtype()) == GemmPrecision::BF16);
}

static const GemmKernel& panel_kernel(const PackedWeight& w) {
  if (w.int8()) return matmul_int8_gemm(PackedAccess::kernels(w)->isa);
  return bf16_for(*PackedAccess::kernels(w))->gemm[matmul_weight_slot(w.dtype())];
}

// Int8 panels (kernels/matmul_int8.h): each tile's channels widened to f32 and quantized.
void PackedAccess::pack_int8(const MatmulKernels& kern, ThreadPool& pool, PackedWeight& w, const char* what) {
  CBX_CHECK(w.k_ <= kInt8MaxK, "pack_weight %s: int8 GEMM needs K <= %lld, got K = %lld", what, (long long)kInt8MaxK,
            (long long)w.k_);
  w.kernels_ = &kern;
  w.int8_ = true;
  w.kp_ = int8_panel_k(w.k_);
  const size_t panel = size_t(w.kp_) * kInt8Mr;
  std::vector<std::pair<size_t, int64_t>> owner;  // (part, first row in the part) per tile
  for (size_t i = 0; i < w.parts_.size(); ++i)
    for (int64_t r = 0; r < w.parts_[i].shape[0]; r += kInt8Mr) {
      w.tiles_.push_back(
          {w.offs_[i] + r, int(std::min<int64_t>(kInt8Mr, w.parts_[i].shape[0] - r)), w.tiles_.size() * panel});
      owner.push_back({i, r});
    }
  w.panels_ = HugePiece(w.tiles_.size() * panel);
  CBX_CHECK(w.panels_.data(), "pack_weight %s: cannot allocate %zu bytes of panels", what, w.panels_.size());
  const ToFloatFn to_float = type_traits(w.dtype_).to_float;
  CBX_CHECK(to_float || w.dtype_ == DType::F32, "pack_weight %s: cannot widen %s", what, dtype_name(w.dtype_));
  pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(int64_t(w.tiles_.size()), ith, nth, &t0, &t1);
    std::vector<float> rows(size_t(kInt8Mr) * size_t(w.k_));  // load time only
    for (int64_t t = t0; t < t1; ++t) {
      const Tensor& p = w.parts_[owner[size_t(t)].first];
      const PackedWeight::Tile& tl = w.tiles_[size_t(t)];
      for (int j = 0; j < tl.mcols; ++j) {
        const auto* src = static_cast<const uint8_t*>(p.data) + (owner[size_t(t)].second + j) * p.stride[0];
        if (w.dtype_ == DType::F32)
          std::memcpy(rows.data() + size_t(j) * w.k_, src, size_t(w.k_) * 4);
        else
          to_float(src, rows.data() + size_t(j) * w.k_, w.k_);
      }
      int8_pack_w(rows.data(), w.k_, tl.mcols, w.k_, w.panels_.data() + tl.off);
    }
  });
}

PackedWeight pack_weight_with(const MatmulKernels& kern, ThreadPool& pool, const std::vector<const Tensor*>& parts,
                              GemmPrecision prec, const char* what) {
  CBX_CHECK(!parts.empty(), "pack_weight %s: no weight parts", what);
  PackedWeight w;
  for (const Tensor* p : parts) {
    CBX_CHECK(p && !p->empty() && p->ndim == 2, "pack_weight %s: every part must be a 2-D weight, got %s", what,
              p ? p->shape_str().c_str() : "null");
    const Tensor& f = *parts[0];
    CBX_CHECK(matmul_weight_slot(p->dtype) >= 0,
              "pack_weight %s: part %s has unsupported dtype %s (expected f32, f16, bf16, q8_0, q4_0, q4_k)", what,
              p->shape_str().c_str(), dtype_name(p->dtype));
    CBX_CHECK(p->dtype == f.dtype && p->shape[1] == f.shape[1],
              "pack_weight %s: part %s %s does not match the first part %s %s (one dtype and K)", what,
              dtype_name(p->dtype), p->shape_str().c_str(), dtype_name(f.dtype), f.shape_str().c_str());
    CBX_CHECK(type_traits(p->dtype).is_quantized || p->shape[1] <= 1 ||
                  p->stride[1] == int64_t(type_traits(p->dtype).block_bytes),
              "pack_weight %s: part %s rows must be contiguous", what, p->shape_str().c_str());
    w.offs_.push_back(w.m_);
    w.parts_.push_back(*p);
    w.m_ += p->shape[0];
  }
  w.k_ = parts[0]->shape[1];
  w.dtype_ = parts[0]->dtype;
  CBX_CHECK(!type_traits(w.dtype_).is_quantized || w.k_ % type_traits(w.dtype_).block_size == 0,
            "pack_weight %s: %s weight needs K %% %lld == 0, got K = %lld", what, dtype_name(w.dtype_),
            (long long)type_traits(w.dtype_).block_size, (long long)w.k_);
  const Bf16Gemm* b = bf16_for(kern);
  if (debug_env().no_prepack) return w;  // CBX_DEBUG_NO_PREPACK=1: no panels (A/B comparisons)
  if (w.k_ > 0 && w.m_ > 0 && effective_precision(prec, w.dtype_) == GemmPrecision::Int8) {
    PackedAccess::pack_int8(kern, pool, w, what);
    return w;
  }
  if (!b || w.k_ == 0 || w.m_ == 0 || effective_precision(prec, w.dtype_) != GemmPrecision::BF16) return w;

  const int slot = matmul_weight_slot(w.dtype_);
  const GemmKernel& g = b->gemm[slot];
  w.kernels_ = &kern;
  w.kp_ = (w.k_ + 31) / 32 * 32;
  CBX_ASSERT(w.kp_ % g.k_pack == 0 && b->kc % g.k_pack == 0);
  const size_t panel = size_t(w.kp_) * g.mr * g.elem_bytes;
  for (size_t i = 0; i < w.parts_.size(); ++i) {
    const int64_t rows = w.parts_[i].shape[0];
    for (int64_t r = 0; r < rows; r += g.mr)
      w.tiles_.push_back({w.offs_[i] + r, int(std::min<int64_t>(g.mr, rows - r)), w.tiles_.size() * panel});
  }
  w.panels_ = HugePiece(w.tiles_.size() * panel);
  CBX_CHECK(w.panels_.data(), "pack_weight %s: cannot allocate %zu bytes of panels", what, w.panels_.size());
  uint8_t* mem = w.panels_.data();
  // Tile j of part i: the packer the per-call path runs, once per k block (kc as there).
  std::vector<std::pair<size_t, int64_t>> owner;  // (part, first row in the part) per tile
  for (size_t i = 0; i < w.parts_.size(); ++i)
    for (int64_t r = 0; r < w.parts_[i].shape[0]; r += g.mr) owner.push_back({i, r});
  pool.run([&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(int64_t(w.tiles_.size()), ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      const Tensor& p = w.parts_[owner[size_t(t)].first];
      const auto* src = static_cast<const uint8_t*>(p.data) + owner[size_t(t)].second * p.stride[0];
      uint8_t* dst = mem + w.tiles_[size_t(t)].off;
      for (int64_t k0 = 0; k0 < w.k_; k0 += b->kc) {
        const int64_t kc = std::min(b->kc, w.k_ - k0);
        g.pack_w(src, size_t(p.stride[0]), w.tiles_[size_t(t)].mcols, k0, kc, dst + size_t(k0) * g.mr * g.elem_bytes);
      }
    }
  });
  return w;
}

const char* gemm_int8_kind() { return matmul_int8_kind(active_isa()); }

GemmPrecision resolve_packed_precision(GemmPrecision requested, bool lossy_weights, bool vnni_int8) {
  if (requested == GemmPrecision::Auto && gemm_precision_scope() == GemmPrecision::Auto && lossy_weights && vnni_int8)
    return GemmPrecision::Int8;
  return resolve_gemm_precision(requested, lossy_weights);
}

GemmPrecision resolve_packed_precision(GemmPrecision requested, bool lossy_weights) {
  return resolve_packed_precision(requested, lossy_weights, std::strcmp(gemm_int8_kind(), "vpdpbusd") == 0);
}

PackedWeight pack_weight(ThreadPool& pool, const std::vector<const Tensor*>& parts, GemmPrecision prec,
                         const char* what) {
  return pack_weight_with(matmul_kernels(active_isa()), pool, parts, prec, what);
}

size_t matmul_packed_scratch_bytes(const PackedWeight& w, int64_t n, int n_threads) {
  size_t most = 0;
  for (const Tensor& p : w.parts())
    most = std::max(most, matmul_scratch_bytes(p.dtype, n, p.shape[0], p.shape[1], n_threads));
  // GEMM result when the residual aliases y; normalized x with a LayerNorm prologue.
  most += align64(size_t(n) * size_t(w.rows()) * 4) + align64(size_t(n) * size_t(w.cols()) * 4) + 128;
  if (w.has_panels()) {
    const GemmKernel& g = panel_kernel(w);
    most = std::max(most, size_t(n_threads) * thread_bytes(g, PackedAccess::kp(w), true) + 64);
  }
  return most + 128;
}

namespace {

struct Checked {
  int64_t xs, ys, rs;  // row strides (bytes) of x, y, the residual
  bool aliased;        // the residual is y
};

// Shapes, dtypes and strides of y = epilogue(x . w^T) (x and y apart).
Checked check_packed(const char* what, const PackedWeight& w, const Tensor& x, const Tensor& y,
                     const MatmulEpilogue& e) {
  CBX_CHECK(!w.empty(), "%s: the weight is empty (not packed)", what);
  const int64_t m = w.rows(), k = w.cols();
  CBX_CHECK(x.dtype == DType::F32 && y.dtype == DType::F32, "%s: x (%s) and y (%s) must be f32", what,
            dtype_name(x.dtype), dtype_name(y.dtype));
  CBX_CHECK(x.ndim >= 1 && x.cols() == k && x.ndim == y.ndim && y.cols() == m,
            "%s: x %s . weight [%lld, %lld]^T does not give y %s", what, x.shape_str().c_str(), (long long)m,
            (long long)k, y.shape_str().c_str());
  for (int i = 0; i + 1 < x.ndim; ++i)
    CBX_CHECK(x.shape[i] == y.shape[i], "%s: y %s does not match x %s", what, y.shape_str().c_str(),
              x.shape_str().c_str());
  CBX_CHECK((x.stride[x.ndim - 1] == 4 || k <= 1) && (y.stride[y.ndim - 1] == 4 || m <= 1),
            "%s: x %s and y %s need a contiguous innermost dim", what, x.shape_str().c_str(), y.shape_str().c_str());
  if (e.bias)
    CBX_CHECK(
        e.bias->dtype == DType::F32 && e.bias->ndim == 1 && e.bias->shape[0] == m && (e.bias->stride[0] == 4 || m <= 1),
        "%s: bias %s (%s) must be contiguous f32 [%lld]", what, e.bias->shape_str().c_str(), dtype_name(e.bias->dtype),
        (long long)m);
  Checked c{row_stride(x, what, "x"), row_stride(y, what, "y"), 0, false};
  CBX_CHECK(c.ys % 4 == 0, "%s: y row stride %lld is not a multiple of 4 bytes", what, (long long)c.ys);
  const uint8_t *xl, *xh, *yl, *yh;
  byte_range(x, c.xs, &xl, &xh);
  byte_range(y, c.ys, &yl, &yh);
  CBX_CHECK(!(xl < yh && yl < xh), "%s: x %s overlaps y %s", what, x.shape_str().c_str(), y.shape_str().c_str());
  if (e.residual) {
    const Tensor& r = *e.residual;
    CBX_CHECK(r.dtype == DType::F32 && same_shape(r, y) && (r.stride[r.ndim - 1] == 4 || m <= 1),
              "%s: residual %s (%s) must be f32 shaped like y %s", what, r.shape_str().c_str(), dtype_name(r.dtype),
              y.shape_str().c_str());
    c.rs = row_stride(r, what, "residual");
    CBX_CHECK(c.rs % 4 == 0, "%s: residual row stride %lld is not a multiple of 4 bytes", what, (long long)c.rs);
    const uint8_t *rl, *rh;
    byte_range(r, c.rs, &rl, &rh);
    c.aliased = rl < yh && yl < rh;
    CBX_CHECK(!c.aliased || (r.data == y.data && c.rs == c.ys), "%s: residual %s overlaps y %s without being y itself",
              what, r.shape_str().c_str(), y.shape_str().c_str());
  }
  if (e.ln_w)
    for (const Tensor* t : {e.ln_w, e.ln_b})
      CBX_CHECK(!t || (t->dtype == DType::F32 && t->ndim == 1 && t->shape[0] == k && (t->stride[0] == 4 || k <= 1)),
                "%s: LayerNorm parameter %s (%s) must be contiguous f32 [%lld]", what, t->shape_str().c_str(),
                dtype_name(t->dtype), (long long)k);
  return c;
}

Epi make_epi(const MatmulEpilogue& e, int64_t rs, const NnKernels& nn) {
  return Epi{e.ln_w ? e.ln_w->ptr<float>() : nullptr,
             e.ln_b ? e.ln_b->ptr<float>() : nullptr,
             e.ln_eps,
             e.bias ? e.bias->ptr<float>() : nullptr,
             e.act,
             e.residual ? e.residual->ptr<float>() : nullptr,
             rs / 4,
             &nn};
}

}  // namespace

void matmul_packed(ThreadPool& pool, const PackedWeight& w, const Tensor& x, Tensor& y, const MatmulEpilogue& e,
                   Arena* arena) {
  const char* what = "matmul_packed";
  const Checked c = check_packed(what, w, x, y, e);
  const int64_t m = w.rows(), k = w.cols(), xs = c.xs, ys = c.ys, rs = c.rs;
  const bool aliased = c.aliased;
  const int64_t n = x.rows();
  if (n == 0 || m == 0) return;
  const MatmulKernels& kern = PackedAccess::kernels(w) ? *PackedAccess::kernels(w) : matmul_kernels(active_isa());
  const NnKernels& nn = nn_kernels(kern.isa);
  const float* res = e.residual ? e.residual->ptr<float>() : nullptr;
  float* yp = y.ptr<float>();

  const size_t mark = arena ? arena->mark() : 0;
  auto body = [&] {
    if (use_panels(w, n)) {
      const GemmKernel& g = panel_kernel(w);
      uint8_t* scratch =
          get_scratch(arena, size_t(pool.size()) * thread_bytes(g, PackedAccess::kp(w), e.ln_w != nullptr));
      run_panels(w, g, PackedAccess::tiles(w), PackedAccess::panels(w), PackedAccess::kp(w), pool,
                 static_cast<const uint8_t*>(x.data), xs, n, yp, ys / 4, make_epi(e, rs, nn), scratch);
      return;
    }
    // Per part through matmul (its dot / GEMM paths and precision rules), then the epilogue.
    // Temporaries: the GEMM result when the residual aliases y, the normalized x rows.
    const size_t tmp_bytes = aliased ? align64(size_t(n) * size_t(m) * 4) : 0;
    const size_t ln_bytes = e.ln_w ? align64(size_t(n) * size_t(k) * 4) : 0;
    uint8_t* tmp = tmp_bytes + ln_bytes ? own_scratch(arena, tmp_bytes + ln_bytes) : nullptr;
    Tensor dst = y;
    if (aliased) dst = make_tensor(DType::F32, {n, m}, tmp, size_t(n) * size_t(m) * 4);
    Tensor dst2 = dst.ndim == 2
                      ? dst
                      : make_view(dst, 2, std::array<int64_t, 2>{n, m}.data(), std::array<int64_t, 2>{ys, 4}.data(), 0);
    Tensor x2 = make_view(x, 2, std::array<int64_t, 2>{n, k}.data(), std::array<int64_t, 2>{xs, 4}.data(), 0);
    if (e.ln_w) {
      float* lx = reinterpret_cast<float*>(tmp + tmp_bytes);
      const float *lw = e.ln_w->ptr<float>(), *lb = e.ln_b ? e.ln_b->ptr<float>() : nullptr;
      pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        ThreadPool::split(n, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; ++r)
          nn.layer_norm(reinterpret_cast<const float*>(static_cast<const uint8_t*>(x.data) + r * xs), lx + r * k, k, lw,
                        lb, e.ln_eps);
      });
      x2 = make_tensor(DType::F32, {n, k}, lx, size_t(n) * size_t(k) * 4);
    }
    for (size_t i = 0; i < w.parts().size(); ++i) {
      const Tensor& p = w.parts()[i];
      const int64_t o = w.part_rows()[i], mi = p.shape[0];
      Tensor yi = slice(dst2, 1, o, mi);
      if (e.bias) {
        const Tensor bi = slice(*e.bias, 0, o, mi);
        check_and_run(kern, pool, p, &bi, x2, yi, arena, what);
      } else {
        check_and_run(kern, pool, p, nullptr, x2, yi, arena, what);
      }
    }
    epilogue_passes(pool, nn, e.act, res, rs / 4, dst2.ptr<float>(), dst2.stride[0] / 4, yp, ys / 4, n, m);
  };
  try {
    body();
  } catch (...) {
    if (arena) arena->rewind(mark);
    throw;
  }
  if (arena) arena->rewind(mark);
}

size_t matmul_mlp_scratch_bytes(const PackedWeight& w1, const PackedWeight& w2, int64_t n, int n_threads) {
  size_t most = std::max(matmul_packed_scratch_bytes(w1, n, n_threads), matmul_packed_scratch_bytes(w2, n, n_threads));
  if (w1.has_panels() && w2.has_panels())
    most = std::max(most, size_t(n_threads) * mlp_thread_bytes(panel_kernel(w1), PackedAccess::kp(w1), panel_kernel(w2),
                                                               PackedAccess::kp(w2), w1.rows()) +
                              128);
  return most + 128;
}

void matmul_mlp(ThreadPool& pool, const PackedWeight& w1, const MatmulEpilogue& e1, const PackedWeight& w2,
                const MatmulEpilogue& e2, const Tensor& x, Tensor& hidden, Tensor& y, Arena* arena) {
  const char* what = "matmul_mlp";
  CBX_CHECK(!e1.residual && !e2.ln_w, "%s: the first GEMM takes no residual and the second no LayerNorm", what);
  CBX_CHECK(!w1.empty() && !w2.empty() && w2.cols() == w1.rows(), "%s: w2 [%lld, %lld] does not take w1's %lld outputs",
            what, (long long)w2.rows(), (long long)w2.cols(), (long long)w1.rows());
  const Checked c1 = check_packed(what, w1, x, hidden, e1);
  const Checked c2 = check_packed(what, w2, hidden, y, e2);
  {  // x may be y itself (each thread reads its row tiles before writing them), else apart
    const uint8_t *xl, *xh, *yl, *yh;
    byte_range(x, c1.xs, &xl, &xh);
    byte_range(y, c2.ys, &yl, &yh);
    CBX_CHECK(!(xl < yh && yl < xh) || (x.data == y.data && c1.xs == c2.ys && x.cols() == y.cols()),
              "%s: x %s overlaps y %s without being y itself", what, x.shape_str().c_str(), y.shape_str().c_str());
  }
  const int64_t n = x.rows();
  if (n == 0 || w2.rows() == 0) return;
  if (!use_panels(w1, n) || !use_panels(w2, n) || panel_kernel(w1).nr != panel_kernel(w2).nr) {
    matmul_packed(pool, w1, x, hidden, e1, arena);
    matmul_packed(pool, w2, hidden, y, e2, arena);
    return;
  }
  const GemmKernel &g1 = panel_kernel(w1), &g2 = panel_kernel(w2);
  const NnKernels& nn = nn_kernels(PackedAccess::kernels(w1)->isa);
  const size_t mark = arena ? arena->mark() : 0;
  uint8_t* scratch = get_scratch(
      arena, size_t(pool.size()) * mlp_thread_bytes(g1, PackedAccess::kp(w1), g2, PackedAccess::kp(w2), w1.rows()));
  const MlpSide a{&g1, &PackedAccess::tiles(w1), PackedAccess::panels(w1), PackedAccess::kp(w1),
                  make_epi(e1, c1.rs, nn)};
  const MlpSide b{&g2, &PackedAccess::tiles(w2), PackedAccess::panels(w2), PackedAccess::kp(w2),
                  make_epi(e2, c2.rs, nn)};
  try {
    run_mlp_panels(a, b, pool, static_cast<const uint8_t*>(x.data), c1.xs, n, w1.cols(), w1.rows(), y.ptr<float>(),
                   c2.ys / 4, scratch);
  } catch (...) {
    if (arena) arena->rewind(mark);
    throw;
  }
  if (arena) arena->rewind(mark);
}

}  // namespace cbx
