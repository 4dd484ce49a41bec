#include "ops/row_linear.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/matvec_q4k.h"
#include "kernels/matvec_q4p.h"
#include "kernels/nn.h"
#include "ops/matmul.h"

namespace cbx {

RowLinear::RowLinear(const Tensor& w, const Tensor& bias, const char* name, Isa isa, bool pack)
    : RowLinear(w, bias, name, isa, pack, nullptr) {}

namespace {
// Q4_K rows the q4kp kernel can take (kernels/matvec_q4k.h).
bool q4kp_for(const Tensor& w, Isa isa, bool pack) {
  return pack && w.dtype == DType::Q4_K && w.ndim == 2 && q4kp_dot(isa) && q4kp_shape_ok(w.shape[1]);
}
}  // namespace

size_t RowLinear::pack_bytes(const Tensor& w, Isa isa, bool pack) {
  if (q4kp_for(w, isa, pack)) return size_t(w.shape[0]) * q4kp_row_bytes(w.shape[1]);
  if (!pack || !planar_dot(w.dtype, isa) || w.ndim != 2) return 0;
  return planar_matrix_bytes(w.dtype, w.shape[0], w.shape[1]);
}

size_t RowLinear::pack_bytes(const Tensor& w, const RowLinearOptions& o) {
  return pack_bytes(w, active_isa(), o.repack);
}

RowLinear::RowLinear(const Tensor& w, const Tensor& bias, const char* name, const RowLinearOptions& o, uint8_t* storage)
    : RowLinear(w, bias, name, active_isa(), o.repack, storage) {}

int64_t row_prefill_max_rows(const std::vector<const Tensor*>& weights, int64_t requested, int64_t max_rows,
                             bool amx_gemm) {
  bool quantized = true;
  for (const Tensor* t : weights)
    quantized &= t->dtype == DType::Q8_0 || t->dtype == DType::Q4_0 || t->dtype == DType::Q4_K;
  const int64_t rows = requested >= 0 ? requested : amx_gemm ? 0 : kRowPrefillAutoRows;
  return quantized && rows > 1 ? std::min(rows, max_rows) : 0;
}

int64_t row_prefill_max_rows(const std::vector<const Tensor*>& weights, int64_t requested, int64_t max_rows) {
  return row_prefill_max_rows(weights, requested, max_rows, std::strcmp(gemm_bf16_kind(), "amx") == 0);
}

RowLinear::RowLinear(const Tensor& w, const Tensor& bias, const char* name, Isa isa, bool pack, uint8_t* storage)
    : isa_(isa) {
  const int slot = matmul_weight_slot(w.dtype);
  CBX_CHECK(slot >= 0, "row_linear %s: weight %s has unsupported dtype %s", name, w.shape_str().c_str(),
            dtype_name(w.dtype));
  CBX_CHECK(w.ndim == 2 && w.data, "row_linear %s: weight %s must be 2-D [M, K]", name, w.shape_str().c_str());
  const TypeTraits& tr = type_traits(w.dtype);
  CBX_CHECK(tr.is_quantized || w.shape[1] <= 1 || w.stride[1] == int64_t(tr.block_bytes),
            "row_linear %s: weight %s rows must be contiguous", name, w.shape_str().c_str());
  m_ = w.shape[0];
  k_ = w.shape[1];
  CBX_CHECK(!tr.is_quantized || k_ % tr.block_size == 0,
            "row_linear %s: %s weight %s needs K %% %lld == 0 (its block size)", name, tr.name, w.shape_str().c_str(),
            (long long)tr.block_size);
  CBX_CHECK(k_ > 0, "row_linear %s: weight %s has no columns", name, w.shape_str().c_str());
  if (!bias.empty()) {
    CBX_CHECK(bias.dtype == DType::F32 && bias.ndim == 1 && bias.shape[0] == m_ && (bias.stride[0] == 4 || m_ <= 1),
              "row_linear %s: bias %s (%s) must be contiguous f32 [%lld]", name, bias.shape_str().c_str(),
              dtype_name(bias.dtype), (long long)m_);
    b_ = bias.ptr<float>();
  }
  w_ = static_cast<const uint8_t*>(w.data);
  ws_ = size_t(w.stride[0]);
  dot_ = &matmul_kernels(isa).dot[slot];
  const bool q4kp = q4kp_for(w, isa, pack);
  const DotKernel* planar = q4kp ? q4kp_dot(isa) : pack ? planar_dot(w.dtype, isa) : nullptr;
  if (planar && m_ > 0) {
    const size_t rb = q4kp ? q4kp_row_bytes(k_) : planar_row_bytes(w.dtype, k_);
    packed_bytes_ = q4kp ? size_t(m_) * rb : planar_matrix_bytes(w.dtype, m_, k_);
    pairs_ = !q4kp;
    uint8_t* buf = storage;
    if (buf) {
      CBX_CHECK(reinterpret_cast<uintptr_t>(buf) % 64 == 0, "row_linear %s: planar storage for %s is not 64-aligned",
                name, w.shape_str().c_str());
    } else {
      buf = static_cast<uint8_t*>(std::aligned_alloc(64, packed_bytes_));
      CBX_CHECK(buf, "row_linear %s: cannot allocate %zu bytes for the planar copy of %s", name, packed_bytes_,
                w.shape_str().c_str());
      packed_ = std::shared_ptr<uint8_t>(buf, [](uint8_t* p) { std::free(p); });
    }
    if (q4kp)
      q4kp_pack_rows(w_, ws_, m_, k_, buf);
    else
      planar_pack_rows(w.dtype, w_, ws_, m_, k_, buf);
    w_ = buf;
    ws_ = rb;
    dot_ = planar;
  }
  act_bytes_ = dot_->act == ActFormat::F32 ? 0 : act_row_bytes(dot_->act, k_);
}

void RowLinear::dot(int64_t m0, int64_t m1, const void* act, size_t as, int64_t n, float* out, int64_t ldo) const {
  // The kernel sees the weight slice from row m0 on. Planar rows come in pairs and a slice
  // must start at one: an odd first row is computed alone, from its pair.
  if (packed_bytes_ && pairs_ && (m0 & 1)) {
    for (int64_t r = 0; r < n; ++r) {
      float two[2];
      dot_->fn(w_ + size_t(m0 - 1) * ws_, ws_, 1, 2, static_cast<const uint8_t*>(act) + size_t(r) * as, 0, 1, k_, two,
               0);
      out[r * ldo] = two[1];
    }
    if (++m0 == m1) return;
    ++out;
  }
  dot_->fn(w_ + size_t(m0) * ws_, ws_, 0, m1 - m0, act, as, n, k_, out, ldo);
}

const void* RowLinear::act(const float* x, void* buf) const {
  if (dot_->act == ActFormat::F32) return x;
  dot_->convert(x, k_, buf);
  return buf;
}

void RowLinear::run(int64_t m0, int64_t m1, const void* act, float* y, RowEpilogue e, float* tmp) const {
  CBX_ASSERT(m0 >= 0 && m0 <= m1 && m1 <= m_);
  if (m0 == m1) return;
  const int64_t n = m1 - m0;
  float* out = e == RowEpilogue::AddTo ? tmp : y + m0;
  CBX_ASSERT(out != nullptr);
  dot(m0, m1, act, 0, 1, out, 0);
  const float* b = b_ ? b_ + m0 : nullptr;
  switch (e) {
    case RowEpilogue::Store:
      if (b)
        for (int64_t i = 0; i < n; ++i) out[i] += b[i];
      break;
    case RowEpilogue::GeluTanh:
      if (b)
        for (int64_t i = 0; i < n; ++i) out[i] += b[i];
      nn_kernels(isa_).unary(Unary::GeluTanh, out, out, n, 0.f, 0.f);
      break;
    case RowEpilogue::AddTo: {
      float* yr = y + m0;
      if (b)
        for (int64_t i = 0; i < n; ++i) yr[i] += out[i] + b[i];
      else
        for (int64_t i = 0; i < n; ++i) yr[i] += out[i];
      break;
    }
  }
}

const void* RowLinear::act_rows(const float* x, int64_t xs, int64_t n, void* buf, size_t* as) const {
  if (dot_->act == ActFormat::F32) {
    *as = size_t(xs) * 4;
    return x;
  }
  *as = act_bytes_;
  for (int64_t r = 0; r < n; ++r) dot_->convert(x + r * xs, k_, static_cast<uint8_t*>(buf) + size_t(r) * act_bytes_);
  return buf;
}

void RowLinear::run_rows(int64_t m0, int64_t m1, const void* act, size_t as, int64_t n, float* y, int64_t ldy,
                         RowEpilogue e, float* tmp) const {
  CBX_ASSERT(m0 >= 0 && m0 <= m1 && m1 <= m_ && n >= 1);
  if (m0 == m1) return;
  const int64_t cnt = m1 - m0;
  const bool add = e == RowEpilogue::AddTo;
  CBX_ASSERT(!add || tmp != nullptr);
  float* out = add ? tmp : y + m0;
  const int64_t ldo = add ? cnt : ldy;
  dot(m0, m1, act, as, n, out, ldo);
  const float* b = b_ ? b_ + m0 : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * ldo;
    switch (e) {
      case RowEpilogue::Store:
        if (b)
          for (int64_t i = 0; i < cnt; ++i) o[i] += b[i];
        break;
      case RowEpilogue::GeluTanh:
        if (b)
          for (int64_t i = 0; i < cnt; ++i) o[i] += b[i];
        nn_kernels(isa_).unary(Unary::GeluTanh, o, o, cnt, 0.f, 0.f);
        break;
      case RowEpilogue::AddTo: {
        float* yr = y + r * ldy + m0;
        if (b)
          for (int64_t i = 0; i < cnt; ++i) yr[i] += o[i] + b[i];
        else
          for (int64_t i = 0; i < cnt; ++i) yr[i] += o[i];
        break;
      }
    }
  }
}

bool RowLinear::same_act(const RowLinear& o) const {
  return dot_ && o.dot_ && k_ == o.k_ && dot_->act == o.dot_->act && dot_->convert == o.dot_->convert;
}

void row_layer_norm(const float* x, float* y, int64_t n, const Tensor& w, const Tensor& b, float eps, Isa isa) {
  auto vec = [&](const Tensor& t, const char* what) -> const float* {
    if (t.empty()) return nullptr;
    CBX_CHECK(t.dtype == DType::F32 && t.numel() == n && t.is_contiguous(),
              "row_layer_norm: %s %s (%s) must be contiguous f32 [%lld]", what, t.shape_str().c_str(),
              dtype_name(t.dtype), (long long)n);
    return t.ptr<float>();
  };
  nn_kernels(isa).layer_norm(x, y, n, vec(w, "weight"), vec(b, "bias"), eps);
}

void row_store(const float* x, void* dst, DType dst_type, int64_t n) {
  if (dst_type == DType::F32) {
    std::memcpy(dst, x, size_t(n) * 4);
    return;
  }
  CBX_CHECK(dst_type == DType::F16, "row_store: destination type %s (f32 or f16)", dtype_name(dst_type));
  nn_kernels(active_isa()).to_f16(x, static_cast<uint16_t*>(dst), n);
}

}  // namespace cbx

namespace cbx {

void row_rms_norm(const float* x, float* y, int64_t n, const Tensor& w, float eps, Isa isa) {
  const float* wp = nullptr;
  if (!w.empty()) {
    CBX_CHECK(w.dtype == DType::F32 && w.numel() == n && w.is_contiguous(),
              "row_rms_norm: weight %s (%s) must be contiguous f32 [%lld]", w.shape_str().c_str(), dtype_name(w.dtype),
              (long long)n);
    wp = w.ptr<float>();
  }
  nn_kernels(isa).rms_norm(x, y, n, wp, eps);
}

void row_rope(float* x, int64_t half, const float* cos, const float* sin, Isa isa) {
  nn_kernels(isa).rope(x, x, half, cos, sin);
}

void row_silu_mul(float* g, const float* u, int64_t n, Isa isa) {
  const NnKernels& k = nn_kernels(isa);
  k.unary(Unary::Silu, g, g, n, 0.f, 0.f);
  k.binary(Binary::Mul, g, u, g, n, false);
}

}  // namespace cbx
