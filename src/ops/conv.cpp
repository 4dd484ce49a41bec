// Convolutions as GEMMs over the nn kernel's GemmTile (C[m, n] += A[m, k] B[k, n]):
// rows of A are output channels (weights as stored), columns of B are output positions.
//   conv1d, stride 1: no im2col; B row (c, k) is the (padded) input row c shifted by
//     k * dilation, given to the kernel as a table of row offsets.
//   conv1d, stride > 1, conv2d: im2col in chunks of output positions (~4 MiB each).
//   conv_transpose1d: in conv_transpose.cpp (helpers shared through ops/conv_detail.h).
// Work is split into (group, 48-row, 256-column) tiles dealt round-robin to the threads.
// BF16 GEMM precision (ops/matmul.h: the thread's GemmPrecisionScope, which the models set
// from their weights and the user's choice), when the AMX kernels exist and the active ISA is asked
// for: stride-1 single-group conv1d with C_out <= Bf16Gemm::direct_conv_max_cout packs its input once as
// bf16 channel pairs and runs every tap on it (Bf16Gemm::Conv); other conv1d run through
// gemm_bf16_kmajor on the same B rows (offset table or im2col chunks); conv_transpose1d
// transposes w to [(o, k), c] rows in scratch and runs gemm_bf16_kmajor on x per chunk.
#include "ops/conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/debug_env.h"
#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/nn.h"
#include "ops/conv_detail.h"
#include "ops/matmul.h"
#include "ops/nn_util.h"

namespace cbx {
namespace conv_detail {

using nn_detail::check_f32;

// Every tile sets its C block to the bias (or zero) and then accumulates A B.
void run_job(const NnKernels& k, const GemmJob& j, int ith, int nth) {
  const int64_t mb = (j.t.m + kTileM - 1) / kTileM, nb = (j.t.n + kTileN - 1) / kTileN;
  const int64_t tasks = j.groups * mb * nb;
  for (int64_t task = ith; task < tasks; task += nth) {
    const int64_t g = task / (mb * nb), rem = task % (mb * nb);
    const int64_t m0 = (rem / nb) * kTileM, n0 = (rem % nb) * kTileN;
    GemmTile t = j.t;
    t.m = std::min(kTileM, j.t.m - m0);
    t.n = std::min(kTileN, j.t.n - n0);
    t.a = j.t.a + g * j.a_gs + m0 * j.t.a_rs;
    t.b = j.t.b + g * j.b_gs + n0;
    t.c = j.t.c + g * j.c_gs + m0 * j.t.c_rs + n0;
    for (int64_t i = 0; i < t.m; ++i) {
      float v = j.bias ? j.bias[g * j.t.m + m0 + i] : 0.f;
      float* c = t.c + i * t.c_rs;
      for (int64_t n = 0; n < t.n; ++n) c[n] = v;
    }
    k.gemm(t);
  }
}

const float* check_bias(const char* op, const Tensor& bias, int64_t cout) {
  if (bias.empty()) return nullptr;
  check_f32(op, "bias", bias);
  CBX_CHECK(bias.numel() == cout && bias.is_contiguous(), "%s: bias %s must be a contiguous [%lld]", op,
            bias.shape_str().c_str(), (long long)cout);
  return bias.ptr<float>();
}

int64_t row_stride_floats(const char* op, const char* name, const Tensor& t, int dim) {
  CBX_CHECK(t.stride[dim] % 4 == 0 && t.stride[dim] >= 0, "%s: %s %s has a misaligned stride", op, name,
            t.shape_str().c_str());
  return t.stride[dim] / 4;
}

// The conv GEMMs of one call run in bf16 (see the header comment).
bool conv_uses_bf16(Isa isa) {
  const GemmPrecision p = gemm_precision_for_f32_weights();  // Int8 (packed weights only): bf16 here
  return isa == active_isa() && (p == GemmPrecision::BF16 || p == GemmPrecision::Int8) && gemm_bf16_available();
}

// j's GEMM (every group, bias as the initial value) on the bf16 kernel.
void run_job_bf16(ThreadPool& pool, const GemmJob& j, Arena* arena) {
  for (int64_t g = 0; g < j.groups; ++g) {
    KMajorGemm q;
    q.a = j.t.a + g * j.a_gs;
    q.a_rs = j.t.a_rs;
    q.b = j.t.b + g * j.b_gs;
    q.b_off = j.t.b_off;
    q.b_rs = j.t.b_rs;
    q.c = j.t.c + g * j.c_gs;
    q.c_rs = j.t.c_rs;
    q.bias = j.bias ? j.bias + g * j.t.m : nullptr;
    q.m = j.t.m;
    q.n = j.t.n;
    q.k = j.t.k;
    CBX_ASSERT(j.t.a_cs == 1 && gemm_bf16_kmajor(pool, q, arena));
  }
}

bool prepack_disabled() { return debug_env().no_prepack; }  // CBX_DEBUG_NO_PREPACK=1

const Bf16Gemm* bf16_kernels() {
  return active_isa() == Isa::Avx512 ? matmul_bf16_gemm_avx512(matmul_kernels(Isa::Avx512)) : nullptr;
}

// Time tiles (32 steps) per input chunk of the direct conv: each thread packs the input
// columns of its own tiles chunk by chunk into a buffer of its own (C_in pairs x (32 n +
// halo) columns of bf16, ~128 KB: it stays in L2 while the tiles read it), instead of the
// whole packed input going out to memory between a packing pass and the tiles.
int64_t direct_chunk_tiles(int64_t cin_pad, int64_t halo, int64_t n_tt) {
  const int64_t cols = (int64_t(128) << 10) / (cin_pad * 2);
  return std::clamp<int64_t>((cols - halo) / 32, 1, std::max<int64_t>(n_tt, 1));
}

bool conv1d_runs_direct(int64_t cout, const Conv1dParams& p, Isa isa) {
  return conv_uses_bf16(isa) && p.stride == 1 && p.groups == 1 && cout <= bf16_kernels()->direct_conv_max_cout;
}

}  // namespace conv_detail

namespace {

using nn_detail::check_f32;
using namespace conv_detail;

// Stride-1, single-group conv1d in bf16 without im2col (Bf16Gemm::Conv), with the optional
// Snake of the input (snake_alpha) and residual (res, rows rs floats apart) of conv1d_snake.
void conv1d_direct_bf16(ThreadPool& pool, const Bf16Gemm& bk, const float* x, int64_t xs, int64_t Cin, int64_t T,
                        const float* w, int64_t Cout, int64_t K, const float* bias, float* y, int64_t ys, int64_t Tout,
                        const Conv1dParams& p, Arena* arena, const float* snake_alpha = nullptr,
                        const float* res = nullptr, int64_t rs = 0) {
  Scratch sc(arena);
  const int64_t cin_pad = round32(Cin), cout_pad = round32(Cout), halo = (K - 1) * p.dilation;
  const int64_t n_blocks = cin_pad / 32, o_tiles = cout_pad / 32, n_tt = (Tout + 31) / 32;
  const int64_t chunk_tt = direct_chunk_tiles(cin_pad, halo, n_tt), chunk_cols = chunk_tt * 32 + halo;
  const Conv1dPacked* pk = p.packed && !p.packed->empty() ? p.packed : nullptr;
  if (pk)
    CBX_CHECK(pk->w == w && pk->bias == bias && pk->cout == Cout && pk->cin == Cin && pk->k == K,
              "conv1d: the packed weights (%lld x %lld x %lld) were made from other weights than this call's "
              "[%lld, %lld, %lld]",
              (long long)pk->cout, (long long)pk->cin, (long long)pk->k, (long long)Cout, (long long)Cin, (long long)K);
  uint16_t* wp = pk ? nullptr : sc.get<uint16_t>(K * cin_pad * cout_pad, "conv1d bf16 weights");
  float* b16 = pk ? nullptr : sc.get<float>(cout_pad * 16, "conv1d bf16 bias rows");
  uint16_t* xbuf = sc.get<uint16_t>(int64_t(pool.size()) * (cin_pad * chunk_cols + 32), "conv1d bf16 input chunks");
  if (!pk)
    for (int64_t o = 0; o < cout_pad; ++o)
      for (int i = 0; i < 16; ++i) b16[o * 16 + i] = bias && o < Cout ? bias[o] : 0.f;
  Bf16Gemm::Conv c;
  c.wp = pk ? reinterpret_cast<const uint16_t*>(pk->wp.data()) : wp;
  c.bias16 = pk ? reinterpret_cast<const float*>(pk->bias16.data()) : b16;
  c.ys = ys;
  c.cout = Cout;
  c.cin_pad = cin_pad;
  c.k = K;
  c.dilation = p.dilation;
  c.rs = rs;
  // Items time-tile major, shared out in whole time tiles (WorkSplit): each thread works its
  // own block chunk_tt time tiles at a time, then takes single time tiles from the back of the
  // other blocks. A piece's Conv has its own time origin, column 0 of xp being padded input
  // position 32 tc0.
  const int64_t items = n_tt * o_tiles, work = Cout * Cin * K * Tout;
  WorkSplit& ws = pool.work_split();
  ws.reset(items, threads_for(pool, work), o_tiles);
  run_threads(pool, work, [&](int ith, int nth) {
    if (!pk) {
      int64_t a0, a1;
      ThreadPool::split(K * n_blocks, ith, nth, &a0, &a1);
      for (int64_t i = a0; i < a1; ++i) bk.conv_pack_w(w, Cout, Cin, K, cout_pad, i / n_blocks, i % n_blocks, wp);
      if (nth > 1) pool.barrier();
    }
    uint16_t* xp = xbuf + ith * (cin_pad * chunk_cols + 32);
    ws.run(ith, chunk_tt * o_tiles, o_tiles, [&](int64_t i0, int64_t i1) {
      const int64_t tc0 = i0 / o_tiles, tc1 = i1 / o_tiles, t_org = tc0 * 32;
      const int64_t cols = (tc1 - tc0) * 32 + halo;
      bk.conv_pack_x(x, xs, Cin, T, p.pad_left - t_org, cols, 0, cin_pad / 2, snake_alpha, xp);
      Bf16Gemm::Conv cc = c;
      cc.xp = xp;
      cc.cols = cols;
      cc.y = y + t_org;
      cc.res = res ? res + t_org : nullptr;
      cc.tout = Tout - t_org;
      bk.conv_tiles(cc, 0, (tc1 - tc0) * o_tiles);
    });
  });
}

// One batch item: x [Cin, T] (row stride xs), y [Cout, Tout] (row stride ys).
void conv1d_one(ThreadPool& pool, const NnKernels& k, const float* x, int64_t xs, int64_t Cin, int64_t T,
                const float* w, int64_t Cout, int64_t K, const float* bias, float* y, int64_t ys, int64_t Tout,
                const Conv1dParams& p, Arena* arena) {
  const int64_t G = p.groups, cin_g = Cin / G, cout_g = Cout / G, KK = cin_g * K;
  const int64_t s = p.stride, d = p.dilation, pl = p.pad_left, pr = p.pad_right;
  Scratch sc(arena);
  GemmJob j;
  j.t.a = w;
  j.t.a_rs = KK;
  j.t.a_cs = 1;
  j.t.c = y;
  j.t.c_rs = ys;
  j.t.m = cout_g;
  j.t.k = KK;
  j.groups = G;
  j.a_gs = cout_g * KK;
  j.c_gs = cout_g * ys;
  j.bias = bias;
  const int64_t work = Cout * KK * Tout;
  const bool bf16 = conv_uses_bf16(k.isa);
  // Direct path for few output channels: the k-major GEMM packs B once per 32 time columns
  // and k block, amortised over only C_out rows; where the direct kernel stops paying is
  // per kernel family (Bf16Gemm::direct_conv_max_cout: 128 on AMX, 512 on vdpbf16ps).
  if (conv1d_runs_direct(Cout, p, k.isa)) {
    conv1d_direct_bf16(pool, *bf16_kernels(), x, xs, Cin, T, w, Cout, K, bias, y, ys, Tout, p, arena);
    return;
  }
  if (s == 1) {
    const bool pad = pl > 0 || pr > 0;
    const int64_t Tp = T + pl + pr, xse = pad ? Tp : xs;
    float* xp = pad ? sc.get<float>(Cin * Tp, "conv1d padded input") : nullptr;
    int64_t* boff = sc.get<int64_t>(KK, "conv1d row offsets");
    for (int64_t c = 0; c < cin_g; ++c)
      for (int64_t kk = 0; kk < K; ++kk) boff[c * K + kk] = c * xse + kk * d;
    j.t.b = pad ? xp : x;
    j.t.b_off = boff;
    j.t.n = Tout;
    j.b_gs = cin_g * xse;
    auto pad_rows = [&](int ith, int nth) {
      int64_t c0, c1;
      ThreadPool::split(Cin, ith, nth, &c0, &c1);
      for (int64_t c = c0; c < c1; ++c) {
        float* r = xp + c * Tp;
        std::memset(r, 0, size_t(pl) * 4);
        std::memcpy(r + pl, x + c * xs, size_t(T) * 4);
        std::memset(r + pl + T, 0, size_t(pr) * 4);
      }
    };
    if (bf16) {
      if (pad) run_threads(pool, Cin * Tp * 16, pad_rows);
      run_job_bf16(pool, j, arena);
      return;
    }
    run_threads(pool, work, [&](int ith, int nth) {
      if (pad) {
        pad_rows(ith, nth);
        if (nth > 1) pool.barrier();
      }
      run_job(k, j, ith, nth);
    });
    return;
  }
  // Strided: im2col chunks col[(c, k), t - t0] = x[c, t s + k d - pl].
  const int64_t rows = Cin * K;
  const int64_t NT = conv1d_chunk_cols(rows, Tout);
  float* col = sc.get<float>(rows * NT, "conv1d im2col");
  j.t.b = col;
  j.t.b_rs = NT;
  j.b_gs = KK * NT;
  auto im2col = [&](int64_t t0, int64_t nt, int ith, int nth) {
    int64_t r0, r1;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + (r / K) * xs;
      const int64_t off = (r % K) * d - pl;
      float* cr = col + r * NT;
      for (int64_t t = 0; t < nt; ++t) {
        int64_t src = (t0 + t) * s + off;
        cr[t] = src >= 0 && src < T ? xr[src] : 0.f;
      }
    }
  };
  if (bf16) {
    for (int64_t t0 = 0; t0 < Tout; t0 += NT) {
      GemmJob jc = j;
      jc.t.c = y + t0;
      jc.t.n = std::min(NT, Tout - t0);
      run_threads(pool, rows * jc.t.n * 16, [&](int ith, int nth) { im2col(t0, jc.t.n, ith, nth); });
      run_job_bf16(pool, jc, arena);
    }
    return;
  }
  run_threads(pool, work, [&](int ith, int nth) {
    for (int64_t t0 = 0; t0 < Tout; t0 += NT) {
      const int64_t nt = std::min(NT, Tout - t0);
      im2col(t0, nt, ith, nth);
      if (nth > 1) pool.barrier();
      GemmJob jc = j;
      jc.t.c = y + t0;
      jc.t.n = nt;
      run_job(k, jc, ith, nth);
      if (nth > 1) pool.barrier();
    }
  });
}

}  // namespace

int64_t conv1d_out_len(int64_t T, int64_t K, const Conv1dParams& p) {
  int64_t num = T + p.pad_left + p.pad_right - p.dilation * (K - 1) - 1;
  return num < 0 ? 0 : num / p.stride + 1;
}

void conv1d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv1dParams& p,
            Arena* scratch, Isa isa) {
  const char* op = "conv1d";
  check_f32(op, "x", x);
  check_f32(op, "w", w);
  check_f32(op, "y", y);
  CBX_CHECK((x.ndim == 2 || x.ndim == 3) && y.ndim == x.ndim, "%s: x %s and y %s must both be [C, T] or [B, C, T]", op,
            x.shape_str().c_str(), y.shape_str().c_str());
  CBX_CHECK(w.ndim == 3 && w.is_contiguous(), "%s: w %s must be a contiguous [C_out, C_in/groups, K]", op,
            w.shape_str().c_str());
  CBX_CHECK(p.stride >= 1 && p.dilation >= 1 && p.pad_left >= 0 && p.pad_right >= 0 && p.groups >= 1,
            "%s: bad params stride %lld dilation %lld pad %lld/%lld groups %lld", op, (long long)p.stride,
            (long long)p.dilation, (long long)p.pad_left, (long long)p.pad_right, (long long)p.groups);
  const int64_t B = x.ndim == 3 ? x.shape[0] : 1, Cin = x.dim(-2), T = x.dim(-1);
  const int64_t Cout = w.shape[0], K = w.shape[2];
  CBX_CHECK(Cin % p.groups == 0 && Cout % p.groups == 0 && w.shape[1] * p.groups == Cin,
            "%s: w %s does not fit x %s with groups %lld", op, w.shape_str().c_str(), x.shape_str().c_str(),
            (long long)p.groups);
  const int64_t Tout = conv1d_out_len(T, K, p);
  CBX_CHECK(Tout >= 1, "%s: input %s too short for kernel %lld (dilation %lld, pads %lld/%lld)", op,
            x.shape_str().c_str(), (long long)K, (long long)p.dilation, (long long)p.pad_left, (long long)p.pad_right);
  CBX_CHECK(y.dim(-2) == Cout && y.dim(-1) == Tout && (x.ndim == 2 || y.shape[0] == B),
            "%s: y %s must be [%s%lld, %lld] for x %s and w %s", op, y.shape_str().c_str(), x.ndim == 3 ? "B, " : "",
            (long long)Cout, (long long)Tout, x.shape_str().c_str(), w.shape_str().c_str());
  const float* bp = check_bias(op, bias, Cout);
  const int64_t xs = row_stride_floats(op, "x", x, x.ndim - 2);
  const int64_t ys = row_stride_floats(op, "y", y, y.ndim - 2);
  const NnKernels& k = nn_kernels(isa);
  for (int64_t b = 0; b < B; ++b) {
    const float* xb =
        reinterpret_cast<const float*>(static_cast<const uint8_t*>(x.data) + (x.ndim == 3 ? b * x.stride[0] : 0));
    float* yb = reinterpret_cast<float*>(static_cast<uint8_t*>(y.data) + (y.ndim == 3 ? b * y.stride[0] : 0));
    conv1d_one(pool, k, xb, xs, Cin, T, w.ptr<float>(), Cout, K, bp, yb, ys, Tout, p, scratch);
  }
}

Conv1dPacked conv1d_pack(ThreadPool& pool, const Tensor& w, const Tensor& bias, Isa isa) {
  const char* op = "conv1d_pack";
  check_f32(op, "w", w);
  CBX_CHECK(w.ndim == 3 && w.is_contiguous(), "%s: w %s must be a contiguous [C_out, C_in, K]", op,
            w.shape_str().c_str());
  const int64_t Cout = w.shape[0], Cin = w.shape[1], K = w.shape[2];
  const float* bp = check_bias(op, bias, Cout);
  Conv1dPacked pk;
  const Bf16Gemm* bk = isa == Isa::Avx512 ? bf16_kernels() : nullptr;
  if (!bk || Cout > bk->direct_conv_max_cout || prepack_disabled()) return pk;
  const int64_t cin_pad = round32(Cin), cout_pad = round32(Cout), n_blocks = cin_pad / 32;
  pk.wp = HugePiece(size_t(K * cin_pad * cout_pad) * 2);
  pk.bias16 = HugePiece(size_t(cout_pad) * 16 * 4);
  auto* wp = reinterpret_cast<uint16_t*>(pk.wp.data());
  auto* b16 = reinterpret_cast<float*>(pk.bias16.data());
  for (int64_t o = 0; o < cout_pad; ++o)
    for (int i = 0; i < 16; ++i) b16[o * 16 + i] = bp && o < Cout ? bp[o] : 0.f;
  run_threads(pool, Cout * Cin * K, [&](int ith, int nth) {
    int64_t a0, a1;
    ThreadPool::split(K * n_blocks, ith, nth, &a0, &a1);
    for (int64_t i = a0; i < a1; ++i)
      bk->conv_pack_w(w.ptr<float>(), Cout, Cin, K, cout_pad, i / n_blocks, i % n_blocks, wp);
  });
  pk.w = w.ptr<float>();
  pk.bias = bp;
  pk.cout = Cout;
  pk.cin = Cin;
  pk.k = K;
  return pk;
}

void Conv1dPacks::add(ThreadPool& pool, const Tensor& w, const Tensor& bias, Isa isa) {
  if (find(w)) return;
  Conv1dPacked pk = conv1d_pack(pool, w, bias, isa);
  if (!pk.empty()) packs_.push_back(std::move(pk));
}

const Conv1dPacked* Conv1dPacks::find(const Tensor& w) const {
  for (const Conv1dPacked& pk : packs_)
    if (pk.w == w.data) return &pk;
  return nullptr;
}

size_t Conv1dPacks::bytes() const {
  size_t n = 0;
  for (const Conv1dPacked& pk : packs_) n += pk.wp.size() + pk.bias16.size();
  return n;
}

bool conv1d_snake_fused(int64_t cout, const Conv1dParams& p, Isa isa) { return conv1d_runs_direct(cout, p, isa); }

void conv1d_snake(ThreadPool& pool, const Tensor& x, const Tensor& alpha, const Tensor& w, const Tensor& bias,
                  const Tensor& residual, Tensor& y, const Conv1dParams& p, Arena* scratch, Isa isa) {
  const char* op = "conv1d_snake";
  check_f32(op, "x", x);
  check_f32(op, "alpha", alpha);
  check_f32(op, "w", w);
  check_f32(op, "y", y);
  CBX_CHECK(x.ndim == 2 && y.ndim == 2, "%s: x %s and y %s must both be [C, T]", op, x.shape_str().c_str(),
            y.shape_str().c_str());
  CBX_CHECK(w.ndim == 3 && w.is_contiguous() && w.shape[1] == x.shape[0],
            "%s: w %s must be a contiguous [C_out, C_in, K] for x %s", op, w.shape_str().c_str(),
            x.shape_str().c_str());
  CBX_CHECK(alpha.ndim == 1 && alpha.is_contiguous() && alpha.shape[0] == x.shape[0],
            "%s: alpha %s must be a contiguous [%lld]", op, alpha.shape_str().c_str(), (long long)x.shape[0]);
  const int64_t Cin = x.shape[0], T = x.shape[1], Cout = w.shape[0], K = w.shape[2];
  CBX_CHECK(conv1d_snake_fused(Cout, p, isa),
            "%s: no fused kernel here (needs BF16 precision on AVX-512 bf16 kernels, stride 1, one group, "
            "C_out <= the direct conv limit); got stride %lld groups %lld C_out %lld",
            op, (long long)p.stride, (long long)p.groups, (long long)Cout);
  CBX_CHECK(p.dilation >= 1 && p.pad_left >= 0 && p.pad_right >= 0, "%s: bad params dilation %lld pad %lld/%lld", op,
            (long long)p.dilation, (long long)p.pad_left, (long long)p.pad_right);
  const int64_t Tout = conv1d_out_len(T, K, p);
  CBX_CHECK(Tout >= 1, "%s: input %s too short for kernel %lld (dilation %lld)", op, x.shape_str().c_str(),
            (long long)K, (long long)p.dilation);
  CBX_CHECK(y.shape[0] == Cout && y.shape[1] == Tout, "%s: y %s must be [%lld, %lld]", op, y.shape_str().c_str(),
            (long long)Cout, (long long)Tout);
  CBX_CHECK(y.data != x.data, "%s: y must not be x", op);
  const float* rp = nullptr;
  int64_t rs = 0;
  if (!residual.empty()) {
    check_f32(op, "residual", residual);
    CBX_CHECK(residual.ndim == 2 && residual.shape[0] == Cout && residual.shape[1] == Tout,
              "%s: residual %s must be [%lld, %lld]", op, residual.shape_str().c_str(), (long long)Cout,
              (long long)Tout);
    rp = residual.ptr<float>();
    rs = row_stride_floats(op, "residual", residual, 0);
  }
  const float* bp = check_bias(op, bias, Cout);
  conv1d_direct_bf16(pool, *bf16_kernels(), x.ptr<float>(), row_stride_floats(op, "x", x, 0), Cin, T, w.ptr<float>(),
                     Cout, K, bp, y.ptr<float>(), row_stride_floats(op, "y", y, 0), Tout, p, scratch,
                     alpha.ptr<float>(), rp, rs);
}

void conv2d(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
            Arena* arena, Isa isa) {
  const char* op = "conv2d";
  check_f32(op, "x", x);
  check_f32(op, "w", w);
  check_f32(op, "y", y);
  CBX_CHECK(x.ndim == 3 && y.ndim == 3 && y.is_contiguous(),
            "%s: x %s must be [C, H, W] and y %s a contiguous [C_out, H_out, W_out]", op, x.shape_str().c_str(),
            y.shape_str().c_str());
  CBX_CHECK(w.ndim == 4 && w.is_contiguous() && w.shape[1] == x.shape[0],
            "%s: w %s must be a contiguous [C_out, C_in, kh, kw] with C_in of x %s", op, w.shape_str().c_str(),
            x.shape_str().c_str());
  CBX_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
            "%s: bad params stride (%lld, %lld) padding (%lld, %lld)", op, (long long)p.stride_h, (long long)p.stride_w,
            (long long)p.pad_h, (long long)p.pad_w);
  const int64_t Cin = x.shape[0], H = x.shape[1], W = x.shape[2];
  const int64_t Cout = w.shape[0], kh = w.shape[2], kw = w.shape[3];
  const int64_t hn = H + 2 * p.pad_h - kh, wn = W + 2 * p.pad_w - kw;
  const int64_t Ho = hn < 0 ? 0 : hn / p.stride_h + 1, Wo = wn < 0 ? 0 : wn / p.stride_w + 1;
  CBX_CHECK(Ho >= 1 && Wo >= 1 && y.shape[0] == Cout && y.shape[1] == Ho && y.shape[2] == Wo,
            "%s: y %s must be [%lld, %lld, %lld] for x %s and w %s", op, y.shape_str().c_str(), (long long)Cout,
            (long long)Ho, (long long)Wo, x.shape_str().c_str(), w.shape_str().c_str());
  const float* bp = check_bias(op, bias, Cout);
  const int64_t xs0 = row_stride_floats(op, "x", x, 0), xs1 = row_stride_floats(op, "x", x, 1);
  const NnKernels& k = nn_kernels(isa);
  const int64_t KK = Cin * kh * kw;
  const int64_t NR = std::clamp<int64_t>(kChunkFloats / (KK * Wo), 1, Ho);
  const int64_t ncol = NR * Wo;
  Scratch sc(arena);
  float* col = sc.get<float>(KK * ncol, "conv2d im2col");
  const float* xp = x.ptr<float>();
  GemmJob j;
  j.t.a = w.ptr<float>();
  j.t.a_rs = KK;
  j.t.b = col;
  j.t.b_rs = ncol;
  j.t.c_rs = Ho * Wo;
  j.t.m = Cout;
  j.t.k = KK;
  j.bias = bp;
  run_threads(pool, Cout * KK * Ho * Wo, [&](int ith, int nth) {
    for (int64_t h0 = 0; h0 < Ho; h0 += NR) {
      const int64_t nr = std::min(NR, Ho - h0);
      int64_t r0, r1;
      ThreadPool::split(KK, ith, nth, &r0, &r1);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t c = r / (kh * kw), ky = (r / kw) % kh, kx = r % kw;
        float* cr = col + r * ncol;
        for (int64_t hh = 0; hh < nr; ++hh) {
          const int64_t hi = (h0 + hh) * p.stride_h + ky - p.pad_h;
          float* dst = cr + hh * Wo;
          if (hi < 0 || hi >= H) {
            std::memset(dst, 0, size_t(Wo) * 4);
            continue;
          }
          const float* xr = xp + c * xs0 + hi * xs1;
          for (int64_t wo = 0; wo < Wo; ++wo) {
            const int64_t wi = wo * p.stride_w + kx - p.pad_w;
            dst[wo] = wi >= 0 && wi < W ? xr[wi] : 0.f;
          }
        }
      }
      if (nth > 1) pool.barrier();
      GemmJob jc = j;
      jc.t.c = y.ptr<float>() + h0 * Wo;
      jc.t.n = nr * Wo;
      run_job(k, jc, ith, nth);
      if (nth > 1) pool.barrier();
    }
  });
}

}  // namespace cbx
