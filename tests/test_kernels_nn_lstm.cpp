// LSTM cell and layer (PyTorch gate order i, f, g, o): front-end (CBX_DEBUG_FORCE_ISA) vs the
// generic kernel vs a double-precision reference, voice-encoder-like sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/arena.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "nn_test_util.h"
#include "ops/lstm.h"

using namespace cbx;
using nn_test::Buf;

namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

double sig(double x) { return 1 / (1 + std::exp(-x)); }

// h and c after T steps: tolerance 2e-5 absolute (states are O(1); f32 dots of length
// In and H, ~2e-7 nonlinearities, compounded over the recurrence).
constexpr double kLstmTol = 2e-5;

}  // namespace

TEST(NnLstm, LayerMatchesReference) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  for (auto [T, In, H] : {std::tuple<int64_t, int64_t, int64_t>{23, 40, 64}, {7, 13, 21}, {40, 64, 256}}) {
    const float ws = 1.f / std::sqrt(float(H));
    Buf x({T, In}, 1), wih({4 * H, In}, 2, -ws, ws), whh({4 * H, H}, 3, -ws, ws);
    Buf bih({4 * H}, 4, -ws, ws), bhh({4 * H}, 5, -ws, ws);
    Buf h({H}, 6, -0.5f, 0.5f), c({H}, 7, -0.5f, 0.5f), y({T, H});
    Buf hg({H}), cg({H}), yg({T, H});
    hg.v = h.v;
    cg.v = c.v;
    std::vector<double> rh(h.v.begin(), h.v.end()), rc(c.v.begin(), c.v.end()), ry(size_t(T * H));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> g(size_t(4 * H));
      for (int64_t j = 0; j < 4 * H; ++j) {
        double a = double(bih.v[size_t(j)]) + bhh.v[size_t(j)];
        for (int64_t i = 0; i < In; ++i) a += double(wih.v[size_t(j * In + i)]) * x.v[size_t(t * In + i)];
        for (int64_t i = 0; i < H; ++i) a += double(whh.v[size_t(j * H + i)]) * rh[size_t(i)];
        g[size_t(j)] = a;
      }
      for (int64_t j = 0; j < H; ++j) {
        rc[size_t(j)] = sig(g[size_t(H + j)]) * rc[size_t(j)] + sig(g[size_t(j)]) * std::tanh(g[size_t(2 * H + j)]);
        rh[size_t(j)] = sig(g[size_t(3 * H + j)]) * std::tanh(rc[size_t(j)]);
        ry[size_t(t * H + j)] = rh[size_t(j)];
      }
    }
    Arena arena(8 << 20);
    lstm_layer(pool(), x.t, wih.t, whh.t, bih.t, bhh.t, h.t, c.t, y.t, &arena);
    lstm_layer(pool(), x.t, wih.t, whh.t, bih.t, bhh.t, hg.t, cg.t, yg.t, nullptr, Isa::Generic);
    EXPECT_EQ(arena.used(), 0u);
    EXPECT_LE(nn_test::max_abs_diff(y.p(), ry.data(), ry.size()), kLstmTol) << H;
    EXPECT_LE(nn_test::max_abs_diff(c.p(), rc.data(), rc.size()), kLstmTol) << H;
    EXPECT_LE(nn_test::max_abs_diff(h.p(), rh.data(), rh.size()), kLstmTol) << H;
    EXPECT_LE(nn_test::max_abs_diff(y.p(), yg.p(), y.size()), kLstmTol) << H;
    EXPECT_LE(nn_test::max_abs_diff(c.p(), cg.p(), c.size()), kLstmTol) << H;
  }
}

// A single lstm_cell step equals one step of the layer.
TEST(NnLstm, CellMatchesLayerStep) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  const int64_t In = 9, H = 19;
  Buf x({1, In}, 11), wih({4 * H, In}, 12), whh({4 * H, H}, 13), bih({4 * H}, 14), bhh({4 * H}, 15);
  Buf h({H}, 16), c({H}, 17), y({1, H});
  Buf h2({H}), c2({H}), gx({4 * H});
  h2.v = h.v;
  c2.v = c.v;
  for (int64_t j = 0; j < 4 * H; ++j) {
    double a = bih.v[size_t(j)];
    for (int64_t i = 0; i < In; ++i) a += double(wih.v[size_t(j * In + i)]) * x.v[size_t(i)];
    gx.v[size_t(j)] = float(a);
  }
  lstm_layer(pool(), x.t, wih.t, whh.t, bih.t, bhh.t, h.t, c.t, y.t);
  lstm_cell(gx.t, whh.t, bhh.t, h2.t, c2.t);
  EXPECT_LE(nn_test::max_abs_diff(h.p(), h2.p(), h.size()), 1e-6);
  EXPECT_LE(nn_test::max_abs_diff(c.p(), c2.p(), c.size()), 1e-6);
}

// B sequences at once (voice-encoder partials) equal B separate lstm_layer runs, for the
// active ISA and the generic kernels, with and without the y output; sizes cover one
// thread (tiny) and the pooled path, and a 4H that is not a multiple of 16.
TEST(NnLstm, BatchMatchesPerSequenceLayers) {
  CBX_SKIP_IF_ISA_UNAVAILABLE();
  for (auto [B, T, In, H] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 5, 7, 5},
                             {13, 30, 40, 64},
                             {4, 12, 64, 256},
                             {2, 9, 16, 21}}) {
    const float ws = 1.f / std::sqrt(float(H));
    Buf x({B, T, In}, 21), wih({4 * H, In}, 22, -ws, ws), whh({4 * H, H}, 23, -ws, ws);
    Buf bih({4 * H}, 24, -ws, ws), bhh({4 * H}, 25, -ws, ws);
    Buf h0({B, H}, 26, -0.5f, 0.5f), c0({B, H}, 27, -0.5f, 0.5f);
    for (Isa isa : {active_isa(), Isa::Generic}) {
      Buf h({B, H}), c({B, H}), y({B, T, H}), h2({B, H}), c2({B, H});
      h.v = h0.v;
      c.v = c0.v;
      h2.v = h0.v;
      c2.v = c0.v;
      Arena arena(size_t(lstm_layer_batch_scratch(B, T, In, H)) * 4 + 256);
      lstm_layer_batch(pool(), x.t, wih.t, whh.t, bih.t, bhh.t, h.t, c.t, y.t, &arena, isa);
      EXPECT_EQ(arena.used(), 0u);
      Tensor none;
      lstm_layer_batch(pool(), x.t, wih.t, whh.t, bih.t, bhh.t, h2.t, c2.t, none, nullptr, isa);
      EXPECT_EQ(h.v, h2.v);
      EXPECT_EQ(c.v, c2.v);
      for (int64_t b = 0; b < B; ++b) {
        Buf xs({T, In}), hs({H}), cs({H}), ys({T, H});
        std::copy(x.v.begin() + b * T * In, x.v.begin() + (b + 1) * T * In, xs.v.begin());
        std::copy(h0.v.begin() + b * H, h0.v.begin() + (b + 1) * H, hs.v.begin());
        std::copy(c0.v.begin() + b * H, c0.v.begin() + (b + 1) * H, cs.v.begin());
        lstm_layer(pool(), xs.t, wih.t, whh.t, bih.t, bhh.t, hs.t, cs.t, ys.t, nullptr, isa);
        EXPECT_LE(nn_test::max_abs_diff(y.p() + b * T * H, ys.p(), ys.size()), kLstmTol) << B << " " << H;
        EXPECT_LE(nn_test::max_abs_diff(h.p() + b * H, hs.p(), hs.size()), kLstmTol) << B << " " << H;
        EXPECT_LE(nn_test::max_abs_diff(c.p() + b * H, cs.p(), cs.size()), kLstmTol) << B << " " << H;
      }
    }
  }
  Buf x({2, 3, 4}), wih({16, 4}), whh({16, 4}), h({3, 4}), c({2, 4}), y({2, 3, 4});
  try {
    lstm_layer_batch(pool(), x.t, wih.t, whh.t, Tensor{}, Tensor{}, h.t, c.t, y.t);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("lstm_layer_batch"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
  }
}

TEST(NnLstm, ValidationErrors) {
  Buf x({5, 8}), wih({16, 8}), whh({16, 5}), h({4}), c({4}), y({5, 4});
  try {
    lstm_layer(pool(), x.t, wih.t, whh.t, Tensor{}, Tensor{}, h.t, c.t, y.t);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("lstm_layer"), std::string::npos) << m;
    EXPECT_NE(m.find("[16, 5]"), std::string::npos) << m;
  }
  Buf whh2({16, 4}), gx({15});
  EXPECT_THROW(lstm_cell(gx.t, whh2.t, Tensor{}, h.t, c.t), Error);
}
