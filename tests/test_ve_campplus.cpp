// VoiceEncoder and CampPlus (models/voice_encoder.h, models/campplus.h) on small random ve.* /
// campplus.* GGUFs written here: the promise of no allocation per call beyond the result, arena
// reuse across lengths, thread-count independence, the named intermediates, and the errors for
// bad weights and bad inputs. Numerical parity with PyTorch is tests/test_ve_parity.sh and
// tests/test_campplus_parity.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gguf_test_util.h"
#include "models/campplus.h"
#include "models/model_config.h"
#include "models/voice_encoder.h"
#include "ops/matmul.h"

// Counts heap allocations (all threads) while g_counting is set. GCC's -Wmismatched-new-delete
// cannot see that these replacements pair malloc with free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<bool> g_counting{false};
static std::atomic<int64_t> g_allocs{0};
void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace cbx {
namespace {

// Small sizes: VE LSTM 40 -> 32 x 3, embedding 24; CAMPPlus head 4 channels, init 16, growth 8,
// bottleneck 16, 2/3/2 layers, embedding 12.
ModelConfig small_config() {
  ModelConfig c = default_config(Variant::Turbo);
  c.ve.n_hidden = 32;
  c.ve.embed_size = 24;
  c.campplus.head_channels = 4;
  c.campplus.init_channels = 16;
  c.campplus.growth_rate = 8;
  c.campplus.bn_channels = 16;
  c.campplus.block_layers = {2, 3, 2};
  c.campplus.embed_size = 12;
  c.voice.n_cond_prompt_tokens = c.voice.n_prompt_tokens = c.voice.n_prompt_frames = 1;  // table sizes only
  return c;
}

using gguf_test::Edit;
using gguf_test::error_of;

std::string write_gguf(const ModelConfig& c, const std::vector<Edit>& edits = {}) {
  const std::string path = gguf_test::temp_gguf_path("ve_campplus");
  std::mt19937 rng(4321);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  GgufWriter w;
  for (const TensorSpec& s : model_tensor_specs(c)) {
    if (s.name.rfind("ve.", 0) != 0 && s.name.rfind("campplus.", 0) != 0) continue;
    std::vector<int64_t> shape = s.shape;
    DType dt = DType::F32;
    if (!gguf_test::apply_edits(edits, s.name, shape, dt)) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const int64_t fan_in = shape.size() >= 2 ? n / shape[0] : 1;
    const bool scale = s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, ".scale") == 0;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v)
      x = scale ? 1.f + 0.1f * u(rng) : (shape.size() >= 2 ? u(rng) * std::sqrt(3.f / float(fan_in)) : 0.1f * u(rng));
    gguf_test::add_tensor_as(w, s.name, dt, shape, v);
  }
  w.write(path);
  return path;
}

std::vector<float> test_wave(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 0.01f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(i) / 16000.0;
    x[size_t(i)] = float(0.3 * std::sin(2 * M_PI * (140 + 40 * std::sin(2 * t)) * t) *
                         (0.6 + 0.4 * std::sin(2 * M_PI * 2.5 * t))) +
                   g(rng);
  }
  return x;
}

class VoiceNetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg = small_config();
    path = write_gguf(cfg);
    file = GgufFile::open(path);
  }
  void TearDown() override { std::remove(path.c_str()); }
  ModelConfig cfg;
  std::string path;
  std::unique_ptr<GgufFile> file;
};

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

TEST_F(VoiceNetsTest, VoiceEncoderShapesPartialsAndIntermediates) {
  const int64_t n = 48000;  // 3 s: 301 mel frames -> 3 partials (step 77; the third covers 0.92)
  VoiceEncoder ve(*file, cfg, n);
  ThreadPool pool(2);
  std::vector<float> wav = test_wave(n, 1);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  ve.set_capture([&](const char* name, const Tensor& t) {
    names.emplace_back(name);
    shapes.emplace_back(t.shape, t.shape + t.ndim);
  });
  std::vector<float> e = ve.embed(pool, wav.data(), n);
  ve.set_capture(nullptr);
  ASSERT_EQ(e.size(), 24u);
  EXPECT_NEAR(norm(e), 1.0, 1e-6);
  EXPECT_EQ(names, (std::vector<std::string>{"trim", "mel", "partials"}));
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[1], (std::vector<int64_t>{301, 40}));
  EXPECT_EQ(shapes[2], (std::vector<int64_t>{3, 24}));
  EXPECT_EQ(ve.num_partials(n), 3);
  EXPECT_EQ(ve.num_partials(160 * 159), 1);  // 160 frames: one partial
  EXPECT_EQ(ve.num_partials(160 * 204), 2);  // 205 frames: the last covers exactly 0.8
  EXPECT_EQ(ve.num_partials(160 * 203), 1);  // 204 frames: 0.79, dropped
  // The output depends on the input.
  std::vector<float> other = test_wave(n, 2);
  for (float& x : other) x = -0.5f * x * x;
  EXPECT_NE(e, ve.embed(pool, other.data(), n));
}

TEST_F(VoiceNetsTest, VoiceEncoderReuseThreadsAndAllocations) {
  const int64_t n = 16000 * 7;  // 7 s: 701 frames, 8 partials
  std::vector<float> wav = test_wave(16000 * 12, 3);
  ThreadPool pool1(1), pool2(2), pool3(3);
  VoiceEncoder ve(*file, cfg, 16000 * 12);
  const std::vector<float> a = ve.embed(pool2, wav.data(), n);
  const std::vector<float> b = ve.embed(pool2, wav.data(), 20000);
  const std::vector<float> c = ve.embed(pool1, wav.data(), n);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a, ve.embed(pool3, wav.data(), n));
  VoiceEncoder fresh(*file, cfg, 20000);
  EXPECT_EQ(b, fresh.embed(pool1, wav.data(), 20000));
  // 20 s: 2001 frames, 25 partials, run through the LSTM as two groups (16 + 9).
  VoiceEncoder big(*file, cfg, 16000 * 20);
  std::vector<float> w20 = test_wave(16000 * 20, 4);
  ASSERT_EQ(big.num_partials(16000 * 20), 25);
  const std::vector<float> g2 = big.embed(pool2, w20.data(), 16000 * 20);
  EXPECT_EQ(g2, big.embed(pool1, w20.data(), 16000 * 20));
  EXPECT_NEAR(norm(g2), 1.0, 1e-6);
  // No allocation per call beyond the returned vector (after a warm-up call).
  for (int64_t len : {int64_t(16000 * 20), int64_t(30000)}) {
    g_allocs = 0;
    g_counting = true;
    std::vector<float> e = big.embed(pool2, w20.data(), len);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 1) << len << " samples";
    EXPECT_EQ(e.size(), 24u);
  }
}

TEST_F(VoiceNetsTest, VoiceEncoderInputErrors) {
  VoiceEncoder ve(*file, cfg, 16000);
  ThreadPool pool(1);
  std::vector<float> wav = test_wave(16001, 5);
  EXPECT_NE(error_of([&] { ve.embed(pool, wav.data(), 16001); }).find("16001 samples exceed the 16000 reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ve.embed(pool, wav.data(), 200); }).find("reference too short: 200 samples"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ve.embed(pool, nullptr, 100); }).find("null wave"), std::string::npos);
  EXPECT_NE(error_of([&] { VoiceEncoder v(*file, cfg, 0); }).find("max_samples 0"), std::string::npos);
}

TEST_F(VoiceNetsTest, CampPlusIntermediatesAndFbankPath) {
  const int64_t n = 16000 * 3;  // 298 fbank frames -> 149 after the tdnn (2 context segments)
  CampPlus cam(*file, cfg, n, 3);
  ThreadPool pool(2);
  std::vector<float> wav = test_wave(n, 6);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<float> fbank;
  cam.set_capture([&](const char* name, const Tensor& t) {
    names.emplace_back(name);
    shapes.emplace_back(t.shape, t.shape + t.ndim);
    if (names.back() == "fbank") fbank.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  });
  std::vector<float> e = cam.embed(pool, wav.data(), n);
  cam.set_capture(nullptr);
  ASSERT_EQ(e.size(), 12u);
  const std::vector<std::string> want = {"fbank",  "head",     "tdnn",   "block1",   "transit1",
                                         "block2", "transit2", "block3", "transit3", "stats"};
  EXPECT_EQ(names, want);
  ASSERT_EQ(shapes.size(), want.size());
  EXPECT_EQ(shapes[0], (std::vector<int64_t>{298, 80}));
  EXPECT_EQ(shapes[1], (std::vector<int64_t>{40, 298}));  // 4 channels x 10 frequencies
  EXPECT_EQ(shapes[2], (std::vector<int64_t>{16, 149}));
  EXPECT_EQ(shapes[3], (std::vector<int64_t>{32, 149}));  // 16 + 2 x 8
  EXPECT_EQ(shapes[4], (std::vector<int64_t>{16, 149}));
  EXPECT_EQ(shapes[5], (std::vector<int64_t>{40, 149}));  // 16 + 3 x 8
  EXPECT_EQ(shapes[8], (std::vector<int64_t>{18, 149}));  // (20 + 16) / 2
  EXPECT_EQ(shapes[9], (std::vector<int64_t>{36}));
  EXPECT_EQ(cam.num_frames(n), 298);
  // The network alone on the same features gives the same x-vector.
  EXPECT_EQ(e, cam.embed_fbank(pool, fbank.data(), 298));
  std::vector<float> other = test_wave(n, 7);
  for (float& x : other) x = 0.7f * x * std::fabs(x);
  EXPECT_NE(e, cam.embed(pool, other.data(), n));
}

TEST_F(VoiceNetsTest, CampPlusReuseThreadsAndAllocations) {
  const int64_t n = 16000 * 4;
  std::vector<float> wav = test_wave(n, 8);
  ThreadPool pool1(1), pool2(2), pool3(3);
  CampPlus cam(*file, cfg, n, 3);
  const std::vector<float> a = cam.embed(pool2, wav.data(), n);
  const std::vector<float> b = cam.embed(pool2, wav.data(), 720);  // the shortest: 3 frames
  EXPECT_EQ(a, cam.embed(pool1, wav.data(), n));
  EXPECT_EQ(a, cam.embed(pool3, wav.data(), n));
  CampPlus fresh(*file, cfg, 720, 3);
  EXPECT_EQ(b, fresh.embed(pool2, wav.data(), 720));
  for (int64_t len : {n, int64_t(9000)}) {
    g_allocs = 0;
    g_counting = true;
    std::vector<float> e = cam.embed(pool2, wav.data(), len);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 1) << len << " samples";
    EXPECT_EQ(e.size(), 12u);
  }
}

// The caller's GEMM precision reaches every pool thread's convs: under a BF16 scope the
// embedding does not depend on the thread count (the head's per-row convs run on the pool's
// worker threads too), and where a bf16 GEMM exists it differs from the F32 one.
TEST_F(VoiceNetsTest, CampPlusPrecisionScopeOnEveryThread) {
  const int64_t n = 16000 * 2;
  std::vector<float> wav = test_wave(n, 10);
  ThreadPool pool1(1), pool2(2), pool3(3);
  CampPlus cam(*file, cfg, n, 3);
  const std::vector<float> f32 = cam.embed(pool2, wav.data(), n);
  GemmPrecisionScope bf16(GemmPrecision::BF16);
  const std::vector<float> a = cam.embed(pool1, wav.data(), n);
  EXPECT_EQ(a, cam.embed(pool2, wav.data(), n));
  EXPECT_EQ(a, cam.embed(pool3, wav.data(), n));
  if (gemm_bf16_available()) {
    EXPECT_NE(a, f32) << "the BF16 scope changed nothing";
  }
}

TEST_F(VoiceNetsTest, CampPlusInputErrors) {
  CampPlus cam(*file, cfg, 16000, 3);
  ThreadPool pool(1);
  std::vector<float> wav = test_wave(16001, 9);
  EXPECT_NE(error_of([&] { cam.embed(pool, wav.data(), 16001); }).find("16001 samples exceed the 16000 reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cam.embed(pool, wav.data(), 719); }).find("reference too short: 719 samples"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cam.embed_fbank(pool, wav.data(), 2); }).find("2 fbank frames outside [3, 98]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cam.embed(pool, nullptr, 1000); }).find("null wave"), std::string::npos);
  // Scratch is sized for pools of up to max_threads.
  EXPECT_NE(error_of([&] { CampPlus k(*file, cfg, 16000, 0); }).find("max_threads 0 must be >= 1"), std::string::npos);
  ThreadPool pool4(4);
  EXPECT_NE(error_of([&] {
              cam.embed(pool4, wav.data(), 16000);
            }).find("a pool of 4 threads exceeds the 3 its scratch was reserved for"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cam.embed_fbank(pool4, wav.data(), 50); }).find("a pool of 4 threads exceeds"),
            std::string::npos);
}

TEST(VoiceNetsWeights, ErrorsNameTheTensor) {
  const ModelConfig cfg = small_config();
  struct Case {
    std::vector<Edit> edits;
    bool ve;  // which network to build
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"ve.lstm.weight_hh_l2", true, {}, DType::F32}}, true, "missing tensor 've.lstm.weight_hh_l2' [128, 32]"},
      {{{"ve.proj.weight", false, {24, 16}, DType::F32}},
       true,
       "tensor 've.proj.weight' has shape [24, 16], expected [24, 32]"},
      {{{"ve.lstm.weight_ih_l0", false, {}, DType::F16}}, true, "tensor 've.lstm.weight_ih_l0' is f16"},
      {{{"campplus.block2.tdnnd3.cam_layer.linear_local.weight", true, {}, DType::F32}},
       false,
       "missing tensor 'campplus.block2.tdnnd3.cam_layer.linear_local.weight' [8, 16, 3]"},
      {{{"campplus.head.layer2.0.shortcut.1.scale", false, {5}, DType::F32}},
       false,
       "tensor 'campplus.head.layer2.0.shortcut.1.scale' has shape [5], expected [4]"},
      {{{"campplus.dense.linear.weight", false, {}, DType::F16}},
       false,
       "tensor 'campplus.dense.linear.weight' is f16"},
  };
  for (const Case& c : cases) {
    const std::string p = write_gguf(cfg, c.edits);
    auto f = GgufFile::open(p);
    const std::string err = error_of([&] {
      if (c.ve)
        VoiceEncoder v(*f, cfg, 16000);
      else
        CampPlus k(*f, cfg, 16000, 3);
    });
    EXPECT_NE(err.find(c.want), std::string::npos) << "got: " << err;
    std::remove(p.c_str());
  }
}

}  // namespace
}  // namespace cbx
