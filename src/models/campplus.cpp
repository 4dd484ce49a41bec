// CAMPPlus x-vector (spec §11.2). The head works on frequency-major zero-bordered maps
// [H + 2, C, T + 2]; the TDNN part on channels-first [C, T2] slabs, each dense layer appending
// its 32 rows in place. Every BatchNorm that follows a convolution is folded into that
// convolution's weights at bind time (W' = W scale_o, b' = shift_o); the ones that precede a
// convolution (dense layers' nonlinear1, transits, out_nonlinear) run as channel_affine + relu.
#include "models/campplus.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "audio/mel.h"
#include "core/arena.h"
#include "core/arena_plan.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/huge_buffer.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace cbx {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

struct Binder {
  const GgufFile& f;
  std::vector<HugePiece>& owned;  // the folded copies (huge-page pieces: read every clone)

  float* own(int64_t n) { return reinterpret_cast<float*>(owned.emplace_back(size_t(n) * 4).data()); }

  Tensor get(const std::string& name, const std::vector<int64_t>& shape) const {
    const GgufTensorInfo* ti = f.find_tensor(name);
    CBX_CHECK(ti != nullptr, "%s: missing tensor '%s' %s", f.path().c_str(), name.c_str(), shape_text(shape).c_str());
    Tensor t = f.tensor(*ti);
    bool ok = t.ndim == int(shape.size());
    for (int i = 0; ok && i < t.ndim; ++i) ok = t.shape[i] == shape[size_t(i)];
    CBX_CHECK(ok, "%s: tensor '%s' has shape %s, expected %s", f.path().c_str(), name.c_str(), t.shape_str().c_str(),
              shape_text(shape).c_str());
    CBX_CHECK(t.dtype == DType::F32, "%s: tensor '%s' is %s; CAMPPlus weights must be f32", f.path().c_str(),
              name.c_str(), dtype_name(t.dtype));
    return t;
  }
  // Convolution `conv` [O, ...] followed by BatchNorm `bn` (folded scale/shift [O]):
  // weight * scale per output channel, bias = shift.
  std::pair<Tensor, Tensor> fold(const std::string& conv, const std::vector<int64_t>& shape, const std::string& bn) {
    Tensor w = get(conv + ".weight", shape);
    Tensor s = get(bn + ".scale", {shape[0]}), b = get(bn + ".shift", {shape[0]});
    const int64_t O = shape[0], per = w.numel() / O;
    float* wf = own(w.numel());
    const float* src = w.ptr<float>();
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < per; ++i) wf[o * per + i] = src[o * per + i] * s.ptr<float>()[o];
    return {make_tensor(DType::F32, w.ndim, w.shape, wf, size_t(w.numel()) * 4), b};
  }
  // The same for a conv2d 3x3 [O, C, 3, 3] followed by BN, laid out as the conv1d weight
  // [O, 3C, 3] the head uses: input row ky * C + c, tap kx.
  std::pair<Tensor, Tensor> fold3x3(const std::string& conv, int64_t O, int64_t C, const std::string& bn) {
    auto [w, b] = fold(conv, {O, C, 3, 3}, bn);
    float* wf = own(O * C * 9);
    const float* src = w.ptr<float>();
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t ky = 0; ky < 3; ++ky)
          for (int64_t kx = 0; kx < 3; ++kx) wf[((o * 3 + ky) * C + c) * 3 + kx] = src[((o * C + c) * 3 + ky) * 3 + kx];
    return {make_tensor(DType::F32, {O, 3 * C, 3}, wf, size_t(O * C * 9) * 4), b};
  }
};

struct HeadBlock {
  Tensor c1_w, c1_b, c2_w, c2_b, sc_w, sc_b;  // sc_*: projection shortcut (first block only)
  int64_t stride = 1;
};

struct DenseLayer {
  Tensor bn1_s, bn1_b;  // nonlinear1 [in]
  Tensor l1_w, l1_b;    // linear1 [bn, in, 1] with nonlinear2 folded
  Tensor local_w;       // cam_layer.linear_local [g, bn, k]
  Tensor cl1_w, cl1_b;  // cam_layer.linear1 [bn/2, bn, 1]
  Tensor cl2_w, cl2_b;  // cam_layer.linear2 [g, bn/2, 1]
  int64_t in = 0;
};

struct Block {
  std::vector<DenseLayer> layers;
  int64_t in = 0, out = 0, kernel = 3, dilation = 1;
  Tensor tr_s, tr_b, tr_w;  // transit: BN [out], conv [out/2, out, 1]
};

}  // namespace

struct CampPlus::Impl {
  CampplusConfig cfg;
  int64_t max_samples = 0, max_frames = 0;
  int64_t n_freq[4] = {};  // head heights: feat, /2, /4, /8
  Tensor h_c1_w, h_c1_b, h_c2_w, h_c2_b;
  std::vector<HeadBlock> head;  // layer1 blocks, then layer2 blocks
  Tensor tdnn_w, tdnn_b;
  std::vector<Block> blocks;
  Tensor out_s, out_b;
  Tensor dense_w, dense_b;  // [E, 2C] (BN folded), [E]
  int64_t c_max = 0, c_final = 0;
  std::vector<HugePiece> owned;
  KaldiFbank fbank;
  Arena arena;
  // Per pool thread (max_threads of them): scratch of the head's single-threaded conv1d calls,
  // and the one-thread pool they run on (a pool's WorkSplit is state of one op at a time, so
  // threads running ops side by side each need their own). Thread 0's pool is also the calling
  // thread's for the elementwise passes and the tiny per-segment convs: they are memory-bound
  // or small, and each pooled op is a synchronisation, which costs a scheduler time slice when
  // the machine is oversubscribed. The GEMM-sized convs use the caller's pool.
  std::vector<Arena> tscratch;
  std::vector<std::unique_ptr<ThreadPool>> tsolo;
  int max_threads = 1;  // the largest pool the arenas are sized for
  Capture capture;

  void emit(const char* name, const Tensor& t) const {
    if (capture) capture(name, t);
  }
  static int64_t t_half(int64_t T) { return (T - 1) / 2 + 1; }
  Conv1dParams tdnn_params() const {
    Conv1dParams p;
    p.stride = 2;
    p.pad_left = p.pad_right = cfg.tdnn_kernel / 2;
    return p;
  }
  static Conv1dParams local_params(const Block& b) {
    Conv1dParams p;
    p.dilation = b.dilation;
    p.pad_left = p.pad_right = b.dilation * (b.kernel / 2);
    return p;
  }
  void plan_forward(ArenaPlan& plan, int64_t T) const;
  size_t thread_scratch_bytes(int64_t T) const;
  std::vector<float> forward(ThreadPool& pool, const float* feats, int64_t T);
};

// forward(T)'s allocations in its order, each conv's scratch a transient block (pools of up to
// max_threads; the solo ones one thread): the two block slabs, the head's maps and the tdnn's
// strided conv (rewound before the dense blocks run), then the blocks' buffers and convs. The
// convs' scratch is the larger of F32 and BF16: the calling thread's precision scope decides.
void CampPlus::Impl::plan_forward(ArenaPlan& plan, int64_t T) const {
  const int64_t T2 = t_half(T), mc = cfg.head_channels, F = cfg.feat_dim, W = T + 2;
  const int64_t bn = cfg.bn_channels, g = cfg.growth_rate, S = (T2 + cfg.seg_len - 1) / cfg.seg_len;
  const int nt = max_threads;
  for (int i = 0; i < 2; ++i) plan.alloc(DType::F32, {c_max, T2});
  const size_t head = plan.mark();
  plan.alloc(DType::F32, {(F + 2) * mc * W});
  for (int i = 0; i < 3; ++i) plan.alloc(DType::F32, {(n_freq[1] + 2) * mc * W});
  plan.alloc(DType::F32, {(F + 2) * W});
  plan.scratch(
      conv1d_scratch_bytes_any_precision(mc * n_freq[3], cfg.init_channels, T, cfg.tdnn_kernel, tdnn_params(), nt));
  plan.rewind(head);
  plan.alloc(DType::F32, {c_max, T2});
  plan.alloc(DType::F32, {bn, T2});
  plan.alloc(DType::F32, {bn, S});
  plan.alloc(DType::F32, {bn / 2, S});
  plan.alloc(DType::F32, {g, S});
  for (const Block& blk : blocks) {
    for (const DenseLayer& d : blk.layers) {
      plan.scratch(conv1d_scratch_bytes_any_precision(d.in, bn, T2, 1, Conv1dParams{}, nt));
      plan.scratch(conv1d_scratch_bytes_any_precision(bn, g, T2, blk.kernel, local_params(blk), nt));
      plan.scratch(conv1d_scratch_bytes_any_precision(bn, bn / 2, S, 1, Conv1dParams{}, 1));
      plan.scratch(conv1d_scratch_bytes_any_precision(bn / 2, g, S, 1, Conv1dParams{}, 1));
    }
    plan.scratch(conv1d_scratch_bytes_any_precision(blk.out, blk.out / 2, T2, 1, Conv1dParams{}, nt));
  }
  plan.alloc(DType::F32, {1, 2 * c_final});
  plan.alloc(DType::F32, {1, cfg.embed_size});
}

// The most scratch one of the head's single-threaded convs takes from its thread's arena (a
// 3x3 conv is a k3 conv1d over T + 2 columns of 3C input rows; the shortcut a 1x1 one).
size_t CampPlus::Impl::thread_scratch_bytes(int64_t T) const {
  const int64_t mc = cfg.head_channels;
  ArenaPlan plan;
  plan.scratch(conv1d_scratch_bytes_any_precision(3, mc, T + 2, 3, Conv1dParams{}, 1));
  plan.scratch(conv1d_scratch_bytes_any_precision(3 * mc, mc, T + 2, 3, Conv1dParams{}, 1));
  plan.scratch(conv1d_scratch_bytes_any_precision(mc, mc, T, 1, Conv1dParams{}, 1));
  return plan.bytes();
}

CampPlus::CampPlus(const GgufFile& f, const ModelConfig& c, int64_t max_samples, int max_threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const CampplusConfig& k = c.campplus;
  m.cfg = k;
  CBX_CHECK(k.feat_dim == KaldiFbank::kMels && k.feat_dim % 8 == 0,
            "%s: campplus feat_dim %d; the Kaldi fbank front-end gives %d", f.path().c_str(), k.feat_dim,
            KaldiFbank::kMels);
  CBX_CHECK(k.head_channels >= 1 && k.head_blocks >= 1 && k.init_channels >= 1 && k.tdnn_kernel % 2 == 1 &&
                k.growth_rate >= 1 && k.bn_channels >= 2 && k.bn_channels % 2 == 0 && k.embed_size >= 1 &&
                k.seg_len >= 1,
            "%s: bad campplus config (head %d x %d, init %d, tdnn kernel %d, growth %d, bn %d, embed %d, "
            "seg %d)",
            f.path().c_str(), k.head_channels, k.head_blocks, k.init_channels, k.tdnn_kernel, k.growth_rate,
            k.bn_channels, k.embed_size, k.seg_len);
  CBX_CHECK(k.block_layers.size() == k.block_kernels.size() && k.block_layers.size() == k.block_dilations.size() &&
                !k.block_layers.empty(),
            "%s: campplus block lists differ in length (%zu layers, %zu kernels, %zu dilations)", f.path().c_str(),
            k.block_layers.size(), k.block_kernels.size(), k.block_dilations.size());
  CBX_CHECK(max_samples >= 1, "campplus: max_samples %lld must be >= 1", (long long)max_samples);
  CBX_CHECK(max_threads >= 1, "campplus: max_threads %d must be >= 1", max_threads);
  m.max_samples = max_samples;
  m.max_frames = m.fbank.num_frames(size_t(max_samples));
  m.max_threads = max_threads;
  m.n_freq[0] = k.feat_dim;
  for (int i = 1; i < 4; ++i) m.n_freq[i] = (m.n_freq[i - 1] - 1) / 2 + 1;

  Binder b{f, m.owned};
  const int64_t mc = k.head_channels;
  std::tie(m.h_c1_w, m.h_c1_b) = b.fold3x3("campplus.head.conv1", mc, 1, "campplus.head.bn1");
  for (int layer = 1; layer <= 2; ++layer)
    for (int j = 0; j < k.head_blocks; ++j) {
      const std::string p = "campplus.head.layer" + std::to_string(layer) + "." + std::to_string(j);
      HeadBlock hb;
      hb.stride = j == 0 ? 2 : 1;
      std::tie(hb.c1_w, hb.c1_b) = b.fold3x3(p + ".conv1", mc, mc, p + ".bn1");
      std::tie(hb.c2_w, hb.c2_b) = b.fold3x3(p + ".conv2", mc, mc, p + ".bn2");
      if (j == 0) {
        std::tie(hb.sc_w, hb.sc_b) = b.fold(p + ".shortcut.0", {mc, mc, 1, 1}, p + ".shortcut.1");
        hb.sc_w = reshape(hb.sc_w, {mc, mc, 1});
      }
      m.head.push_back(hb);
    }
  std::tie(m.h_c2_w, m.h_c2_b) = b.fold3x3("campplus.head.conv2", mc, mc, "campplus.head.bn2");
  {
    // The head leaves its output frequency-major (row f * mc + c); upstream flattens it
    // channel-major (row c * F8 + f), so the tdnn's input channels are permuted to match.
    const int64_t O = k.init_channels, F8 = m.n_freq[3], K = k.tdnn_kernel;
    auto [w, sh] = b.fold("campplus.tdnn.linear", {O, mc * F8, K}, "campplus.tdnn.nonlinear.batchnorm");
    float* wf = b.own(w.numel());
    const float* src = w.ptr<float>();
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < mc; ++c)
        for (int64_t f8 = 0; f8 < F8; ++f8)
          std::memcpy(wf + (o * mc * F8 + f8 * mc + c) * K, src + (o * mc * F8 + c * F8 + f8) * K, size_t(K) * 4);
    m.tdnn_w = make_tensor(DType::F32, {O, mc * F8, K}, wf, size_t(w.numel()) * 4);
    m.tdnn_b = sh;
  }
  int64_t ch = k.init_channels;
  const int64_t g = k.growth_rate, bn = k.bn_channels;
  for (size_t bi = 0; bi < k.block_layers.size(); ++bi) {
    Block blk;
    blk.in = ch;
    blk.kernel = k.block_kernels[bi];
    blk.dilation = k.block_dilations[bi];
    CBX_CHECK(blk.kernel % 2 == 1 && blk.dilation >= 1 && k.block_layers[bi] >= 1,
              "%s: campplus block %zu: kernel %lld must be odd, dilation %lld and layers %d positive", f.path().c_str(),
              bi + 1, (long long)blk.kernel, (long long)blk.dilation, k.block_layers[bi]);
    const std::string bp = "campplus.block" + std::to_string(bi + 1);
    for (int l = 0; l < k.block_layers[bi]; ++l) {
      const std::string p = bp + ".tdnnd" + std::to_string(l + 1);
      DenseLayer d;
      d.in = ch + int64_t(l) * g;
      d.bn1_s = b.get(p + ".nonlinear1.batchnorm.scale", {d.in});
      d.bn1_b = b.get(p + ".nonlinear1.batchnorm.shift", {d.in});
      std::tie(d.l1_w, d.l1_b) = b.fold(p + ".linear1", {bn, d.in, 1}, p + ".nonlinear2.batchnorm");
      d.local_w = b.get(p + ".cam_layer.linear_local.weight", {g, bn, blk.kernel});
      d.cl1_w = b.get(p + ".cam_layer.linear1.weight", {bn / 2, bn, 1});
      d.cl1_b = b.get(p + ".cam_layer.linear1.bias", {bn / 2});
      d.cl2_w = b.get(p + ".cam_layer.linear2.weight", {g, bn / 2, 1});
      d.cl2_b = b.get(p + ".cam_layer.linear2.bias", {g});
      blk.layers.push_back(d);
    }
    ch += int64_t(k.block_layers[bi]) * g;
    blk.out = ch;
    m.c_max = std::max(m.c_max, ch);
    const std::string tp = "campplus.transit" + std::to_string(bi + 1);
    blk.tr_s = b.get(tp + ".nonlinear.batchnorm.scale", {ch});
    blk.tr_b = b.get(tp + ".nonlinear.batchnorm.shift", {ch});
    blk.tr_w = b.get(tp + ".linear.weight", {ch / 2, ch, 1});
    ch /= 2;
    m.blocks.push_back(std::move(blk));
  }
  m.c_final = ch;
  m.out_s = b.get("campplus.out_nonlinear.batchnorm.scale", {ch});
  m.out_b = b.get("campplus.out_nonlinear.batchnorm.shift", {ch});
  Tensor dw, db;
  std::tie(dw, db) = b.fold("campplus.dense.linear", {k.embed_size, 2 * ch, 1}, "campplus.dense.nonlinear.batchnorm");
  m.dense_w = reshape(dw, {k.embed_size, 2 * ch});
  m.dense_b = db;

  // embed()'s fbank features at the most frames, then forward(); embed_fbank() takes at most
  // as many frames without them.
  const int64_t T = std::max<int64_t>(m.max_frames, 3);
  ArenaPlan plan;
  plan.alloc(DType::F32, {T, k.feat_dim});
  m.plan_forward(plan, T);
  m.arena.reserve(plan.bytes());
  const size_t per_thread = m.thread_scratch_bytes(T);
  for (int i = 0; i < max_threads; ++i) {
    m.tscratch.emplace_back(per_thread);
    m.tsolo.push_back(std::make_unique<ThreadPool>(1));
  }
}

CampPlus::~CampPlus() = default;

size_t CampPlus::arena_bytes() const { return impl_->arena.capacity(); }
size_t CampPlus::arena_high_water() const { return impl_->arena.high_water(); }
size_t CampPlus::thread_scratch_bytes() const { return impl_->tscratch[0].capacity(); }
size_t CampPlus::thread_scratch_high_water() const {
  size_t hw = 0;
  for (const Arena& a : impl_->tscratch) hw = std::max(hw, a.high_water());
  return hw;
}

void CampPlus::set_capture(Capture fn) { impl_->capture = std::move(fn); }

int64_t CampPlus::num_frames(int64_t n) const { return impl_->fbank.num_frames(size_t(std::max<int64_t>(n, 0))); }

std::vector<float> CampPlus::embed(ThreadPool& pool, const float* wav, int64_t n) {
  Impl& m = *impl_;
  CBX_CHECK(wav != nullptr || n == 0, "campplus: null wave");
  CBX_CHECK(n <= m.max_samples, "campplus: %lld samples exceed the %lld reserved at construction", (long long)n,
            (long long)m.max_samples);
  const int64_t T = m.fbank.num_frames(size_t(std::max<int64_t>(n, 0)));
  CBX_CHECK(T >= 3,
            "campplus: reference too short: %lld samples at 16 kHz give %lld fbank frames, need at least 3 "
            "(720 samples)",
            (long long)n, (long long)T);
  m.arena.reset();
  Tensor feats = m.arena.alloc(DType::F32, {T, m.cfg.feat_dim}, "campplus fbank");
  m.fbank.compute_into(wav, size_t(n), true, feats.ptr<float>());
  m.emit("fbank", feats);
  return m.forward(pool, feats.ptr<float>(), T);
}

std::vector<float> CampPlus::embed_fbank(ThreadPool& pool, const float* fbank, int64_t T) {
  Impl& m = *impl_;
  CBX_CHECK(fbank != nullptr, "campplus: null fbank");
  CBX_CHECK(T >= 3 && T <= std::max<int64_t>(m.max_frames, 3),
            "campplus: %lld fbank frames outside [3, %lld] (the reservation made at construction)", (long long)T,
            (long long)std::max<int64_t>(m.max_frames, 3));
  m.arena.reset();
  return m.forward(pool, fbank, T);
}

std::vector<float> CampPlus::Impl::forward(ThreadPool& pool, const float* feats, int64_t T) {
  const int64_t F = cfg.feat_dim, mc = cfg.head_channels, T2 = t_half(T);
  const int64_t bn = cfg.bn_channels, g = cfg.growth_rate, L = cfg.seg_len;
  const int64_t S = (T2 + L - 1) / L;
  CBX_CHECK(pool.size() <= max_threads,
            "campplus: a pool of %d threads exceeds the %d its scratch was reserved for at construction", pool.size(),
            max_threads);
  ThreadPool& solo = *tsolo[0];  // the calling thread's one-thread pool
  // (The caller reset the arena; the fbank features may lie at its start.)
  // Two slabs for the dense blocks: block b reads/appends in cur; its transit writes next.
  Tensor slab[2] = {arena.alloc(DType::F32, {c_max, T2}, "campplus block slab"),
                    arena.alloc(DType::F32, {c_max, T2}, "campplus block slab")};

  // ---- head (FCM): 2-D over (freq, time) ----
  // Maps are stored frequency-major with a zero border, [H + 2, C, T + 2]: the three input
  // rows of output row ho are then one contiguous [3C, T + 2] block starting at padded row
  // ho * stride, so a 3x3 conv (stride (s, 1), pad 1) is a conv1d (k 3, no padding) batched
  // over the output rows, with no im2col.
  const size_t head_mark = arena.mark();
  {
    const int64_t W = T + 2, F1 = n_freq[1];
    struct Map {
      Tensor store;
      int64_t H = 0, C = 0;
    };
    auto new_map = [&](int64_t H, int64_t C) {
      return Map{arena.alloc(DType::F32, {(H + 2) * C * W}, "campplus head map"), H, C};
    };
    auto shape_map = [&](Map& m, int64_t H, int64_t C) {  // (re)use storage with zero borders
      CBX_ASSERT((H + 2) * C * W <= m.store.numel());
      m.H = H;
      m.C = C;
      float* p = m.store.ptr<float>();
      std::memset(p, 0, size_t(C * W) * 4);
      std::memset(p + (H + 1) * C * W, 0, size_t(C * W) * 4);
      for (int64_t r = 1; r <= H * C; ++r) p[(C * W) + (r - 1) * W] = p[(C * W) + (r - 1) * W + W - 1] = 0.f;
    };
    auto view = [&](const Map& m, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> stride_f,
                    int64_t offset_f) {
      int64_t sh[3], st[3];
      int n = 0;
      for (int64_t v : shape) sh[n++] = v;
      n = 0;
      for (int64_t v : stride_f) st[n++] = v * 4;
      return make_view(m.store, n, sh, st, offset_f * 4);
    };
    auto interior = [&](const Map& m) { return view(m, {m.H * m.C, T}, {W, 1}, m.C * W + 1); };
    // Each step below is one parallel region: the threads own ranges of output rows and run
    // the ops on them single-threaded (one synchronisation per step instead of one per row).
    // The caller's GEMM precision is a thread-local scope: each pool thread takes it on, so
    // the result does not depend on which thread ran a row.
    const GemmPrecision precision = gemm_precision_scope();
    auto rows_par = [&](int64_t rows, const auto& fn) {
      auto body = [&](int ith, int nth) {
        GemmPrecisionScope scope(precision);
        int64_t r0, r1;
        ThreadPool::split(rows, ith, nth, &r0, &r1);
        if (r1 > r0) fn(r0, r1, tscratch[size_t(ith)], *tsolo[size_t(ith)]);
      };
      if (pool.size() <= 1 || rows < 2)
        body(0, 1);
      else
        pool.run(body);
    };
    auto interior_rows = [&](const Map& m, int64_t r0, int64_t r1) {  // output rows [r0, r1)
      return view(m, {(r1 - r0) * m.C, T}, {W, 1}, m.C * W + 1 + r0 * m.C * W);
    };
    // 3x3 conv, stride (s, 1), pad 1, rows [r0, r1) of out: in [H, C] -> out [Ho, O].
    auto conv3 = [&](const Map& in, const Tensor& w, const Tensor& bias, Map& out, int64_t s, int64_t r0, int64_t r1,
                     Arena& sc, ThreadPool& sp) {
      Tensor x = view(in, {r1 - r0, 3 * in.C, W}, {s * in.C * W, W, 1}, r0 * s * in.C * W);
      Tensor y = view(out, {r1 - r0, out.C, T}, {out.C * W, W, 1}, out.C * W + 1 + r0 * out.C * W);
      conv1d(sp, x, w, bias, y, Conv1dParams{}, &sc);
    };
    Map maps[4] = {new_map(F, mc), new_map(F1, mc), new_map(F1, mc), new_map(F1, mc)};
    // Input [F, 1]: the fbank transposed.
    Map x0 = new_map(F, 1);
    shape_map(x0, F, 1);
    float* xp = x0.store.ptr<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t fq = 0; fq < F; ++fq) xp[(fq + 1) * W + t + 1] = feats[t * F + fq];
    shape_map(maps[0], F, mc);
    rows_par(F, [&](int64_t r0, int64_t r1, Arena& sc, ThreadPool& sp) {
      conv3(x0, h_c1_w, h_c1_b, maps[0], 1, r0, r1, sc, sp);
      Tensor o = interior_rows(maps[0], r0, r1);
      relu(sp, o, o);
    });
    int in = 0;
    for (const HeadBlock& hb : head) {
      const int64_t ho = (maps[in].H - 1) / hb.stride + 1;
      const int a = in == 0 ? 1 : 0, b = 3 - in - a;  // two of maps 0..2 that `in` is not
      shape_map(maps[a], ho, mc);
      shape_map(maps[b], ho, mc);
      rows_par(ho, [&](int64_t r0, int64_t r1, Arena& sc, ThreadPool& sp) {
        conv3(maps[in], hb.c1_w, hb.c1_b, maps[a], hb.stride, r0, r1, sc, sp);
        Tensor o1 = interior_rows(maps[a], r0, r1);
        relu(sp, o1, o1);
      });
      rows_par(ho, [&](int64_t r0, int64_t r1, Arena& sc, ThreadPool& sp) {
        conv3(maps[a], hb.c2_w, hb.c2_b, maps[b], 1, r0, r1, sc, sp);
        Tensor o2 = interior_rows(maps[b], r0, r1);
        if (!hb.sc_w.empty()) {  // 1x1 stride (s, 1) projection of `in` into map 3
          const Map& src = maps[in];
          Map& dst = maps[3];
          Tensor x =
              view(src, {r1 - r0, src.C, T}, {hb.stride * src.C * W, W, 1}, src.C * W + 1 + r0 * hb.stride * src.C * W);
          Tensor y = view(dst, {r1 - r0, mc, T}, {mc * W, W, 1}, mc * W + 1 + r0 * mc * W);
          conv1d(sp, x, hb.sc_w, hb.sc_b, y, Conv1dParams{}, &sc);
          Tensor yi = view(dst, {(r1 - r0) * mc, T}, {W, 1}, mc * W + 1 + r0 * mc * W);
          add(sp, o2, yi, o2);
        } else {
          Tensor xi = interior_rows(maps[in], r0, r1);
          add(sp, o2, xi, o2);
        }
        relu(sp, o2, o2);
      });
      in = b;
    }
    // conv2: stride (2, 1) -> [F/8, mc]
    const int out = in == 0 ? 1 : 0;
    const int64_t h3 = (maps[in].H - 1) / 2 + 1;
    CBX_ASSERT(h3 == n_freq[3]);
    shape_map(maps[out], h3, mc);
    rows_par(h3, [&](int64_t r0, int64_t r1, Arena& sc, ThreadPool& sp) {
      conv3(maps[in], h_c2_w, h_c2_b, maps[out], 2, r0, r1, sc, sp);
      Tensor o = interior_rows(maps[out], r0, r1);
      relu(sp, o, o);
    });
    Tensor flat = interior(maps[out]);  // [F8 * mc, T], row f * mc + c
    if (capture) {                      // upstream's channel-major order, row c * F8 + f
      std::vector<float> hv(size_t(mc * h3 * T));
      for (int64_t f8 = 0; f8 < h3; ++f8)
        for (int64_t c = 0; c < mc; ++c)
          std::memcpy(&hv[size_t((c * h3 + f8) * T)], flat.row(f8 * mc + c), size_t(T) * 4);
      emit("head", make_tensor(DType::F32, {mc * h3, T}, hv.data(), hv.size() * 4));
    }

    // ---- tdnn: conv1d k5 stride 2 (BN folded) + relu, into slab 0 rows [0, init) ----
    Tensor y = slice(slab[0], 0, 0, cfg.init_channels);
    conv1d(pool, flat, tdnn_w, tdnn_b, y, tdnn_params(), &arena);
    relu(solo, y, y);
    emit("tdnn", y);
  }
  arena.rewind(head_mark);

  // ---- CAM dense TDNN blocks + transits ----
  Tensor norm_full = arena.alloc(DType::F32, {c_max, T2}, "campplus normalised input");
  Tensor bott = arena.alloc(DType::F32, {bn, T2}, "campplus bottleneck");
  Tensor ctx = arena.alloc(DType::F32, {bn, S}, "campplus context");
  Tensor hid = arena.alloc(DType::F32, {bn / 2, S}, "campplus context hidden");
  Tensor mask = arena.alloc(DType::F32, {g, S}, "campplus mask");
  int cur = 0;
  char name[32];
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const Block& blk = blocks[bi];
    Tensor& sl = slab[cur];
    for (const DenseLayer& d : blk.layers) {
      Tensor xin = slice(sl, 0, 0, d.in);
      Tensor nx = slice(norm_full, 0, 0, d.in);
      channel_affine(solo, xin, d.bn1_s, d.bn1_b, nx);
      relu(solo, nx, nx);
      conv1d(pool, nx, d.l1_w, d.l1_b, bott, Conv1dParams{}, &arena);
      relu(solo, bott, bott);
      Tensor y = slice(sl, 0, d.in, g);
      conv1d(pool, bott, d.local_w, Tensor{}, y, local_params(blk), &arena);
      // context = mean over time + the mean of each seg_len segment (ceil mode: the last
      // one averages only its frames); it is constant per segment, so the two 1x1 convs
      // run on [bn, S] and the mask is repeated over each segment's frames.
      const float* bp = bott.ptr<float>();
      float* cp = ctx.ptr<float>();
      for (int64_t c = 0; c < bn; ++c) {
        const float* r = bp + c * T2;
        double tot = 0.0;
        for (int64_t t = 0; t < T2; ++t) tot += r[t];
        const float mean = float(tot / double(T2));
        for (int64_t s = 0; s < S; ++s) {
          const int64_t t0 = s * L, t1 = std::min(T2, t0 + L);
          double seg = 0.0;
          for (int64_t t = t0; t < t1; ++t) seg += r[t];
          cp[c * S + s] = mean + float(seg / double(t1 - t0));
        }
      }
      conv1d(solo, ctx, d.cl1_w, d.cl1_b, hid, Conv1dParams{}, &arena);
      relu(solo, hid, hid);
      conv1d(solo, hid, d.cl2_w, d.cl2_b, mask, Conv1dParams{}, &arena);
      sigmoid(solo, mask, mask);
      const float* mp = mask.ptr<float>();
      for (int64_t c = 0; c < g; ++c) {
        float* r = static_cast<float*>(y.row(c));
        for (int64_t s = 0; s < S; ++s) {
          const float v = mp[c * S + s];
          for (int64_t t = s * L, e = std::min(T2, s * L + L); t < e; ++t) r[t] *= v;
        }
      }
    }
    std::snprintf(name, sizeof name, "block%zu", bi + 1);
    emit(name, slice(sl, 0, 0, blk.out));
    Tensor xin = slice(sl, 0, 0, blk.out);
    Tensor nx = slice(norm_full, 0, 0, blk.out);
    channel_affine(solo, xin, blk.tr_s, blk.tr_b, nx);
    relu(solo, nx, nx);
    Tensor out = slice(slab[1 - cur], 0, 0, blk.out / 2);
    conv1d(pool, nx, blk.tr_w, Tensor{}, out, Conv1dParams{}, &arena);
    std::snprintf(name, sizeof name, "transit%zu", bi + 1);
    emit(name, out);
    cur = 1 - cur;
  }

  // ---- out_nonlinear, statistics pooling, dense + BN ----
  const int64_t C = c_final;
  Tensor xin = slice(slab[cur], 0, 0, C);
  Tensor nx = slice(norm_full, 0, 0, C);
  channel_affine(solo, xin, out_s, out_b, nx);
  relu(solo, nx, nx);
  Tensor stats = arena.alloc(DType::F32, {1, 2 * C}, "campplus stats");
  Tensor mean = make_tensor(DType::F32, {C}, stats.ptr<float>(), size_t(C) * 4);
  Tensor sd = make_tensor(DType::F32, {C}, stats.ptr<float>() + C, size_t(C) * 4);
  row_mean_std(nx, mean, sd, true);
  emit("stats", reshape(stats, {2 * C}));
  Tensor emb = arena.alloc(DType::F32, {1, cfg.embed_size}, "campplus embedding");
  matmul_bias(pool, dense_w, dense_b, stats, emb);
  return std::vector<float>(emb.ptr<float>(), emb.ptr<float>() + cfg.embed_size);
}

}  // namespace cbx
