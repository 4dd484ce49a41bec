#include "models/cfm_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "ops/attention_bf16.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace cbx {

namespace {

constexpr float kLnEps = 1e-5f;         // nn.LayerNorm default (decoder.py, diffusers block)
constexpr float kTimeScale = 1000.f;    // SinusoidalPosEmb.forward(scale=1000)
constexpr double kMaxPeriod = 10000.0;  // log(10000) / (half - 1)
constexpr int64_t kQueryChunk = 128;    // attention queries per work item

std::string idx(const std::string& p, int i) { return p + "." + std::to_string(i); }

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t inner_dim(const CfmConfig& c) { return int64_t(c.n_head) * c.head_dim; }

void check_config(const CfmConfig& c, const std::string& file) {
  const char* f = file.c_str();
  CBX_CHECK(c.channels > 0 && c.out_channels > 0 && c.in_channels == 4 * c.out_channels,
            "%s: cfm in_channels %d must be 4 x out_channels %d (x, mu, spks, cond) and channels %d > 0", f,
            c.in_channels, c.out_channels, c.channels);
  CBX_CHECK(c.conv_kernel >= 1 && c.n_blocks >= 0 && c.n_mid_blocks >= 0,
            "%s: bad cfm conv_kernel %d / n_blocks %d / n_mid_blocks %d", f, c.conv_kernel, c.n_blocks, c.n_mid_blocks);
  CBX_CHECK(c.n_head > 0 && c.head_dim > 0 && c.head_dim <= 512 && c.ff_dim > 0,
            "%s: bad cfm n_head %d / head_dim %d / ff_dim %d", f, c.n_head, c.head_dim, c.ff_dim);
  CBX_CHECK(c.time_emb_dim > 0 && c.time_sin_dim >= 4 && c.time_sin_dim % 2 == 0,
            "%s: bad cfm time_emb_dim %d / time_sin_dim %d (must be even, >= 4)", f, c.time_emb_dim, c.time_sin_dim);
}

void resnet_tensors(const CfmConfig& c, const std::string& p, int64_t in, CfmResnetWeights& r,
                    const CfmEstimatorWeights::Visitor& fn) {
  using K = CfmWeightKind;
  const int64_t C = c.channels, k = c.conv_kernel;
  fn(p + ".block1.block.0.weight", r.conv1_w, {C, in, k}, K::Conv);
  fn(p + ".block1.block.0.bias", r.conv1_b, {C}, K::Vector);
  fn(p + ".block1.block.2.weight", r.ln1_w, {C}, K::Vector);
  fn(p + ".block1.block.2.bias", r.ln1_b, {C}, K::Vector);
  fn(p + ".block2.block.0.weight", r.conv2_w, {C, C, k}, K::Conv);
  fn(p + ".block2.block.0.bias", r.conv2_b, {C}, K::Vector);
  fn(p + ".block2.block.2.weight", r.ln2_w, {C}, K::Vector);
  fn(p + ".block2.block.2.bias", r.ln2_b, {C}, K::Vector);
  fn(p + ".mlp.1.weight", r.mlp_w, {C, c.time_emb_dim}, K::Matrix);
  fn(p + ".mlp.1.bias", r.mlp_b, {C}, K::Vector);
  fn(p + ".res_conv.weight", r.res_w, {C, in, 1}, K::Conv);
  fn(p + ".res_conv.bias", r.res_b, {C}, K::Vector);
}

void stage_tensors(const CfmConfig& c, const std::string& p, int64_t in, bool conv, CfmStageWeights& s,
                   const CfmEstimatorWeights::Visitor& fn) {
  using K = CfmWeightKind;
  const int64_t C = c.channels, inner = inner_dim(c), F = c.ff_dim;
  resnet_tensors(c, p + ".0", in, s.resnet, fn);
  s.blocks.resize(size_t(c.n_blocks));
  for (int j = 0; j < c.n_blocks; ++j) {
    const std::string q = idx(p + ".1", j);
    CfmTransformerWeights& b = s.blocks[size_t(j)];
    fn(q + ".norm1.weight", b.norm1_w, {C}, K::Vector);
    fn(q + ".norm1.bias", b.norm1_b, {C}, K::Vector);
    fn(q + ".attn1.to_q.weight", b.to_q, {inner, C}, K::Matrix);
    fn(q + ".attn1.to_k.weight", b.to_k, {inner, C}, K::Matrix);
    fn(q + ".attn1.to_v.weight", b.to_v, {inner, C}, K::Matrix);
    fn(q + ".attn1.to_out.0.weight", b.to_out_w, {C, inner}, K::Matrix);
    fn(q + ".attn1.to_out.0.bias", b.to_out_b, {C}, K::Vector);
    fn(q + ".norm3.weight", b.norm3_w, {C}, K::Vector);
    fn(q + ".norm3.bias", b.norm3_b, {C}, K::Vector);
    fn(q + ".ff.net.0.proj.weight", b.ff1_w, {F, C}, K::Matrix);
    fn(q + ".ff.net.0.proj.bias", b.ff1_b, {F}, K::Vector);
    fn(q + ".ff.net.2.weight", b.ff2_w, {C, F}, K::Matrix);
    fn(q + ".ff.net.2.bias", b.ff2_b, {C}, K::Vector);
  }
  if (conv) {
    fn(p + ".2.weight", s.conv_w, {C, C, c.conv_kernel}, K::Conv);
    fn(p + ".2.bias", s.conv_b, {C}, K::Vector);
  }
}

// Zeroes frames [n_valid, T) of a channels-first [B, Ch, T] activation (x * mask for a prefix mask).
void mask_tail(Tensor& x, int64_t n_valid) {
  const int64_t T = x.dim(-1);
  if (n_valid >= T) return;
  for (int64_t r = 0; r < x.rows(); ++r) {
    float* p = static_cast<float*>(x.row(r));
    std::memset(p + n_valid, 0, size_t(T - n_valid) * 4);
  }
}

// Head hd of batch row b of a [B, T, W] buffer (or a column slice of one): [rows, D], strided rows.
Tensor head_view(const Tensor& buf, int64_t b, int64_t hd, int64_t D, int64_t rows) {
  const int64_t sh[2] = {rows, D}, st[2] = {buf.stride[1], 4};
  return make_view(buf, 2, sh, st, b * buf.stride[0] + hd * D * 4);
}

// dst [B, N, M] = src [B, M, N] with the last two dims swapped (rows of either may be strided,
// innermost contiguous), in 32 x 32 tiles split over the pool.
void transpose_into(ThreadPool& pool, const Tensor& src, Tensor& dst) {
  CBX_ASSERT(src.ndim == 3 && dst.ndim == 3 && src.shape[0] == dst.shape[0] && src.shape[1] == dst.shape[2] &&
             src.shape[2] == dst.shape[1]);
  constexpr int64_t kTile = 32;
  const int64_t B = src.shape[0], M = src.shape[1], N = src.shape[2];
  const int64_t tm = (M + kTile - 1) / kTile, tn = (N + kTile - 1) / kTile, tiles = B * tm * tn;
  const int64_t ss = src.stride[1] / 4, ds = dst.stride[1] / 4;
  auto job = [&](int ith, int nth) {
    int64_t t0, t1;
    ThreadPool::split(tiles, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (tm * tn), i0 = (t / tn) % tm * kTile, j0 = t % tn * kTile;
      const float* sp = reinterpret_cast<const float*>(static_cast<const uint8_t*>(src.data) + b * src.stride[0]);
      float* dp = reinterpret_cast<float*>(static_cast<uint8_t*>(dst.data) + b * dst.stride[0]);
      const int64_t i1 = std::min(M, i0 + kTile), j1 = std::min(N, j0 + kTile);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dp[j * ds + i] = sp[i * ss + j];
    }
  };
  if (B * M * N < (int64_t(1) << 15) || pool.size() <= 1)
    job(0, 1);
  else
    pool.run(job);
}

// View of columns [c0, c0 + n) of a [B, R, W] buffer as [B, R, n] (rows keep their stride).
Tensor cols(const Tensor& t, int64_t c0, int64_t n) { return slice(t, t.ndim - 1, c0, n); }

}  // namespace

void CfmEstimatorWeights::for_each_tensor(const CfmConfig& c, const Visitor& fn) {
  using K = CfmWeightKind;
  const int64_t C = c.channels, E = c.time_emb_dim;
  fn("cfm.time_mlp.linear_1.weight", time1_w, {E, c.time_sin_dim}, K::Matrix);
  fn("cfm.time_mlp.linear_1.bias", time1_b, {E}, K::Vector);
  fn("cfm.time_mlp.linear_2.weight", time2_w, {E, E}, K::Matrix);
  fn("cfm.time_mlp.linear_2.bias", time2_b, {E}, K::Vector);
  if (c.meanflow)
    fn("cfm.time_embed_mixer.weight", mixer_w, {E, 2 * E}, K::Matrix);
  else
    mixer_w = Tensor{};
  stage_tensors(c, "cfm.down_blocks.0", c.in_channels, true, down, fn);
  mid.resize(size_t(c.n_mid_blocks));
  for (int i = 0; i < c.n_mid_blocks; ++i) stage_tensors(c, idx("cfm.mid_blocks", i), C, false, mid[size_t(i)], fn);
  stage_tensors(c, "cfm.up_blocks.0", 2 * C, true, up, fn);
  fn("cfm.final_block.block.0.weight", final_conv_w, {C, C, c.conv_kernel}, K::Conv);
  fn("cfm.final_block.block.0.bias", final_conv_b, {C}, K::Vector);
  fn("cfm.final_block.block.2.weight", final_ln_w, {C}, K::Vector);
  fn("cfm.final_block.block.2.bias", final_ln_b, {C}, K::Vector);
  fn("cfm.final_proj.weight", proj_w, {c.out_channels, C, 1}, K::Conv);
  fn("cfm.final_proj.bias", proj_b, {c.out_channels}, K::Vector);
}

void bind_cfm_estimator(const GgufFile& f, const CfmConfig& c, CfmEstimatorWeights& w) {
  check_config(c, f.path());
  w.owned.clear();
  const char* path = f.path().c_str();
  w.for_each_tensor(
      c, [&](const std::string& name, Tensor& slot, const std::vector<int64_t>& shape, CfmWeightKind kind) {
        const GgufTensorInfo* ti = f.find_tensor(name);
        CBX_CHECK(ti != nullptr, "%s: missing tensor '%s' %s", path, name.c_str(), shape_string(shape).c_str());
        bool ok = ti->ndim == int(shape.size());
        for (int i = 0; ok && i < ti->ndim; ++i) ok = ti->shape[i] == shape[size_t(i)];
        if (!ok) {
          Tensor got = f.tensor(*ti);
          fail("%s: tensor '%s' has shape %s, expected %s", path, name.c_str(), got.shape_str().c_str(),
               shape_string(shape).c_str());
        }
        const TypeTraits& tr = type_traits(ti->dtype);
        if (ti->dtype == DType::F32) {
          slot = f.tensor(*ti);
          return;
        }
        CBX_CHECK(kind != CfmWeightKind::Vector, "%s: tensor '%s' must be f32, got %s", path, name.c_str(), tr.name);
        if (kind == CfmWeightKind::Matrix) {
          CBX_CHECK(tr.is_float && tr.to_float, "%s: tensor '%s' has dtype %s, not a weight type", path, name.c_str(),
                    tr.name);
          slot = f.tensor(*ti);
          return;
        }
        CBX_CHECK(ti->dtype == DType::F16 || ti->dtype == DType::BF16,
                  "%s: conv tensor '%s' has dtype %s; it must be f32, f16 or bf16", path, name.c_str(), tr.name);
        Tensor src = f.tensor(*ti);
        const HugePiece& buf = w.owned.emplace_back(size_t(src.numel()) * 4);
        tr.to_float(src.data, reinterpret_cast<float*>(buf.data()), src.numel());
        slot = make_tensor(DType::F32, src.ndim, src.shape, buf.data(), buf.size());
      });
}

// ---------------------------------------------------------------------------------------

template <class A>
CfmEstimator::Bufs CfmEstimator::alloc_bufs(A& a, const CfmConfig& c, int64_t B, int64_t T) {
  const int64_t C = c.channels, E = c.time_emb_dim, inner = inner_dim(c), n = c.meanflow ? 2 * B : B;
  Bufs b;
  b.temb = a.alloc(DType::F32, {B, E}, "cfm temb");
  b.sin_in = a.alloc(DType::F32, {n, c.time_sin_dim}, "cfm sinusoid");
  b.h1 = a.alloc(DType::F32, {n, E}, "cfm time mlp");
  b.h2 = a.alloc(DType::F32, {n, E}, "cfm time mlp out");
  b.temb_act = a.alloc(DType::F32, {B, E}, "cfm mish(temb)");
  b.tproj = a.alloc(DType::F32, {2 + c.n_mid_blocks, B, C}, "cfm time projections");
  b.xin = a.alloc(DType::F32, {B, c.in_channels, T}, "cfm x_in");
  b.hs = a.alloc(DType::F32, {B, 2 * C, T}, "cfm [h | skip]");
  b.t0 = a.alloc(DType::F32, {B, C, T}, "cfm t0");
  b.t1 = a.alloc(DType::F32, {B, C, T}, "cfm t1");
  b.xt = a.alloc(DType::F32, {B, T, C}, "cfm xt");
  b.qkv = a.alloc(DType::F32, {B, T, 3 * inner}, "cfm qkv");
  b.att = a.alloc(DType::F32, {B, T, inner}, "cfm attention");
  b.ff = a.alloc(DType::F32, {B, T, c.ff_dim}, "cfm ff");
  b.vt = a.alloc(DType::F32, {B, inner, T}, "cfm v^T");
  return b;
}

CfmEstimator::CfmEstimator(const CfmConfig& c, const CfmEstimatorWeights& w, ThreadPool& pool,
                           const CfmEstimatorOptions& o)
    : c_(c), w_(w), pool_(pool) {
  check_config(c, "cfm estimator");
  CBX_CHECK(!w.time1_w.empty() && w.mid.size() == size_t(c.n_mid_blocks) && (!c.meanflow || !w.mixer_w.empty()),
            "cfm estimator: weights are not bound");
  CBX_CHECK(o.max_frames >= 1 && o.max_batch >= 1, "cfm estimator: bad max_frames %lld / max_batch %lld",
            (long long)o.max_frames, (long long)o.max_batch);
  max_frames_ = o.max_frames;
  max_batch_ = o.max_batch;
  bool lossy = false;
  for (const Tensor* t : {&w.time1_w, &w.time2_w, &w.down.resnet.mlp_w}) lossy |= gemm_weight_is_lossy(t->dtype);
  if (!w.down.blocks.empty()) lossy |= gemm_weight_is_lossy(w.down.blocks[0].to_q.dtype);
  // The linears' precision is the ops layer's pick for the request (Auto with lossy weights:
  // int8 where the VNNI kernel runs it); the other products run in bf16 next to int8 linears.
  linear_ = resolve_packed_precision(o.gemm, lossy);
  gemm_ = linear_ == GemmPrecision::Int8 ? GemmPrecision::BF16 : linear_;
  // Transformer matrices packed once (bf16 panels when gemm_ is BF16 on AMX): q | k | v stacked.
  auto stage_pack = [&](const CfmStageWeights& s) {
    for (const CfmTransformerWeights& b : s.blocks) {
      PackedBlock pb;
      pb.qkv = pack_weight(pool, {&b.to_q, &b.to_k, &b.to_v}, linear_, "cfm attn1.to_q|to_k|to_v");
      pb.out = pack_weight(pool, {&b.to_out_w}, linear_, "cfm attn1.to_out.0");
      pb.ff1 = pack_weight(pool, {&b.ff1_w}, linear_, "cfm ff.net.0.proj");
      pb.ff2 = pack_weight(pool, {&b.ff2_w}, linear_, "cfm ff.net.2");
      for (const PackedWeight* p : {&pb.qkv, &pb.out, &pb.ff1, &pb.ff2}) packed_bytes_ += p->panel_bytes();
      packed_.emplace_back(&b, std::move(pb));
    }
  };
  stage_pack(w.down);
  for (const CfmStageWeights& s : w.mid) stage_pack(s);
  stage_pack(w.up);
  if (gemm_ == GemmPrecision::BF16) {
    auto resnet_convs = [&](const CfmResnetWeights& r) {
      conv_packs_.add(pool, r.conv1_w, r.conv1_b);
      conv_packs_.add(pool, r.conv2_w, r.conv2_b);
      conv_packs_.add(pool, r.res_w, r.res_b);
    };
    resnet_convs(w.down.resnet);
    for (const CfmStageWeights& s : w.mid) resnet_convs(s.resnet);
    resnet_convs(w.up.resnet);
    conv_packs_.add(pool, w.down.conv_w, w.down.conv_b);
    conv_packs_.add(pool, w.up.conv_w, w.up.conv_b);
    conv_packs_.add(pool, w.final_conv_w, w.final_conv_b);
    conv_packs_.add(pool, w.proj_w, w.proj_b);
    packed_bytes_ += conv_packs_.bytes();
  }
  // Attention: the fused bf16 kernel (AMX or vdpbf16ps) takes its scratch from the per-call
  // arena (work_); the f32 path has per-thread arenas.
  attn_bf16_ = attention_kernel(gemm_, c.head_dim) == AttentionKernel::Bf16;
  plan_arenas(o);
}

void CfmEstimator::plan_arenas(const CfmEstimatorOptions& o) {
  GemmPrecisionScope scope(gemm_);  // the convs take the paths forward's scope gives them
  const int64_t B = max_batch_, T = max_frames_, N = B * T;
  const int nt = pool_.size();
  ArenaPlan keep;  // the output, then (without options.work) the per-call buffers after it
  keep.alloc(DType::F32, {B, c_.out_channels, T});
  ArenaPlan call = o.work ? ArenaPlan() : keep;
  alloc_bufs(call, c_, B, T);
  // Every op's scratch, taken after all the activations and rewound.
  auto mm = [&](const Tensor& wt, int64_t rows) {
    call.scratch(matmul_scratch_bytes(wt.dtype, rows, wt.shape[0], wt.shape[1], nt));
  };
  mm(w_.time1_w, c_.meanflow ? 2 * B : B);
  mm(w_.time2_w, c_.meanflow ? 2 * B : B);
  if (c_.meanflow) mm(w_.mixer_w, B);
  auto conv = [&](const Tensor& cw, int64_t pad_left) {
    Conv1dParams p;
    p.pad_left = pad_left;
    p.packed = conv_packs_.find(cw);
    call.scratch(conv1d_scratch_bytes(cw, T, p, nt));
  };
  auto stage = [&](const CfmStageWeights& s) {
    mm(s.resnet.mlp_w, B);
    conv(s.resnet.conv1_w, s.resnet.conv1_w.shape[2] - 1);
    conv(s.resnet.conv2_w, s.resnet.conv2_w.shape[2] - 1);
    conv(s.resnet.res_w, 0);
    for (const CfmTransformerWeights& b : s.blocks) {
      const PackedBlock& pb = packed_for(b);
      for (const PackedWeight* p : {&pb.qkv, &pb.out, &pb.ff1, &pb.ff2})
        call.scratch(matmul_packed_scratch_bytes(*p, N, nt));
      call.scratch(matmul_mlp_scratch_bytes(pb.ff1, pb.ff2, N, nt));
    }
  };
  stage(w_.down);
  for (const CfmStageWeights& s : w_.mid) stage(s);
  stage(w_.up);
  conv(w_.down.conv_w, c_.conv_kernel - 1);
  conv(w_.up.conv_w, c_.conv_kernel - 1);
  conv(w_.final_conv_w, w_.final_conv_w.shape[2] - 1);
  conv(w_.proj_w, 0);
  if (attn_bf16_) {
    call.scratch(attention_bf16_scratch_bytes(B, c_.n_head, T, c_.head_dim, nt));
  } else {  // per thread: one item's scores, then the GEMMs' single-thread scratch
    const int64_t Qc = std::min<int64_t>(T, kQueryChunk), D = c_.head_dim;
    ArenaPlan solo;
    solo.alloc(DType::F32, {Qc, T});
    solo.scratch(
        std::max(matmul_scratch_bytes(DType::F32, Qc, T, D, 1), matmul_scratch_bytes(DType::F32, Qc, D, T, 1)));
    for (int i = 0; i < nt; ++i) {
      solo_.push_back(std::make_unique<ThreadPool>(1));
      solo_arena_.emplace_back(solo.bytes());
    }
  }
  work_ = reserve_stage_arenas(arena_, o.work, keep, call);
  out_buf_ = arena_.alloc(DType::F32, {B, c_.out_channels, T}, "cfm output");
  call_mark_ = arena_.mark();
  work_base_ = o.work ? 0 : call_mark_;
}

// Time embedding of B rows: t (and r for meanflow) -> temb [B, E].
void CfmEstimator::time_embedding(const float* t, const float* r, int64_t B, Bufs& b) {
  const int64_t S = c_.time_sin_dim, half = S / 2, E = c_.time_emb_dim;
  const int64_t n = c_.meanflow ? 2 * B : B;  // meanflow rows: t_0, r_0, t_1, r_1, ...
  Tensor &sin_in = b.sin_in, &h1 = b.h1, &h2 = b.h2, &temb = b.temb;
  // As torch computes it in f32: exp(arange(half) * -(ln(1e4) / (half - 1))), then (1000 t) f_i.
  const float neg = float(-std::log(kMaxPeriod) / double(half - 1));
  for (int64_t i = 0; i < n; ++i) {
    const float tv = c_.meanflow ? (i % 2 ? r[i / 2] : t[i / 2]) : t[i];
    const float st = kTimeScale * tv;
    float* row = static_cast<float*>(sin_in.row(i));
    for (int64_t k = 0; k < half; ++k) {
      const float a = st * std::exp(float(k) * neg);
      row[k] = std::sin(a);
      row[half + k] = std::cos(a);
    }
  }
  matmul_bias(pool_, w_.time1_w, w_.time1_b, sin_in, h1, work_);
  silu(pool_, h1, h1);
  if (!c_.meanflow) {
    matmul_bias(pool_, w_.time2_w, w_.time2_b, h1, temb, work_);
    return;
  }
  matmul_bias(pool_, w_.time2_w, w_.time2_b, h1, h2, work_);
  Tensor cat = reshape(h2, {B, 2 * E});  // row b = [t_emb | r_emb]
  matmul(pool_, w_.mixer_w, cat, temb, work_);
}

// y = mish(LayerNorm_channels(CausalConv1d(x))) * m; x must already be masked.
void CfmEstimator::causal_block(const Tensor& x, const Tensor& conv_w, const Tensor& conv_b, const Tensor& ln_w,
                                const Tensor& ln_b, Tensor& y, int64_t n_valid) {
  Conv1dParams p;
  p.pad_left = conv_w.shape[2] - 1;
  p.packed = conv_packs_.find(conv_w);
  conv1d(pool_, x, conv_w, conv_b, y, p, work_);
  layer_norm_channels(pool_, y, ln_w, ln_b, kLnEps, y);
  mish(pool_, y, y);
  mask_tail(y, n_valid);
}

// y = block2(block1(x m) + tproj) + res_conv(x m). x is masked in place; tmp: [B, C, T].
void CfmEstimator::resnet(const CfmResnetWeights& rw, Tensor& x, const Tensor& tproj, Tensor& y, Tensor& tmp,
                          int64_t n_valid) {
  mask_tail(x, n_valid);
  causal_block(x, rw.conv1_w, rw.conv1_b, rw.ln1_w, rw.ln1_b, tmp, n_valid);
  const int64_t B = tmp.shape[0], C = tmp.shape[1];
  const int64_t sh[3] = {B, C, 1}, st[3] = {C * 4, 4, 4};
  add(pool_, tmp, make_view(tproj, 3, sh, st, 0), tmp);
  mask_tail(tmp, n_valid);
  causal_block(tmp, rw.conv2_w, rw.conv2_b, rw.ln2_w, rw.ln2_b, y, n_valid);
  Conv1dParams pr;
  pr.packed = conv_packs_.find(rw.res_w);
  conv1d(pool_, x, rw.res_w, rw.res_b, tmp, pr, work_);
  add(pool_, y, tmp, y);
}

const CfmEstimator::PackedBlock& CfmEstimator::packed_for(const CfmTransformerWeights& tw) const {
  for (const auto& [w, p] : packed_)
    if (w == &tw) return p;
  fail("cfm estimator: transformer block weights %p were not packed at construction", static_cast<const void*>(&tw));
}

// One BasicTransformerBlock on xt [B, T, C] in place.
void CfmEstimator::transformer(const CfmTransformerWeights& tw, Bufs& bf, int64_t n_valid) {
  Tensor &xt = bf.xt, &qkv = bf.qkv, &att = bf.att, &ff = bf.ff, &vt_all = bf.vt;
  const int64_t inner = inner_dim(c_);
  Tensor q = cols(qkv, 0, inner), k = cols(qkv, inner, inner), v = cols(qkv, 2 * inner, inner);
  const PackedBlock& pk = packed_for(tw);
  // qkv [B, T, 3 inner] = q | k | v of norm1(xt), the LayerNorm fused into the GEMM.
  matmul_packed(pool_, pk.qkv, xt, qkv,
                MatmulEpilogue{nullptr, MatmulAct::None, nullptr, &tw.norm1_w, &tw.norm1_b, kLnEps}, work_);
  // Keys are the valid prefix (a length mask); every query row is computed, as upstream does.
  if (attn_bf16_)
    attention_fused(q, k, v, att, n_valid);
  else
    attention_f32(q, k, v, att, vt_all, n_valid);
  // xt += to_out(att) + b; xt += ff2(gelu(ff1(norm3(xt)) + b1)) + b2, epilogues fused into the GEMMs.
  matmul_packed(pool_, pk.out, att, xt, MatmulEpilogue{&tw.to_out_b, MatmulAct::None, &xt}, work_);
  // The MLP runs per 32-row tile with the hidden rows in per-thread scratch (ff only on fallback).
  matmul_mlp(pool_, pk.ff1, MatmulEpilogue{&tw.ff1_b, MatmulAct::Gelu, nullptr, &tw.norm3_w, &tw.norm3_b, kLnEps},
             pk.ff2, MatmulEpilogue{&tw.ff2_b, MatmulAct::None, &xt}, xt, ff, xt, work_);
}

// att [B, T, inner] = attention of q, k, v (column slices of [B, T, 3 inner]) over the keys
// [0, n_valid), in f32 GEMMs (gemm_ precision) per work item; q is scaled in place.
void CfmEstimator::attention_f32(Tensor& q, const Tensor& k, const Tensor& v, Tensor& att, Tensor& vt_all,
                                 int64_t n_valid) {
  // Items (row b, head, chunk of queries) run on the pool's threads, each with single-threaded
  // GEMMs and its own scratch: S = (q / sqrt(D)) k^T [nq, Tk], softmax, out = S v. For D = 64
  // the scale 1/8 is a power of two, so pre-scaling q is exact. This beats the flash kernel here (full
  // bidirectional attention, D = 64, no KV cache) and needs one pool dispatch per block.
  const int64_t Tk = n_valid, B = q.shape[0], T = q.shape[1], H = c_.n_head, D = c_.head_dim;
  scale(pool_, q, q, 1.f / std::sqrt(float(D)));
  Tensor vt = slice(vt_all, 2, 0, Tk);  // [B, inner, Tk]: head hd's v^T is rows hd D .. hd D + D - 1
  transpose_into(pool_, slice(v, 1, 0, Tk), vt);
  const int64_t n_chunks = (T + kQueryChunk - 1) / kQueryChunk, items = B * H * n_chunks;
  pool_.run([&](int ith, int nth) {
    ThreadPool& solo = *solo_[size_t(ith)];
    Arena& ar = solo_arena_[size_t(ith)];
    for (int64_t it = ith; it < items; it += nth) {
      const int64_t b = it / (H * n_chunks), hd = (it / n_chunks) % H, q0 = (it % n_chunks) * kQueryChunk;
      const int64_t nq = std::min(kQueryChunk, T - q0);
      ar.reset();
      Tensor sc = ar.alloc(DType::F32, {nq, Tk}, "cfm attention scores");
      const int64_t vsh[2] = {D, Tk}, vst[2] = {vt.stride[1], 4};
      const Tensor vth = make_view(vt, 2, vsh, vst, b * vt.stride[0] + hd * D * vt.stride[1]);
      gemm_f32(solo, slice(head_view(q, b, hd, D, T), 0, q0, nq), head_view(k, b, hd, D, Tk), sc, &ar, gemm_);
      softmax(solo, sc, sc);
      Tensor oq = slice(head_view(att, b, hd, D, T), 0, q0, nq);
      gemm_f32(solo, sc, vth, oq, &ar, gemm_);
    }
  });
}

// The same in one fused bf16 pass (ops/attention_bf16.h: AMX tiles or vdpbf16ps); q is not modified.
void CfmEstimator::attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& att, int64_t n_valid) {
  const int64_t B = q.shape[0], T = q.shape[1], H = c_.n_head, D = c_.head_dim;
  auto heads = [&](const Tensor& buf, int64_t rows) {  // [B, rows, H D] -> [B, H, rows, D]
    const int64_t sh[4] = {B, H, rows, D}, st[4] = {buf.stride[0], D * 4, buf.stride[1], 4};
    return make_view(buf, 4, sh, st, 0);
  };
  Tensor o = heads(att, T);
  attention_bf16(pool_, heads(q, T), heads(k, n_valid), heads(v, n_valid), o, 1.f / std::sqrt(float(D)), *work_);
}

// out = transformers(resnet(x)) (channels-first); t0, t1: [B, C, T] temporaries (out may be x).
void CfmEstimator::stage(const CfmStageWeights& sw, const char* resnet_name, const char* tfm_name, int index, Tensor& x,
                         Tensor& out, const Tensor& tproj, Bufs& b, int64_t n_valid) {
  resnet(sw.resnet, x, tproj, b.t0, b.t1, n_valid);
  emit(resnet_name, index, b.t0);
  transpose_into(pool_, b.t0, b.xt);
  for (const CfmTransformerWeights& tw : sw.blocks) transformer(tw, b, n_valid);
  emit(tfm_name, index, b.xt);
  transpose_into(pool_, b.xt, out);
}

const Tensor& CfmEstimator::forward(const Tensor& x, const Tensor& mask, const Tensor& mu, const float* t,
                                    const Tensor& spks, const Tensor& cond, const float* r) {
  GemmPrecisionScope gemm_scope(gemm_);
  const int64_t M = c_.out_channels, C = c_.channels;
  CBX_CHECK(x.dtype == DType::F32 && (x.ndim == 2 || x.ndim == 3) && x.dim(-2) == M,
            "cfm forward: x must be f32 [B, %lld, T] or [%lld, T], got %s %s", (long long)M, (long long)M,
            dtype_name(x.dtype), x.shape_str().c_str());
  const int64_t B = x.ndim == 3 ? x.shape[0] : 1, T = x.dim(-1);
  CBX_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= max_frames_,
            "cfm forward: x %s exceeds the reserved batch %lld / frames %lld", x.shape_str().c_str(),
            (long long)max_batch_, (long long)max_frames_);
  auto as3 = [&](const Tensor& a, const char* what) {
    CBX_CHECK(a.dtype == DType::F32 && a.ndim == x.ndim && a.numel() == B * M * T && a.dim(-2) == M && a.dim(-1) == T,
              "cfm forward: %s must be f32 with x's shape %s, got %s", what, x.shape_str().c_str(),
              a.shape_str().c_str());
    if (a.ndim == 3) return a;
    const int64_t sh[3] = {1, M, T}, st[3] = {M * a.stride[0], a.stride[0], a.stride[1]};
    return make_view(a, 3, sh, st, 0);
  };
  const Tensor x3 = as3(x, "x"), mu3 = as3(mu, "mu"), cond3 = as3(cond, "cond");
  CBX_CHECK(spks.dtype == DType::F32 && spks.numel() == B * M && spks.is_contiguous(),
            "cfm forward: spks must be a contiguous f32 [B, %lld], got %s", (long long)M, spks.shape_str().c_str());
  CBX_CHECK(t != nullptr && (!c_.meanflow || r != nullptr), "cfm forward: t%s missing", c_.meanflow ? " or r" : "");
  int64_t n_valid = T;
  if (!mask.empty()) {
    CBX_CHECK(mask.dtype == DType::F32 && mask.numel() == T && mask.is_contiguous(),
              "cfm forward: mask must be a contiguous f32 [%lld], got %s", (long long)T, mask.shape_str().c_str());
    const float* m = mask.ptr<float>();
    n_valid = 0;
    while (n_valid < T && m[n_valid] == 1.f) ++n_valid;
    for (int64_t i = n_valid; i < T; ++i)
      CBX_CHECK(m[i] == 0.f, "cfm forward: mask must be ones followed by zeros (a length mask); frame %lld is %g",
                (long long)i, double(m[i]));
    CBX_CHECK(n_valid > 0, "cfm forward: the mask has no valid frame");
  }

  work_->rewind(work_base_);
  const int64_t n_res = 2 + c_.n_mid_blocks;
  Bufs bf = alloc_bufs(*work_, c_, B, T);
  Tensor &temb = bf.temb, &temb_act = bf.temb_act, &tproj = bf.tproj, &xin = bf.xin, &hs = bf.hs;
  time_embedding(t, r, B, bf);
  emit("temb", -1, temb);
  mish(pool_, temb, temb_act);
  auto tp = [&](int64_t i) { return slice(tproj, 0, i, 1); };
  auto proj = [&](const CfmResnetWeights& rw, int64_t i) {
    Tensor o = reshape(tp(i), {B, C});
    matmul_bias(pool_, rw.mlp_w, rw.mlp_b, temb_act, o, work_);
  };
  proj(w_.down.resnet, 0);
  for (int i = 0; i < c_.n_mid_blocks; ++i) proj(w_.mid[size_t(i)].resnet, 1 + i);
  proj(w_.up.resnet, n_res - 1);

  // x_in = [x | mu | spks over T | cond] along channels.
  {
    Tensor dx = slice(xin, 1, 0, M), dm = slice(xin, 1, M, M), dc = slice(xin, 1, 3 * M, M);
    copy_strided(x3, dx);
    copy_strided(mu3, dm);
    copy_strided(cond3, dc);
    const float* sp = spks.ptr<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t ch = 0; ch < M; ++ch) {
        float* row = static_cast<float*>(xin.row(b * c_.in_channels + 2 * M + ch));
        std::fill(row, row + T, sp[b * M + ch]);
      }
  }
  emit("x_in", -1, xin);

  Tensor h = slice(hs, 1, 0, C), skip = slice(hs, 1, C, C);
  Conv1dParams causal;
  causal.pad_left = c_.conv_kernel - 1;

  // down: skip = transformers(resnet(x_in)); h = conv(skip m)
  stage(w_.down, "down.resnet", "down.tfm", -1, xin, skip, tp(0), bf, n_valid);
  mask_tail(skip, n_valid);
  causal.packed = conv_packs_.find(w_.down.conv_w);
  conv1d(pool_, skip, w_.down.conv_w, w_.down.conv_b, h, causal, work_);
  emit("down.out", -1, h);
  for (int i = 0; i < c_.n_mid_blocks; ++i)
    stage(w_.mid[size_t(i)], "mid.resnet", "mid.tfm", i, h, h, tp(1 + i), bf, n_valid);
  // up: h = transformers(resnet([h | skip])); t0 = conv(h m)
  stage(w_.up, "up.resnet", "up.tfm", -1, hs, h, tp(n_res - 1), bf, n_valid);
  mask_tail(h, n_valid);
  causal.packed = conv_packs_.find(w_.up.conv_w);
  conv1d(pool_, h, w_.up.conv_w, w_.up.conv_b, bf.t0, causal, work_);
  emit("up.out", -1, bf.t0);
  mask_tail(bf.t0, n_valid);
  causal_block(bf.t0, w_.final_conv_w, w_.final_conv_b, w_.final_ln_w, w_.final_ln_b, bf.t1, n_valid);
  emit("final_block", -1, bf.t1);
  const int64_t osh[3] = {B, M, T}, ost[3] = {M * T * 4, T * 4, 4};
  out_ = make_view(out_buf_, 3, osh, ost, 0);
  Conv1dParams pp;
  pp.packed = conv_packs_.find(w_.proj_w);
  conv1d(pool_, bf.t1, w_.proj_w, w_.proj_b, out_, pp, work_);
  mask_tail(out_, n_valid);
  emit("out", -1, out_);
  return out_;
}

}  // namespace cbx
