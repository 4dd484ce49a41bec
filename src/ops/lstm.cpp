#include "ops/lstm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/nn.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

using nn_detail::check_f32;

const float* opt_vec(const char* op, const char* name, const Tensor& t, int64_t n) {
  if (t.empty()) return nullptr;
  check_f32(op, name, t);
  CBX_CHECK(t.numel() == n && t.is_contiguous(), "%s: %s %s must be a contiguous [%lld]", op, name,
            t.shape_str().c_str(), (long long)n);
  return t.ptr<float>();
}

void check_state(const char* op, const Tensor& h, const Tensor& c, int64_t H) {
  check_f32(op, "h", h);
  check_f32(op, "c", c);
  CBX_CHECK(h.numel() == H && c.numel() == H && h.is_contiguous() && c.is_contiguous(),
            "%s: h %s and c %s must be contiguous [%lld]", op, h.shape_str().c_str(), c.shape_str().c_str(),
            (long long)H);
}

void check_w_hh(const char* op, const Tensor& w_hh) {
  check_f32(op, "w_hh", w_hh);
  CBX_CHECK(w_hh.ndim == 2 && w_hh.shape[0] == 4 * w_hh.shape[1] && w_hh.is_contiguous(),
            "%s: w_hh %s must be a contiguous [4H, H]", op, w_hh.shape_str().c_str());
}

// g[4H] += b_hh + W_hh h, then the gate nonlinearities update h and c.
void step(const NnKernels& k, float* g, const float* w_hh, const float* b_hh, float* h, float* c, int64_t H) {
  for (int64_t j = 0; j < 4 * H; ++j) g[j] += k.dot(w_hh + j * H, h, H) + (b_hh ? b_hh[j] : 0.f);
  k.lstm_gates(g, h, c, H);
}

}  // namespace

void lstm_cell(Tensor& gx, const Tensor& w_hh, const Tensor& b_hh, Tensor& h, Tensor& c, Isa isa) {
  const char* op = "lstm_cell";
  check_w_hh(op, w_hh);
  const int64_t H = w_hh.shape[1];
  check_f32(op, "gx", gx);
  CBX_CHECK(gx.numel() == 4 * H && gx.is_contiguous(), "%s: gx %s must be a contiguous [%lld] for w_hh %s", op,
            gx.shape_str().c_str(), (long long)(4 * H), w_hh.shape_str().c_str());
  check_state(op, h, c, H);
  const float* bh = opt_vec(op, "b_hh", b_hh, 4 * H);
  step(nn_kernels(isa), gx.ptr<float>(), w_hh.ptr<float>(), bh, h.ptr<float>(), c.ptr<float>(), H);
}

void lstm_layer(ThreadPool& pool, const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh, Tensor& h, Tensor& c, Tensor& y, Arena* arena, Isa isa) {
  const char* op = "lstm_layer";
  check_f32(op, "x", x);
  check_f32(op, "w_ih", w_ih);
  check_f32(op, "y", y);
  check_w_hh(op, w_hh);
  const int64_t H = w_hh.shape[1], G = 4 * H;
  CBX_CHECK(x.ndim == 2 && w_ih.ndim == 2 && w_ih.is_contiguous() && w_ih.shape[0] == G && w_ih.shape[1] == x.shape[1],
            "%s: x %s must be [T, In] and w_ih %s a contiguous [%lld, In]", op, x.shape_str().c_str(),
            w_ih.shape_str().c_str(), (long long)G);
  const int64_t T = x.shape[0], In = x.shape[1];
  CBX_CHECK(y.ndim == 2 && y.shape[0] == T && y.shape[1] == H, "%s: y %s must be [%lld, %lld]", op,
            y.shape_str().c_str(), (long long)T, (long long)H);
  check_state(op, h, c, H);
  const float* bi = opt_vec(op, "b_ih", b_ih, G);
  const float* bh = opt_vec(op, "b_hh", b_hh, G);
  CBX_CHECK(x.stride[0] % 4 == 0, "%s: x %s has a misaligned row stride", op, x.shape_str().c_str());
  const NnKernels& k = nn_kernels(isa);

  std::vector<float> heap;
  const size_t mark = arena ? arena->mark() : 0;
  float* buf;
  const int64_t need = T * G + In * G;
  if (arena) {
    buf = static_cast<float*>(arena->alloc_bytes(size_t(need) * 4, 64, "lstm gates"));
  } else {
    heap.resize(size_t(need));
    buf = heap.data();
  }
  float* gates = buf;       // [T, 4H]
  float* wt = buf + T * G;  // W_ih^T [In, 4H]
  const float* wi = w_ih.ptr<float>();
  for (int64_t j = 0; j < G; ++j)
    for (int64_t i = 0; i < In; ++i) wt[i * G + j] = wi[j * In + i];
  // gates = x W_ih^T + b_ih, rows split over the pool.
  auto proj = [&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < G; ++j) gates[t * G + j] = bi ? bi[j] : 0.f;
    if (t1 <= t0) return;
    GemmTile tile;
    tile.a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x.data) + t0 * x.stride[0]);
    tile.a_rs = x.stride[0] / 4;
    tile.a_cs = 1;
    tile.b = wt;
    tile.b_rs = G;
    tile.c = gates + t0 * G;
    tile.c_rs = G;
    tile.m = t1 - t0;
    tile.n = G;
    tile.k = In;
    k.gemm(tile);
  };
  if (T * G * In < nn_detail::kParallelMin || pool.size() <= 1) {
    proj(0, 1);
  } else {
    pool.run(proj);
  }
  float* hp = h.ptr<float>();
  float* cp = c.ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    step(k, gates + t * G, w_hh.ptr<float>(), bh, hp, cp, H);
    float* yr = nn_detail::row_ptr(y, t);
    for (int64_t j = 0; j < H; ++j) yr[j] = hp[j];
  }
  if (arena) arena->rewind(mark);
}

namespace {
// dst[i * ld + j] = src[j * n + i] for rows j in [j0, j1), in 32 x 32 tiles (both sides
// stay within a few cache lines per tile).
void transpose_rows(const float* src, int64_t n, int64_t j0, int64_t j1, float* dst, int64_t ld) {
  constexpr int64_t kT = 32;
  for (int64_t jb = j0; jb < j1; jb += kT)
    for (int64_t ib = 0; ib < n; ib += kT) {
      const int64_t je = std::min(j1, jb + kT), ie = std::min(n, ib + kT);
      for (int64_t j = jb; j < je; ++j)
        for (int64_t i = ib; i < ie; ++i) dst[i * ld + j] = src[j * n + i];
    }
}
}  // namespace

int64_t lstm_layer_batch_scratch(int64_t B, int64_t T, int64_t In, int64_t H) {
  return B * T * 4 * H + (In + H) * 4 * H;
}

void lstm_layer_batch(ThreadPool& pool, const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh, Tensor& h, Tensor& c, Tensor& y, Arena* arena, Isa isa) {
  const char* op = "lstm_layer_batch";
  check_f32(op, "x", x);
  check_f32(op, "w_ih", w_ih);
  check_w_hh(op, w_hh);
  const int64_t H = w_hh.shape[1], G = 4 * H;
  CBX_CHECK(x.ndim == 3 && x.is_contiguous() && w_ih.ndim == 2 && w_ih.is_contiguous() && w_ih.shape[0] == G &&
                w_ih.shape[1] == x.shape[2],
            "%s: x %s must be a contiguous [B, T, In] and w_ih %s a contiguous [%lld, In]", op, x.shape_str().c_str(),
            w_ih.shape_str().c_str(), (long long)G);
  const int64_t B = x.shape[0], T = x.shape[1], In = x.shape[2];
  check_f32(op, "h", h);
  check_f32(op, "c", c);
  CBX_CHECK(h.numel() == B * H && c.numel() == B * H && h.is_contiguous() && c.is_contiguous(),
            "%s: h %s and c %s must be contiguous [%lld, %lld]", op, h.shape_str().c_str(), c.shape_str().c_str(),
            (long long)B, (long long)H);
  float* yp = nullptr;
  if (!y.empty()) {
    check_f32(op, "y", y);
    CBX_CHECK(y.ndim == 3 && y.is_contiguous() && y.shape[0] == B && y.shape[1] == T && y.shape[2] == H,
              "%s: y %s must be a contiguous [%lld, %lld, %lld]", op, y.shape_str().c_str(), (long long)B, (long long)T,
              (long long)H);
    yp = y.ptr<float>();
  }
  const float* bi = opt_vec(op, "b_ih", b_ih, G);
  const float* bh = opt_vec(op, "b_hh", b_hh, G);
  const NnKernels& k = nn_kernels(isa);

  std::vector<float> heap;
  const size_t mark = arena ? arena->mark() : 0;
  const int64_t need = lstm_layer_batch_scratch(B, T, In, H);
  float* buf;
  if (arena) {
    buf = static_cast<float*>(arena->alloc_bytes(size_t(need) * 4, 64, "lstm_layer_batch gates"));
  } else {
    heap.resize(size_t(need));
    buf = heap.data();
  }
  float* gates = buf;            // [B, T, 4H]
  float* wti = buf + B * T * G;  // W_ih^T [In, 4H]
  float* wth = wti + In * G;     // W_hh^T [H, 4H]
  const float* xp = x.ptr<float>();
  const float* wi = w_ih.ptr<float>();
  const float* wh = w_hh.ptr<float>();
  float* hp = h.ptr<float>();
  float* cp = c.ptr<float>();
  // Threads own whole sequences: after the shared weight transposes there is no
  // synchronisation inside the recurrence (barriers per step cost a scheduler time slice
  // each when the machine is oversubscribed).
  auto body = [&](int ith, int nth) {
    int64_t j0, j1;
    ThreadPool::split(G, ith, nth, &j0, &j1);
    transpose_rows(wi, In, j0, j1, wti, G);
    transpose_rows(wh, H, j0, j1, wth, G);
    if (nth > 1) pool.barrier();
    int64_t b0, b1;
    ThreadPool::split(B, ith, nth, &b0, &b1);
    if (b1 <= b0) return;
    // gates = x W_ih^T + b_ih + b_hh for this thread's (b, t) rows.
    const int64_t r0 = b0 * T, r1 = b1 * T;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < G; ++j) gates[r * G + j] = (bi ? bi[j] : 0.f) + (bh ? bh[j] : 0.f);
    GemmTile tile;
    tile.a = xp + r0 * In;
    tile.a_rs = In;
    tile.a_cs = 1;
    tile.b = wti;
    tile.b_rs = G;
    tile.c = gates + r0 * G;
    tile.c_rs = G;
    tile.m = r1 - r0;
    tile.n = G;
    tile.k = In;
    k.gemm(tile);
    // The recurrence: g_t += h W_hh^T for the thread's sequences, then the gate updates.
    for (int64_t t = 0; t < T; ++t) {
      GemmTile rt;
      rt.a = hp + b0 * H;
      rt.a_rs = H;
      rt.a_cs = 1;
      rt.b = wth;
      rt.b_rs = G;
      rt.c = gates + (b0 * T + t) * G;
      rt.c_rs = T * G;
      rt.m = b1 - b0;
      rt.n = G;
      rt.k = H;
      k.gemm(rt);
      for (int64_t b = b0; b < b1; ++b) {
        k.lstm_gates(gates + (b * T + t) * G, hp + b * H, cp + b * H, H);
        if (yp) std::memcpy(yp + (b * T + t) * H, hp + b * H, size_t(H) * 4);
      }
    }
  };
  if (B < 2 || B * T * G * H < nn_detail::kParallelMin || pool.size() <= 1) {
    body(0, 1);
  } else {
    pool.run(body);
  }
  if (arena) arena->rewind(mark);
}

}  // namespace cbx
