// PyTorch semantics check: tests/nn_torch_ref.py (run under /usr/bin/python3 with the
// distro's torch) writes inputs and torch outputs; every op here must reproduce them.
// This pins down layouts and conventions the double-precision references elsewhere
// could share a misunderstanding of (ConvTranspose1d weight layout and output length,
// grouped/dilated conv, GQA head mapping, LSTM gate order, NeoX RoPE, GELU variants).
// Tolerance: 1e-5 * (1 + max|ref|) absolute (f32 on both sides, values up to ~25).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/lstm.h"
#include "ops/norm.h"

using namespace cbx;

namespace {

struct F {
  std::vector<float> v;
  Tensor t;
};

class TorchRef : public ::testing::Test {
 protected:
  // The references are generated once per build tree (python + torch import is slow)
  // and reused until tests/nn_torch_ref.py changes; a temp dir renamed into place keeps
  // parallel ctest processes from seeing half-written files.
  static void SetUpTestSuite() {
    const std::string script = std::string(CBX_SOURCE_DIR) + "/tests/nn_torch_ref.py";
    const std::string dir = std::string(CBX_BINARY_DIR) + "/nn_torch_ref";
    struct stat ss, ds;
    if (stat(script.c_str(), &ss) != 0) return;
    if (stat((dir + "/rp_y.bin").c_str(), &ds) == 0 && ds.st_mtime >= ss.st_mtime) {
      dir_ = dir;
      ok_ = true;
      return;
    }
    if (access("/usr/bin/python3", X_OK) != 0) return;
    std::string tmpl_s = std::string(CBX_BINARY_DIR) + "/nn_torch_ref.tmpXXXXXX";
    std::vector<char> tmpl(tmpl_s.begin(), tmpl_s.end());
    tmpl.push_back('\0');
    if (!mkdtemp(tmpl.data())) return;
    const std::string tmp = tmpl.data();
    std::string cmd = "/usr/bin/python3 '" + script + "' '" + tmp + "' 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::system(("rm -rf '" + tmp + "'").c_str());
      return;
    }
    // Never delete a directory another process may be reading: a stale one is moved
    // aside atomically, and if another process installed a fresh one first, ours is
    // used as it is.
    if (stat((dir + "/rp_y.bin").c_str(), &ds) == 0 && ds.st_mtime < ss.st_mtime)
      std::rename(dir.c_str(), (tmp + ".stale").c_str());
    if (std::rename(tmp.c_str(), dir.c_str()) == 0) {
      dir_ = dir;
    } else {
      dir_ = tmp;
    }
    ok_ = true;
  }
  void SetUp() override {
    if (forced_isa_unavailable()) GTEST_SKIP() << "ISA not on this CPU";
    if (!ok_) GTEST_SKIP() << "no /usr/bin/python3 with torch";
  }
  static F load(const char* name, std::initializer_list<int64_t> shape) {
    F f;
    int64_t n = 1;
    for (auto d : shape) n *= d;
    f.v.assign(size_t(n), 0.f);
    FILE* fp = std::fopen((dir_ + "/" + name + ".bin").c_str(), "rb");
    EXPECT_NE(fp, nullptr) << name;
    if (fp) {
      EXPECT_EQ(std::fread(f.v.data(), 4, size_t(n), fp), size_t(n)) << name;
      std::fclose(fp);
    }
    f.t = make_tensor(DType::F32, shape, f.v.data(), f.v.size() * 4);
    return f;
  }
  static F zeros(std::initializer_list<int64_t> shape) {
    F f;
    int64_t n = 1;
    for (auto d : shape) n *= d;
    f.v.assign(size_t(n), 0.f);
    f.t = make_tensor(DType::F32, shape, f.v.data(), f.v.size() * 4);
    return f;
  }
  static void expect_close(const F& got, const F& ref, const char* what) {
    double m = 0, mx = 0;
    for (size_t i = 0; i < ref.v.size(); ++i) {
      m = std::max(m, double(std::fabs(got.v[i] - ref.v[i])));
      mx = std::max(mx, double(std::fabs(ref.v[i])));
    }
    EXPECT_LE(m, 1e-5 * (1 + mx)) << what;
  }
  ThreadPool pool{2};
  static inline std::string dir_;
  static inline bool ok_ = false;
};

}  // namespace

TEST_F(TorchRef, Convolutions) {
  {
    F x = load("ct_x", {12, 37}), w = load("ct_w", {12, 7, 11}), b = load("ct_b", {7}), y = load("ct_y", {7, 185});
    F o = zeros({7, 185});
    ConvTranspose1dParams p;
    p.stride = 5;
    p.padding = 3;
    conv_transpose1d(pool, x.t, w.t, b.t, o.t, p);
    expect_close(o, y, "conv_transpose1d");
  }
  {
    F x = load("c1_x", {8, 50}), w = load("c1_w", {12, 2, 3}), b = load("c1_b", {12}), y = load("c1_y", {12, 26});
    F o = zeros({12, 26});
    Conv1dParams p;
    p.stride = 2;
    p.dilation = 2;
    p.groups = 4;
    p.pad_left = 4;
    p.pad_right = 1;
    conv1d(pool, x.t, w.t, b.t, o.t, p);
    expect_close(o, y, "conv1d");
  }
  {
    F x = load("c2_x", {3, 10, 17}), w = load("c2_w", {5, 3, 3, 3}), y = load("c2_y", {5, 5, 17});
    F o = zeros({5, 5, 17});
    Conv2dParams p;
    p.stride_h = 2;
    p.pad_h = 1;
    p.pad_w = 1;
    conv2d(pool, x.t, w.t, Tensor{}, o.t, p);
    expect_close(o, y, "conv2d");
  }
}

TEST_F(TorchRef, AttentionGqaCausalOffset) {
  F q = load("at_q", {4, 5, 16}), k = load("at_k", {2, 9, 16}), v = load("at_v", {2, 9, 16});
  F y = load("at_o", {4, 5, 16}), o = zeros({4, 5, 16});
  AttentionParams p;
  p.causal = true;
  p.q_offset = 4;
  attention(pool, q.t, k.t, v.t, Tensor{}, o.t, p);
  expect_close(o, y, "attention");
}

TEST_F(TorchRef, ActivationsNormsLstmRope) {
  F x = load("act_x", {1001}), o = zeros({1001});
  gelu(pool, x.t, o.t);
  expect_close(o, load("act_gelu", {1001}), "gelu");
  gelu_tanh(pool, x.t, o.t);
  expect_close(o, load("act_gelut", {1001}), "gelu_tanh");
  mish(pool, x.t, o.t);
  expect_close(o, load("act_mish", {1001}), "mish");
  softplus(pool, x.t, o.t);
  expect_close(o, load("act_softplus", {1001}), "softplus");
  elu(pool, x.t, o.t);
  expect_close(o, load("act_elu", {1001}), "elu");
  silu(pool, x.t, o.t);
  expect_close(o, load("act_silu", {1001}), "silu");

  F lx = load("ln_x", {3, 33}), lw = load("ln_w", {33}), lb = load("ln_b", {33}), lo = zeros({3, 33});
  layer_norm(pool, lx.t, lw.t, lb.t, 1e-12f, lo.t);
  expect_close(lo, load("ln_y", {3, 33}), "layer_norm");

  F sx = load("ls_x", {7, 6}), wih = load("ls_wih", {20, 6}), whh = load("ls_whh", {20, 5});
  F bih = load("ls_bih", {20}), bhh = load("ls_bhh", {20});
  F h = zeros({5}), c = zeros({5}), so = zeros({7, 5});
  lstm_layer(pool, sx.t, wih.t, whh.t, bih.t, bhh.t, h.t, c.t, so.t);
  expect_close(so, load("ls_y", {7, 5}), "lstm");

  F rx = load("rp_x", {6, 2, 8}), ff = load("rp_ff", {4}), ro = zeros({6, 2, 8});
  std::vector<int32_t> pos = {0, 1, 2, 7, 100, 1000};
  Tensor pt = make_tensor(DType::I32, {6}, pos.data(), pos.size() * 4);
  rope(pool, rx.t, pt, 10000.f, ff.t, ro.t);
  expect_close(ro, load("rp_y", {6, 2, 8}), "rope");
  // Same through explicit inverse frequencies.
  F inv = zeros({4});
  for (int i = 0; i < 4; ++i) inv.v[size_t(i)] = float(1.0 / std::pow(10000.0, 2.0 * i / 8)) / ff.v[size_t(i)];
  F ro2 = zeros({6, 2, 8});
  rope_inv_freq(pool, rx.t, pt, inv.t, ro2.t);
  expect_close(ro2, load("rp_y", {6, 2, 8}), "rope_inv_freq");
}

// llama3 scaling: relative tolerance 1e-6 per frequency (f32 pow/division order).
TEST_F(TorchRef, RopeLlama3InvFreq) {
  F ref = load("l3_inv", {32});
  std::vector<float> got(32);
  rope_inv_freq_llama3(64, 500000.f, 8.f, 1.f, 4.f, 8192.f, got.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(got[size_t(i)], ref.v[size_t(i)], 1e-6 * ref.v[size_t(i)]) << i;
}
