// The scratch the conv ops take from their arena (ops/conv.h conv1d_scratch_bytes,
// conv_transpose1d_scratch_bytes): the same allocations as the op's path for these shapes,
// precision scope, ISA and thread count (conv.cpp, conv_transpose.cpp, matmul.cpp's
// gemm_bf16_kmajor), replayed on an ArenaPlan.
#include <algorithm>

#include "core/arena_plan.h"
#include "core/error.h"
#include "ops/conv.h"
#include "ops/conv_detail.h"
#include "ops/matmul.h"

namespace cbx {

using namespace conv_detail;

namespace {

// Scratch::get<T>(n) on the plan.
template <class T>
void get(ArenaPlan& a, int64_t n) {
  a.alloc_bytes(size_t(std::max<int64_t>(n, 1)) * sizeof(T));
}

}  // namespace

size_t conv1d_scratch_bytes(int64_t cin, int64_t cout, int64_t t_in, int64_t K, const Conv1dParams& p, int n_threads,
                            Isa isa) {
  CBX_CHECK(cin >= 1 && cout >= 1 && t_in >= 1 && K >= 1 && n_threads >= 1 && p.stride >= 1 && p.dilation >= 1 &&
                p.pad_left >= 0 && p.pad_right >= 0 && p.groups >= 1 && cin % p.groups == 0 && cout % p.groups == 0,
            "conv1d_scratch_bytes: bad shape C_in %lld C_out %lld T %lld K %lld groups %lld stride %lld (%d threads)",
            (long long)cin, (long long)cout, (long long)t_in, (long long)K, (long long)p.groups, (long long)p.stride,
            n_threads);
  const int64_t t_out = conv1d_out_len(t_in, K, p);
  CBX_CHECK(t_out >= 1, "conv1d_scratch_bytes: input length %lld too short for kernel %lld (dilation %lld)",
            (long long)t_in, (long long)K, (long long)p.dilation);
  const Isa kisa = nn_kernels(isa).isa;  // as conv1d: the kernels' ISA decides
  ArenaPlan a;
  if (conv1d_runs_direct(cout, p, kisa)) {  // conv1d_direct_bf16
    const int64_t cin_pad = round32(cin), cout_pad = round32(cout), halo = (K - 1) * p.dilation;
    const int64_t chunk_cols = direct_chunk_tiles(cin_pad, halo, (t_out + 31) / 32) * 32 + halo;
    if (!p.packed || p.packed->empty()) {
      get<uint16_t>(a, K * cin_pad * cout_pad);  // weights
      get<float>(a, cout_pad * 16);              // bias rows
    }
    get<uint16_t>(a, int64_t(n_threads) * (cin_pad * chunk_cols + 32));  // input chunks
    return a.bytes();
  }
  const bool bf16 = conv_uses_bf16(kisa);
  const int64_t cin_g = cin / p.groups, cout_g = cout / p.groups, KK = cin_g * K;
  if (p.stride == 1) {
    if (p.pad_left > 0 || p.pad_right > 0) get<float>(a, cin * (t_in + p.pad_left + p.pad_right));
    get<int64_t>(a, KK);  // row offsets
  } else {
    get<float>(a, cin * K * conv1d_chunk_cols(cin * K, t_out));  // im2col chunk
  }
  if (bf16) a.scratch(gemm_bf16_kmajor_scratch_bytes(cout_g, KK, n_threads));
  return a.bytes();
}

size_t conv_transpose1d_scratch_bytes(int64_t cin, int64_t cout, int64_t t_in, int64_t K,
                                      const ConvTranspose1dParams& p, int n_threads, Isa isa) {
  CBX_CHECK(cin >= 1 && cout >= 1 && t_in >= 1 && K >= 1 && n_threads >= 1,
            "conv_transpose1d_scratch_bytes: bad shape C_in %lld C_out %lld T %lld K %lld (%d threads)", (long long)cin,
            (long long)cout, (long long)t_in, (long long)K, n_threads);
  const int64_t MK = cout * K;
  ArenaPlan a;
  get<float>(a, MK * conv_transpose1d_chunk_cols(MK, t_in));  // columns Z
  if (conv_uses_bf16(isa)) {
    if (!p.packed || p.packed->empty()) get<float>(a, MK * cin);  // transposed weights
    a.scratch(gemm_bf16_kmajor_scratch_bytes(MK, cin, n_threads));
  }
  return a.bytes();
}

size_t conv1d_scratch_bytes(const Tensor& w, int64_t t_in, const Conv1dParams& p, int n_threads, Isa isa) {
  CBX_CHECK(w.ndim == 3, "conv1d_scratch_bytes: w %s must be [C_out, C_in/groups, K]", w.shape_str().c_str());
  return conv1d_scratch_bytes(w.shape[1] * p.groups, w.shape[0], t_in, w.shape[2], p, n_threads, isa);
}

size_t conv1d_scratch_bytes_any_precision(int64_t cin, int64_t cout, int64_t t_in, int64_t K, const Conv1dParams& p,
                                          int n_threads, Isa isa) {
  size_t most = 0;
  for (GemmPrecision g : {GemmPrecision::F32, GemmPrecision::BF16}) {
    GemmPrecisionScope scope(g);
    most = std::max(most, conv1d_scratch_bytes(cin, cout, t_in, K, p, n_threads, isa));
  }
  return most;
}

size_t conv_transpose1d_scratch_bytes(const Tensor& w, int64_t t_in, const ConvTranspose1dParams& p, int n_threads,
                                      Isa isa) {
  CBX_CHECK(w.ndim == 3, "conv_transpose1d_scratch_bytes: w %s must be [C_in, C_out, K]", w.shape_str().c_str());
  return conv_transpose1d_scratch_bytes(w.shape[0], w.shape[1], t_in, w.shape[2], p, n_threads, isa);
}

}  // namespace cbx
