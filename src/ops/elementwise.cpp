#include "ops/elementwise.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/nn.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

using nn_detail::check_f32;
using nn_detail::parallel_rows;
using nn_detail::row_ptr;

void run_unary(ThreadPool& pool, const char* op, Unary u, const Tensor& x, Tensor& y, float p0, float p1, Isa isa) {
  check_f32(op, "x", x);
  check_f32(op, "y", y);
  nn_detail::check_same_shape(op, x, "x", y, "y");
  const NnKernels& k = nn_kernels(isa);
  parallel_rows(pool, x.rows(), x.cols(), true, [&](int64_t r, int64_t c0, int64_t c1) {
    k.unary(u, row_ptr(x, r) + c0, row_ptr(y, r) + c0, c1 - c0, p0, p1);
  });
}

// x: [C, T] or [B, C, T]; per-channel parameter vectors of length C.
void check_channels(const char* op, const Tensor& x, const Tensor& p, const char* pn) {
  CBX_CHECK(x.ndim == 2 || x.ndim == 3, "%s: x %s must be [C, T] or [B, C, T]", op, x.shape_str().c_str());
  check_f32(op, pn, p);
  CBX_CHECK(p.numel() == x.dim(-2) && nn_detail::inner_contiguous(p) && (p.ndim == 1 || p.is_contiguous()),
            "%s: %s %s must hold one contiguous value per channel of x %s", op, pn, p.shape_str().c_str(),
            x.shape_str().c_str());
}

void run_binary(ThreadPool& pool, const char* op, Binary bop, const Tensor& a, const Tensor& b, Tensor& y, Isa isa) {
  check_f32(op, "a", a);
  check_f32(op, "b", b);
  check_f32(op, "y", y);
  nn_detail::check_same_shape(op, a, "a", y, "y");
  CBX_CHECK(b.ndim <= a.ndim, "%s: b %s has more dims than a %s", op, b.shape_str().c_str(), a.shape_str().c_str());
  // b's strides over a's leading dims (0 where broadcast).
  int64_t bstride[kMaxDims] = {0, 0, 0, 0};
  const int lead = a.ndim - b.ndim;
  for (int i = 0; i < b.ndim; ++i) {
    int64_t ad = a.shape[lead + i], bd = b.shape[i];
    CBX_CHECK(bd == ad || bd == 1, "%s: b %s does not broadcast to a %s", op, b.shape_str().c_str(),
              a.shape_str().c_str());
    if (lead + i < a.ndim - 1) bstride[lead + i] = bd == 1 ? 0 : b.stride[i];
  }
  const bool b_scalar = b.shape[b.ndim - 1] == 1 && a.cols() != 1;
  const NnKernels& k = nn_kernels(isa);
  const int nd = a.ndim;
  parallel_rows(pool, a.rows(), a.cols(), true, [&](int64_t r, int64_t c0, int64_t c1) {
    int64_t off = 0, rem = r;
    for (int i = nd - 2; i >= 0; --i) {
      off += (rem % a.shape[i]) * bstride[i];
      rem /= a.shape[i];
    }
    const float* bp = reinterpret_cast<const float*>(static_cast<const uint8_t*>(b.data) + off);
    k.binary(bop, row_ptr(a, r) + c0, b_scalar ? bp : bp + c0, row_ptr(y, r) + c0, c1 - c0, b_scalar);
  });
}

// Element-by-element copy of same-shape plain tensors with any strides.
void copy_strided_impl(const Tensor& src, const Tensor& dst) {
  const size_t es = type_traits(src.dtype).block_bytes;
  const int nd = src.ndim;
  const int64_t cols = src.cols(), rows = src.rows();
  const bool rows_contig = cols <= 1 || (src.stride[nd - 1] == int64_t(es) && dst.stride[nd - 1] == int64_t(es));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t so = 0, d_o = 0, rem = r;
    for (int i = nd - 2; i >= 0; --i) {
      int64_t idx = rem % src.shape[i];
      rem /= src.shape[i];
      so += idx * src.stride[i];
      d_o += idx * dst.stride[i];
    }
    const uint8_t* s = static_cast<const uint8_t*>(src.data) + so;
    uint8_t* d = static_cast<uint8_t*>(dst.data) + d_o;
    if (rows_contig) {
      std::memmove(d, s, size_t(cols) * es);
    } else {
      for (int64_t c = 0; c < cols; ++c) std::memcpy(d + c * dst.stride[nd - 1], s + c * src.stride[nd - 1], es);
    }
  }
}

}  // namespace

void relu(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "relu", Unary::Relu, x, y, 0, 0, isa); }
void leaky_relu(ThreadPool& p, const Tensor& x, Tensor& y, float slope, Isa isa) {
  run_unary(p, "leaky_relu", Unary::LeakyRelu, x, y, slope, 0, isa);
}
void elu(ThreadPool& p, const Tensor& x, Tensor& y, float alpha, Isa isa) {
  run_unary(p, "elu", Unary::Elu, x, y, alpha, 0, isa);
}
void gelu(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "gelu", Unary::Gelu, x, y, 0, 0, isa); }
void gelu_tanh(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) {
  run_unary(p, "gelu_tanh", Unary::GeluTanh, x, y, 0, 0, isa);
}
void silu(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "silu", Unary::Silu, x, y, 0, 0, isa); }
void mish(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "mish", Unary::Mish, x, y, 0, 0, isa); }
void tanh_op(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "tanh", Unary::Tanh, x, y, 0, 0, isa); }
void sigmoid(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) {
  run_unary(p, "sigmoid", Unary::Sigmoid, x, y, 0, 0, isa);
}
void softplus(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) {
  run_unary(p, "softplus", Unary::Softplus, x, y, 0, 0, isa);
}
void exp_op(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "exp", Unary::Exp, x, y, 0, 0, isa); }
void sin_op(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "sin", Unary::Sin, x, y, 0, 0, isa); }
void scale(ThreadPool& p, const Tensor& x, Tensor& y, float s, Isa isa) {
  run_unary(p, "scale", Unary::Scale, x, y, s, 0, isa);
}
void affine(ThreadPool& p, const Tensor& x, Tensor& y, float a, float b, Isa isa) {
  run_unary(p, "affine", Unary::Affine, x, y, a, b, isa);
}
void clamp(ThreadPool& p, const Tensor& x, Tensor& y, float lo, float hi, Isa isa) {
  CBX_CHECK(lo <= hi, "clamp: lo %g > hi %g for x %s", double(lo), double(hi), x.shape_str().c_str());
  run_unary(p, "clamp", Unary::Clamp, x, y, lo, hi, isa);
}
void abs_op(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) { run_unary(p, "abs", Unary::Abs, x, y, 0, 0, isa); }
void copy_tensor(ThreadPool& p, const Tensor& x, Tensor& y, Isa isa) {
  run_unary(p, "copy", Unary::Copy, x, y, 0, 0, isa);
}

void snake(ThreadPool& pool, const Tensor& x, const Tensor& alpha, Tensor& y, Isa isa) {
  check_f32("snake", "x", x);
  check_f32("snake", "y", y);
  nn_detail::check_same_shape("snake", x, "x", y, "y");
  check_channels("snake", x, alpha, "alpha");
  const NnKernels& k = nn_kernels(isa);
  const int64_t C = x.dim(-2);
  const float* a = alpha.ptr<float>();
  parallel_rows(pool, x.rows(), x.cols(), true, [&](int64_t r, int64_t c0, int64_t c1) {
    k.snake(row_ptr(x, r) + c0, row_ptr(y, r) + c0, c1 - c0, a[r % C]);
  });
}

void channel_affine(ThreadPool& pool, const Tensor& x, const Tensor& sc, const Tensor& sh, Tensor& y, Isa isa) {
  const char* op = "channel_affine";
  check_f32(op, "x", x);
  check_f32(op, "y", y);
  nn_detail::check_same_shape(op, x, "x", y, "y");
  check_channels(op, x, sc, "scale");
  if (!sh.empty()) check_channels(op, x, sh, "shift");
  const NnKernels& k = nn_kernels(isa);
  const int64_t C = x.dim(-2);
  const float* s = sc.ptr<float>();
  const float* b = sh.empty() ? nullptr : sh.ptr<float>();
  parallel_rows(pool, x.rows(), x.cols(), true, [&](int64_t r, int64_t c0, int64_t c1) {
    int64_t c = r % C;
    k.unary(Unary::Affine, row_ptr(x, r) + c0, row_ptr(y, r) + c0, c1 - c0, s[c], b ? b[c] : 0.f);
  });
}

void add(ThreadPool& p, const Tensor& a, const Tensor& b, Tensor& y, Isa isa) {
  run_binary(p, "add", Binary::Add, a, b, y, isa);
}
void sub(ThreadPool& p, const Tensor& a, const Tensor& b, Tensor& y, Isa isa) {
  run_binary(p, "sub", Binary::Sub, a, b, y, isa);
}
void mul(ThreadPool& p, const Tensor& a, const Tensor& b, Tensor& y, Isa isa) {
  run_binary(p, "mul", Binary::Mul, a, b, y, isa);
}

void get_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  const char* op = "get_rows";
  CBX_CHECK(table.data && table.ndim == 2, "%s: table %s must be 2-D [V, D]", op, table.shape_str().c_str());
  const TypeTraits& tr = type_traits(table.dtype);
  CBX_CHECK(tr.is_float && tr.to_float != nullptr, "%s: table dtype %s is not a float type", op, tr.name);
  CBX_CHECK(ids.data && ids.dtype == DType::I32 && ids.is_contiguous(), "%s: ids %s must be contiguous i32, got %s", op,
            ids.shape_str().c_str(), dtype_name(ids.dtype));
  check_f32(op, "out", out);
  const int64_t V = table.shape[0], D = table.shape[1], N = ids.numel();
  CBX_CHECK(out.ndim == 2 && out.shape[0] == N && out.shape[1] == D,
            "%s: out %s must be [%lld, %lld] for ids %s and table %s", op, out.shape_str().c_str(), (long long)N,
            (long long)D, ids.shape_str().c_str(), table.shape_str().c_str());
  CBX_CHECK(tr.is_quantized || table.stride[1] == int64_t(tr.block_bytes), "%s: table %s rows must be contiguous", op,
            table.shape_str().c_str());
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < N; ++i) {
    CBX_CHECK(id[i] >= 0 && id[i] < V, "%s: id %d at %lld outside table %s", op, id[i], (long long)i,
              table.shape_str().c_str());
    const uint8_t* src = static_cast<const uint8_t*>(table.data) + int64_t(id[i]) * table.stride[0];
    tr.to_float(src, row_ptr(out, i), D);
  }
}

void copy_strided(const Tensor& src, Tensor& dst) {
  const char* op = "copy_strided";
  CBX_CHECK(
      src.data && dst.data && src.dtype == dst.dtype && same_shape(src, dst) && !type_traits(src.dtype).is_quantized,
      "%s: src %s %s and dst %s %s must be same-shape plain tensors of one dtype", op, dtype_name(src.dtype),
      src.shape_str().c_str(), dtype_name(dst.dtype), dst.shape_str().c_str());
  if (src.numel() > 0) copy_strided_impl(src, dst);
}

void upsample_nearest(const Tensor& x, int64_t s, Tensor& y) {
  const char* op = "upsample_nearest";
  check_f32(op, "x", x);
  check_f32(op, "y", y);
  CBX_CHECK(s >= 1 && x.ndim == y.ndim && x.rows() == y.rows() && y.cols() == s * x.cols(),
            "%s: y %s must be x %s with the last dim times %lld", op, y.shape_str().c_str(), x.shape_str().c_str(),
            (long long)s);
  for (int i = 0; i + 1 < x.ndim; ++i)
    CBX_CHECK(x.shape[i] == y.shape[i], "%s: y %s and x %s differ off the last dim", op, y.shape_str().c_str(),
              x.shape_str().c_str());
  const int64_t T = x.cols();
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* xr = row_ptr(x, r);
    float* yr = row_ptr(y, r);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < s; ++j) yr[t * s + j] = xr[t];
  }
}

void pad1d(const Tensor& x, int64_t left, int64_t right, PadMode mode, Tensor& y) {
  const char* op = "pad1d";
  check_f32(op, "x", x);
  check_f32(op, "y", y);
  const int64_t T = x.cols();
  CBX_CHECK(
      left >= 0 && right >= 0 && x.ndim == y.ndim && x.rows() == y.rows() && y.cols() == left + T + right && T >= 1,
      "%s: y %s must be x %s padded by %lld + %lld", op, y.shape_str().c_str(), x.shape_str().c_str(), (long long)left,
      (long long)right);
  CBX_CHECK(mode != PadMode::Reflect || (left < T && right < T),
            "%s: reflect pads %lld/%lld need more than %lld samples (x %s)", op, (long long)left, (long long)right,
            (long long)T, x.shape_str().c_str());
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* xr = row_ptr(x, r);
    float* yr = row_ptr(y, r);
    std::memmove(yr + left, xr, size_t(T) * 4);
    for (int64_t i = 0; i < left; ++i) {
      const int64_t src = left - i;  // y[i] mirrors x[left - i]
      yr[i] = mode == PadMode::Zero ? 0.f : mode == PadMode::Reflect ? xr[src] : xr[0];
    }
    for (int64_t i = 0; i < right; ++i)
      yr[left + T + i] = mode == PadMode::Zero ? 0.f : mode == PadMode::Reflect ? xr[T - 2 - i] : xr[T - 1];
  }
}

void row_mean_std(const Tensor& x, Tensor& mean, Tensor& std_out, bool unbiased) {
  const char* op = "row_mean_std";
  check_f32(op, "x", x);
  check_f32(op, "mean", mean);
  const int64_t R = x.rows(), T = x.cols();
  CBX_CHECK(mean.numel() == R && mean.is_contiguous(), "%s: mean %s must hold %lld values for x %s", op,
            mean.shape_str().c_str(), (long long)R, x.shape_str().c_str());
  float* sp = nullptr;
  if (!std_out.empty()) {
    check_f32(op, "std", std_out);
    CBX_CHECK(std_out.numel() == R && std_out.is_contiguous(), "%s: std %s must hold %lld values for x %s", op,
              std_out.shape_str().c_str(), (long long)R, x.shape_str().c_str());
    sp = std_out.ptr<float>();
  }
  float* mp = mean.ptr<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = row_ptr(x, r);
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += xr[t];
    const double m = s / double(T);
    if (sp) {
      double v = 0;
      for (int64_t t = 0; t < T; ++t) v += (xr[t] - m) * (xr[t] - m);
      sp[r] = float(std::sqrt(v / double(unbiased ? T - 1 : T)));
    }
    mp[r] = float(m);
  }
}

void concat(std::initializer_list<Tensor> inputs, int dim, Tensor& out) {
  concat(inputs.begin(), int(inputs.size()), dim, out);
}

void concat(const Tensor* in, int n, int dim, Tensor& out) {
  const char* op = "concat";
  CBX_CHECK(n >= 1 && out.data, "%s: needs at least one input and an output", op);
  const int nd = out.ndim;
  const int d = dim < 0 ? dim + nd : dim;
  CBX_CHECK(d >= 0 && d < nd, "%s: dim %d out of range for out %s", op, dim, out.shape_str().c_str());
  CBX_CHECK(!type_traits(out.dtype).is_quantized, "%s: quantized out (%s) not supported", op, dtype_name(out.dtype));
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const Tensor& t = in[i];
    CBX_CHECK(t.data && t.dtype == out.dtype && t.ndim == nd,
              "%s: input %d (%s %s) must be %s with %d dims like out %s", op, i, dtype_name(t.dtype),
              t.shape_str().c_str(), dtype_name(out.dtype), nd, out.shape_str().c_str());
    for (int j = 0; j < nd; ++j)
      CBX_CHECK(j == d || t.shape[j] == out.shape[j], "%s: input %d %s does not match out %s off dim %d", op, i,
                t.shape_str().c_str(), out.shape_str().c_str(), d);
    total += t.shape[d];
  }
  CBX_CHECK(total == out.shape[d], "%s: inputs sum to %lld along dim %d but out %s", op, (long long)total, d,
            out.shape_str().c_str());
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    if (in[i].shape[d] == 0) continue;
    Tensor dst = slice(out, d, off, in[i].shape[d]);
    copy_strided_impl(in[i], dst);
    off += in[i].shape[d];
  }
}

}  // namespace cbx
