#include "ops/norm.h"

#include <cmath>

#include "core/error.h"
#include "kernels/nn.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

using nn_detail::check_f32;
using nn_detail::parallel_rows;
using nn_detail::row_ptr;

const float* param_vec(const char* op, const char* name, const Tensor& p, int64_t n) {
  if (p.empty()) return nullptr;
  check_f32(op, name, p);
  CBX_CHECK(p.numel() == n && (p.ndim == 1 || p.is_contiguous()), "%s: %s %s must be a contiguous vector of %lld", op,
            name, p.shape_str().c_str(), (long long)n);
  return p.ptr<float>();
}

void check_xy(const char* op, const Tensor& x, const Tensor& y) {
  check_f32(op, "x", x);
  check_f32(op, "y", y);
  nn_detail::check_same_shape(op, x, "x", y, "y");
}

}  // namespace

void layer_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Isa isa) {
  check_xy("layer_norm", x, y);
  const int64_t D = x.cols();
  const float* wp = param_vec("layer_norm", "weight", w, D);
  const float* bp = param_vec("layer_norm", "bias", b, D);
  const NnKernels& k = nn_kernels(isa);
  parallel_rows(pool, x.rows(), D, false,
                [&](int64_t r, int64_t, int64_t) { k.layer_norm(row_ptr(x, r), row_ptr(y, r), D, wp, bp, eps); });
}

void layer_norm_channels(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                         Isa isa) {
  const char* op = "layer_norm_channels";
  check_xy(op, x, y);
  CBX_CHECK(x.ndim == 2 || x.ndim == 3, "%s: x %s must be [C, T] or [B, C, T]", op, x.shape_str().c_str());
  const int64_t C = x.dim(-2), T = x.dim(-1), B = x.ndim == 3 ? x.shape[0] : 1;
  const float* wp = param_vec(op, "weight", w, C);
  const float* bp = param_vec(op, "bias", b, C);
  const NnKernels& k = nn_kernels(isa);
  // Column blocks of up to kBlk time steps; per block: mean and variance over the C rows
  // accumulated with the row kernels, then y = (x - mean) * rstd * w_c + b_c.
  constexpr int64_t kBlk = 512;
  const int64_t nblk = (T + kBlk - 1) / kBlk, items = B * nblk;
  auto run = [&](int64_t i0, int64_t i1) {
    float mean[kBlk], m2[kBlk], tmp[kBlk];
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t bb = it / nblk, t0 = (it % nblk) * kBlk, n = T - t0 < kBlk ? T - t0 : kBlk;
      auto xr = [&](int64_t c) { return row_ptr(x, bb * C + c) + t0; };
      auto yr = [&](int64_t c) { return row_ptr(y, bb * C + c) + t0; };
      for (int64_t t = 0; t < n; ++t) mean[t] = m2[t] = 0.f;
      for (int64_t c = 0; c < C; ++c) k.binary(Binary::Add, mean, xr(c), mean, n, false);
      k.unary(Unary::Scale, mean, mean, n, 1.f / float(C), 0.f);
      for (int64_t c = 0; c < C; ++c) {
        k.binary(Binary::Sub, xr(c), mean, tmp, n, false);
        k.binary(Binary::Mul, tmp, tmp, tmp, n, false);
        k.binary(Binary::Add, m2, tmp, m2, n, false);
      }
      for (int64_t t = 0; t < n; ++t) m2[t] = 1.f / std::sqrt(m2[t] / float(C) + eps);  // rstd
      for (int64_t c = 0; c < C; ++c) {
        float* yc = yr(c);
        k.binary(Binary::Sub, xr(c), mean, yc, n, false);
        k.binary(Binary::Mul, yc, m2, yc, n, false);
        k.unary(Unary::Affine, yc, yc, n, wp ? wp[c] : 1.f, bp ? bp[c] : 0.f);
      }
    }
  };
  if (B * C * T < nn_detail::kParallelMin || items < 2 || pool.size() <= 1) {
    run(0, items);
    return;
  }
  pool.run([&](int ith, int nth) {
    int64_t b0, b1;
    ThreadPool::split(items, ith, nth, &b0, &b1);
    run(b0, b1);
  });
}

void rms_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, float eps, Tensor& y, Isa isa) {
  check_xy("rms_norm", x, y);
  const int64_t D = x.cols();
  const float* wp = param_vec("rms_norm", "weight", w, D);
  const NnKernels& k = nn_kernels(isa);
  parallel_rows(pool, x.rows(), D, false,
                [&](int64_t r, int64_t, int64_t) { k.rms_norm(row_ptr(x, r), row_ptr(y, r), D, wp, eps); });
}

void softmax(ThreadPool& pool, const Tensor& x, Tensor& y, Isa isa) {
  check_xy("softmax", x, y);
  const int64_t D = x.cols();
  const NnKernels& k = nn_kernels(isa);
  parallel_rows(pool, x.rows(), D, false,
                [&](int64_t r, int64_t, int64_t) { k.softmax(row_ptr(x, r), row_ptr(y, r), D); });
}

namespace {

constexpr int64_t kMaxRopeD = 1024;

void check_rope(const char* op, const Tensor& x, const Tensor& positions, const Tensor& y) {
  check_xy(op, x, y);
  CBX_CHECK(x.ndim == 2 || x.ndim == 3, "%s: x %s must be [T, D] or [T, H, D]", op, x.shape_str().c_str());
  const int64_t T = x.shape[0], D = x.cols();
  CBX_CHECK(D % 2 == 0 && D <= kMaxRopeD, "%s: head dim %lld of x %s must be even and <= %lld", op, (long long)D,
            x.shape_str().c_str(), (long long)kMaxRopeD);
  CBX_CHECK(positions.data && positions.dtype == DType::I32 && positions.numel() == T && positions.is_contiguous(),
            "%s: positions %s (%s) must be contiguous i32 [%lld] for x %s", op, positions.shape_str().c_str(),
            dtype_name(positions.dtype), (long long)T, x.shape_str().c_str());
}

void rope_apply(ThreadPool& pool, const Tensor& x, const Tensor& positions, const float* inv_freq, Tensor& y, Isa isa);

}  // namespace

void rope(ThreadPool& pool, const Tensor& x, const Tensor& positions, float theta, const Tensor& freq_factors,
          Tensor& y, Isa isa) {
  const char* op = "rope";
  check_rope(op, x, positions, y);
  const int64_t D = x.cols(), half = D / 2;
  const float* ff = param_vec(op, "freq_factors", freq_factors, half);
  float inv_freq[kMaxRopeD / 2];
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = float(1.0 / std::pow(double(theta), double(2 * i) / double(D)));
    if (ff) inv_freq[i] /= ff[i];
  }
  rope_apply(pool, x, positions, inv_freq, y, isa);
}

void rope_inv_freq(ThreadPool& pool, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                   Isa isa) {
  const char* op = "rope_inv_freq";
  check_rope(op, x, positions, y);
  const float* f = param_vec(op, "inv_freq", inv_freq, x.cols() / 2);
  CBX_CHECK(f != nullptr, "%s: inv_freq is empty", op);
  rope_apply(pool, x, positions, f, y, isa);
}

void rope_inv_freq_llama3(int64_t D, float theta, float factor, float low, float high, float orig_max_pos, float* out) {
  const float two_pi = 6.283185307179586f;
  for (int64_t i = 0; i < D / 2; ++i) {
    float inv = 1.f / std::pow(theta, float(2 * i) / float(D));
    if (factor > 0.f) {
      const float wavelen = two_pi / inv;
      if (wavelen > orig_max_pos / low) {
        inv = inv / factor;
      } else if (wavelen >= orig_max_pos / high) {
        const float smooth = (orig_max_pos / wavelen - low) / (high - low);
        inv = (1.f - smooth) * inv / factor + smooth * inv;
      }
    }
    out[i] = inv;
  }
}

namespace {

void rope_apply(ThreadPool& pool, const Tensor& x, const Tensor& positions, const float* inv_freq, Tensor& y, Isa isa) {
  const int64_t T = x.shape[0], H = x.ndim == 3 ? x.shape[1] : 1, D = x.cols(), half = D / 2;
  constexpr int64_t kMaxD = kMaxRopeD;
  const int32_t* pos = positions.ptr<int32_t>();
  const NnKernels& k = nn_kernels(isa);
  auto do_rows = [&](int64_t t0, int64_t t1) {
    float cs[kMaxD / 2], sn[kMaxD / 2];
    for (int64_t t = t0; t < t1; ++t) {
      const float p = float(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        float a = p * inv_freq[i];
        cs[i] = std::cos(a);
        sn[i] = std::sin(a);
      }
      for (int64_t h = 0; h < H; ++h) {
        int64_t r = t * H + h;
        k.rope(row_ptr(x, r), row_ptr(y, r), half, cs, sn);
      }
    }
  };
  if (T * H * D < nn_detail::kParallelMin || T < 2) {
    do_rows(0, T);
    return;
  }
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(T, ith, nth, &b, &e);
    do_rows(b, e);
  });
}

}  // namespace

}  // namespace cbx
