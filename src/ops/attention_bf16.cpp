#include "ops/attention_bf16.h"

#include <algorithm>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/attention_amx.h"
#include "ops/nn_util.h"

namespace cbx {
namespace {

constexpr const char* kOp = "attention_bf16";

// AMX tiles where usable, else vdpbf16ps where the bf16 GEMM runs on it, else none.
const AttentionAmxKernels* kernels() {
  if (active_isa() != Isa::Avx512) return nullptr;
  if (const AttentionAmxKernels* k = attention_amx_kernels()) return k;
  return attention_vdpbf16_kernels();
}

bool head_dim_ok(int64_t D) { return D >= 32 && D <= kAttnAmxMaxHeadDim && D % 32 == 0; }

size_t round64(size_t n) { return (n + 63) / 64 * 64; }

// [H, T, D] -> [1, H, T, D]; checks f32, 3 or 4 dims, contiguous D, strides in whole floats.
Tensor as4(const Tensor& t, const char* name) {
  nn_detail::check_f32(kOp, name, t);
  CBX_CHECK(t.ndim == 3 || t.ndim == 4, "%s: %s %s must be [B, H, T, D] or [H, T, D]", kOp, name,
            t.shape_str().c_str());
  Tensor r = t;
  if (t.ndim == 3) {
    r.ndim = 4;
    for (int i = 3; i >= 1; --i) {
      r.shape[i] = t.shape[i - 1];
      r.stride[i] = t.stride[i - 1];
    }
    r.shape[0] = 1;
    r.stride[0] = 0;
  }
  for (int i = 0; i < 3; ++i)
    CBX_CHECK(r.stride[i] % 4 == 0, "%s: %s %s has a stride not a multiple of 4 bytes", kOp, name,
              t.shape_str().c_str());
  return r;
}

const float* at(const Tensor& t, int64_t b, int64_t h) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(t.data) + b * t.stride[0] + h * t.stride[1]);
}

}  // namespace

bool attention_bf16_available(int64_t head_dim) { return head_dim_ok(head_dim) && kernels() != nullptr; }

AttentionKernel attention_kernel(GemmPrecision prec, int64_t head_dim, bool relpos) {
  if (prec != GemmPrecision::BF16 || !attention_bf16_available(head_dim)) return AttentionKernel::F32;
  return relpos && attention_bf16_relpos_available(head_dim) ? AttentionKernel::Bf16Relpos : AttentionKernel::Bf16;
}

const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::F32:
      return "f32";
    case AttentionKernel::Bf16:
      return "bf16";
    case AttentionKernel::Bf16Relpos:
      return "bf16_relpos";
  }
  return "?";
}

size_t attention_bf16_scratch_bytes(int64_t B, int64_t H, int64_t Tk, int64_t D, int n_threads) {
  const size_t heads = size_t(B * H);
  return heads * round64(attention_amx_kp_elems(Tk, D) * 2) + heads * round64(attention_amx_vp_elems(Tk, D) * 2) +
         size_t(std::max(n_threads, 1)) * round64(attention_amx_ws_bytes(Tk, D)) +
         round64(heads * sizeof(AttnAmxHead)) + 5 * 64;
}

bool attention_bf16_relpos_available(int64_t head_dim) {
  const AttentionAmxKernels* k = head_dim_ok(head_dim) ? kernels() : nullptr;
  return k != nullptr && k->pack_relpos != nullptr;
}

size_t attention_bf16_relpos_scratch_bytes(int64_t B, int64_t H, int64_t Tk, int64_t D, int n_threads) {
  return attention_bf16_scratch_bytes(B, H, Tk, D, n_threads) +
         size_t(B * H) * round64(size_t(attention_relpos_rows(Tk) * (D / 2)) * 4) + 64;
}

namespace {

// Both front ends: an additive bias (bias_in non-empty) or the in-kernel relative-position
// term (qv_in / p_in non-empty), or neither.
void run_attention(ThreadPool& pool, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
                   const Tensor& qv_in, const Tensor& p_in, Tensor& out_in, float scale, Arena& scratch) {
  const Tensor q = as4(q_in, "q"), k = as4(k_in, "k"), v = as4(v_in, "v"), out = as4(out_in, "out");
  const int64_t B = q.shape[0], H = q.shape[1], Tq = q.shape[2], D = q.shape[3], Tk = k.shape[2];
  CBX_CHECK(same_shape(q, out), "%s: q %s and out %s differ in shape", kOp, q_in.shape_str().c_str(),
            out_in.shape_str().c_str());
  CBX_CHECK(same_shape(k, v) && k.shape[0] == B && k.shape[1] == H && k.shape[3] == D,
            "%s: k %s and v %s must be [%lld, %lld, Tk, %lld] like q %s", kOp, k_in.shape_str().c_str(),
            v_in.shape_str().c_str(), (long long)B, (long long)H, (long long)D, q_in.shape_str().c_str());
  CBX_CHECK(Tq >= 1 && Tk >= 1 && B >= 1 && H >= 1, "%s: empty q %s or k %s", kOp, q_in.shape_str().c_str(),
            k_in.shape_str().c_str());
  CBX_CHECK(head_dim_ok(D), "%s: head dim %lld must be a multiple of 32 in [32, %lld]", kOp, (long long)D,
            (long long)kAttnAmxMaxHeadDim);
  CBX_CHECK(scale > 0.f && scale == scale, "%s: scale %g must be positive", kOp, double(scale));
  Tensor bias;  // [B or 1, H or 1, Tq, Tk] (stride 0 on a broadcast dim)
  if (!bias_in.empty()) {
    nn_detail::check_f32(kOp, "bias", bias_in);
    CBX_CHECK(bias_in.ndim >= 2 && bias_in.ndim <= 4 && bias_in.dim(-2) == Tq && bias_in.dim(-1) == Tk,
              "%s: bias %s must be [Tq, Tk], [H, Tq, Tk] or [B, H, Tq, Tk] with Tq %lld, Tk %lld", kOp,
              bias_in.shape_str().c_str(), (long long)Tq, (long long)Tk);
    if (bias_in.ndim == 2) {
      const int64_t sh[4] = {B, H, Tq, Tk}, st[4] = {0, 0, bias_in.stride[0], bias_in.stride[1]};
      bias = make_view(bias_in, 4, sh, st, 0);
    } else {
      bias = as4(bias_in, "bias");
      CBX_CHECK(bias.shape[0] == B && bias.shape[1] == H, "%s: bias %s does not match q %s in batch and heads", kOp,
                bias_in.shape_str().c_str(), q_in.shape_str().c_str());
    }
    CBX_CHECK(bias.stride[2] % 4 == 0, "%s: bias %s has a row stride not a multiple of 4 bytes", kOp,
              bias_in.shape_str().c_str());
  }
  const AttentionAmxKernels* kern = kernels();
  CBX_CHECK(kern != nullptr, "%s: needs the AVX-512 ISA with AMX-BF16 tiles or the vdpbf16ps bf16 GEMM (active: %s)",
            kOp, isa_name(active_isa()));
  const bool rel = !qv_in.empty();
  Tensor qv, p;  // [B, H, Tq, D] and [B, H, 2 Tk - 1, D] (rel only)
  const int64_t rel_rows = attention_relpos_rows(Tk);
  if (rel) {
    CBX_CHECK(kern->pack_relpos != nullptr, "%s: the in-kernel relative-position term needs the vdpbf16ps kernel", kOp);
    qv = as4(qv_in, "qv");
    p = as4(p_in, "p");
    CBX_CHECK(same_shape(qv, q), "%s: qv %s must have q's shape %s", kOp, qv_in.shape_str().c_str(),
              q_in.shape_str().c_str());
    CBX_CHECK(Tq == Tk && p.shape[0] == B && p.shape[1] == H && p.shape[2] == 2 * Tk - 1 && p.shape[3] == D,
              "%s: relative positions need Tq == Tk (%lld, %lld) and p [B, H, 2 Tk - 1, D], got %s", kOp, (long long)Tq,
              (long long)Tk, p_in.shape_str().c_str());
  }

  const int nth_pool = pool.size();
  const size_t need = rel ? attention_bf16_relpos_scratch_bytes(B, H, Tk, D, nth_pool)
                          : attention_bf16_scratch_bytes(B, H, Tk, D, nth_pool);
  CBX_CHECK(scratch.capacity() - scratch.used() >= need,
            "%s: scratch has %zu bytes free, [%lld, %lld] heads of %lld keys need %zu", kOp,
            scratch.capacity() - scratch.used(), (long long)B, (long long)H, (long long)Tk, need);
  const size_t mark = scratch.mark();
  const size_t kp_n = attention_amx_kp_elems(Tk, D), vp_n = attention_amx_vp_elems(Tk, D);
  const size_t kp_b = round64(kp_n * 2), vp_b = round64(vp_n * 2), ws_b = round64(attention_amx_ws_bytes(Tk, D));
  const int64_t heads = B * H;
  auto* kp = static_cast<uint8_t*>(scratch.alloc_bytes(size_t(heads) * kp_b, 64, "attention_bf16 packed k"));
  auto* vp = static_cast<uint8_t*>(scratch.alloc_bytes(size_t(heads) * vp_b, 64, "attention_bf16 packed v"));
  auto* ws = static_cast<uint8_t*>(scratch.alloc_bytes(size_t(nth_pool) * ws_b, 64, "attention_bf16 workspace"));
  const size_t rp_b = rel ? round64(size_t(rel_rows * (D / 2)) * 4) : 0;
  auto* rp =
      rel ? static_cast<uint8_t*>(scratch.alloc_bytes(size_t(heads) * rp_b, 64, "attention_bf16 positions")) : nullptr;

  auto* hv =
      static_cast<AttnAmxHead*>(scratch.alloc_bytes(size_t(heads) * sizeof(AttnAmxHead), 64, "attention_bf16 heads"));
  for (int64_t bh = 0; bh < heads; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    AttnAmxHead& hd = hv[bh];
    hd = AttnAmxHead{};
    hd.q = at(q, b, h);
    hd.q_rs = q.stride[2] / 4;
    hd.o = const_cast<float*>(at(out, b, h));
    hd.o_rs = out.stride[2] / 4;
    hd.kp = reinterpret_cast<const uint16_t*>(kp + bh * kp_b);
    hd.vp = reinterpret_cast<const uint16_t*>(vp + bh * vp_b);
    hd.Tq = Tq;
    hd.Tk = Tk;
    hd.D = D;
    hd.scale = scale;
    if (!bias.empty()) {
      hd.bias = at(bias, b, h);
      hd.bias_rs = bias.stride[2] / 4;
    }
    if (rel) {
      hd.relp = reinterpret_cast<const uint32_t*>(rp + bh * rp_b);
      hd.relp_rs = rel_rows;
      hd.qv = at(qv, b, h);
      hd.qv_rs = qv.stride[2] / 4;
    }
  }
  const int64_t nqb = (Tq + kAttnAmxQueryBlock - 1) / kAttnAmxQueryBlock, items = heads * nqb;
  // Query blocks are shared out with the pool's WorkSplit: each thread works through its own
  // contiguous block (the heads it packed), then takes single items from the back of the
  // other's, so a thread the machine slows down does not hold the call up. Items are
  // independent: the same bits for any split.
  WorkSplit& wsplit = pool.work_split();
  wsplit.reset(items, nth_pool, 1);
  pool.run([&](int ith, int nth) {
    // Each thread packs the heads its query blocks mostly fall in (same contiguous split).
    int64_t h0, h1;
    ThreadPool::split(heads, ith, nth, &h0, &h1);
    for (int64_t bh = h0; bh < h1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      kern->pack_k(at(k, b, h), k.stride[2] / 4, Tk, D, reinterpret_cast<uint16_t*>(kp + bh * kp_b));
      kern->pack_v(at(v, b, h), v.stride[2] / 4, Tk, D, reinterpret_cast<uint16_t*>(vp + bh * vp_b));
      if (rel)
        kern->pack_relpos(at(p, b, h), p.stride[2] / 4, 2 * Tk - 1, D, rel_rows,
                          reinterpret_cast<uint32_t*>(rp + bh * rp_b));
    }
    if (nth > 1) pool.barrier();
    wsplit.run(ith, 1, 1, [&](int64_t i0, int64_t i1) { kern->run(hv, nqb, i0, i1, ws + size_t(ith) * ws_b); });
  });
  scratch.rewind(mark);
}

}  // namespace

void attention_bf16(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale,
                    Arena& scratch) {
  run_attention(pool, q, k, v, Tensor{}, Tensor{}, Tensor{}, out, scale, scratch);
}

void attention_bf16(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                    Tensor& out, float scale, Arena& scratch) {
  run_attention(pool, q, k, v, bias, Tensor{}, Tensor{}, out, scale, scratch);
}

void attention_bf16_relpos(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qv,
                           const Tensor& p, Tensor& out, float scale, Arena& scratch) {
  CBX_CHECK(!qv.empty() && !p.empty(), "%s: relative positions need qv and p", kOp);
  run_attention(pool, q, k, v, Tensor{}, qv, p, out, scale, scratch);
}

}  // namespace cbx
