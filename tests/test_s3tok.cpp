// S3Tokenizer (models/s3_tokenizer.h) on a small random s3tok.* GGUF written here: token counts,
// arena reuse across calls of different lengths, thread-count independence, the named
// intermediates, and the errors for bad weights, bad configs and bad inputs. Numerical parity
// with PyTorch is tests/test_s3tok_parity.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "gguf_test_util.h"
#include "models/model_config.h"
#include "models/s3_tokenizer.h"

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

ModelConfig small_config() {
  ModelConfig c = default_config(Variant::Turbo);
  c.s3tok.n_state = 128;
  c.s3tok.n_head = 2;
  c.s3tok.n_layer = 2;
  c.s3tok.n_ff = 512;
  c.voice.n_cond_prompt_tokens = c.voice.n_prompt_tokens = c.voice.n_prompt_frames = 1;  // table sizes only
  return c;
}

using gguf_test::Edit;
using gguf_test::error_of;

std::string write_gguf(const ModelConfig& c, const std::vector<Edit>& edits = {}) {
  const std::string path = gguf_test::temp_gguf_path("s3tok");
  std::mt19937 rng(1234);
  GgufWriter w;
  for (const TensorSpec& s : model_tensor_specs(c)) {
    if (s.name.rfind("s3tok.", 0) != 0) continue;
    std::vector<int64_t> shape = s.shape;
    DType dt = DType::F32;
    if (!gguf_test::apply_edits(edits, s.name, shape, dt)) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const int64_t fan_in = shape.size() >= 2 ? n / shape[0] : 1;
    const bool ln_weight = s.name.find("_ln.weight") != std::string::npos;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v)
      x = ln_weight ? 1.f + 0.1f * u(rng) : (shape.size() >= 2 ? u(rng) / std::sqrt(float(fan_in)) : 0.1f * u(rng));
    gguf_test::add_tensor_as(w, s.name, dt, shape, v);
  }
  w.write(path);
  return path;
}

std::vector<float> test_wave(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(i) / 16000.0;
    x[size_t(i)] =
        float(0.3 * std::sin(2 * M_PI * (150 + 50 * std::sin(3 * t)) * t) * (0.6 + 0.4 * std::sin(2 * M_PI * 3 * t))) +
        g(rng);
  }
  return x;
}

class S3TokTest : public ::testing::Test {
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

TEST(S3TokCount, NumTokens) {
  EXPECT_EQ(S3Tokenizer::num_tokens(160000), 250);  // 10 s
  EXPECT_EQ(S3Tokenizer::num_tokens(240000), 375);  // 15 s
  EXPECT_EQ(S3Tokenizer::num_tokens(201), 1);
  EXPECT_EQ(S3Tokenizer::num_tokens(24321), 38);  // 152 frames -> 76 -> 38
  EXPECT_EQ(S3Tokenizer::num_tokens(16161), 26);  // 101 -> 51 -> 26
  EXPECT_EQ(S3Tokenizer::num_tokens(240000, 150), 150);
  EXPECT_EQ(S3Tokenizer::num_tokens(240000, 1000), 375);
  EXPECT_EQ(S3Tokenizer::num_tokens(0), 0);
}

TEST_F(S3TokTest, TokensCountsRangeAndIntermediates) {
  S3Tokenizer tok(*file, cfg, 48000, 2);
  EXPECT_EQ(tok.max_samples(), 48000);
  ThreadPool pool(2);
  std::vector<float> wav = test_wave(48000, 1);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  tok.set_capture([&](const std::string& n, const Tensor& t) {
    names.push_back(n);
    shapes.emplace_back(t.shape, t.shape + t.ndim);
  });
  std::vector<int32_t> t = tok.tokenize(pool, wav.data(), 48000);
  tok.set_capture(nullptr);
  ASSERT_EQ(int64_t(t.size()), S3Tokenizer::num_tokens(48000));
  ASSERT_EQ(t.size(), 75u);
  for (int32_t v : t) EXPECT_TRUE(v >= 0 && v < 6561) << v;
  const std::vector<std::string> want = {"s3tok.mel",        "s3tok.conv1",      "s3tok.conv2",
                                         "s3tok.block0.out", "s3tok.block1.out", "s3tok.project_down"};
  EXPECT_EQ(names, want);
  ASSERT_EQ(shapes.size(), want.size());
  EXPECT_EQ(shapes[0], (std::vector<int64_t>{128, 300}));
  EXPECT_EQ(shapes[1], (std::vector<int64_t>{128, 150}));
  EXPECT_EQ(shapes[2], (std::vector<int64_t>{75, 128}));
  EXPECT_EQ(shapes[5], (std::vector<int64_t>{75, 8}));

  // max_tokens cuts the mel to 4 x max_tokens frames.
  EXPECT_EQ(tok.tokenize(pool, wav.data(), 48000, 20).size(), 20u);
  EXPECT_EQ(tok.tokenize(pool, wav.data(), 48000, 500).size(), 75u);
}

TEST_F(S3TokTest, ReuseAcrossLengthsAndThreadCounts) {
  std::vector<float> wav = test_wave(48000, 2);
  ThreadPool pool2(2), pool1(1);
  S3Tokenizer tok(*file, cfg, 48000, 2);
  const std::vector<int32_t> a = tok.tokenize(pool2, wav.data(), 48000);
  const std::vector<int32_t> b = tok.tokenize(pool2, wav.data(), 16000);
  const std::vector<int32_t> c = tok.tokenize(pool2, wav.data(), 48000);
  EXPECT_EQ(a, c);
  S3Tokenizer fresh(*file, cfg, 16000, 2);
  EXPECT_EQ(b, fresh.tokenize(pool2, wav.data(), 16000));
  EXPECT_EQ(a, tok.tokenize(pool1, wav.data(), 48000));
  // A different signal gives different tokens (the output depends on the input).
  std::vector<float> other = test_wave(48000, 3);
  for (float& x : other) x *= -0.5f;
  EXPECT_NE(a, tok.tokenize(pool2, other.data(), 48000));
}

// The interface promises no allocation per call beyond the returned vector.
TEST_F(S3TokTest, AllocatesOnlyTheResult) {
  std::vector<float> wav = test_wave(48000, 7);
  ThreadPool pool(2);
  S3Tokenizer tok(*file, cfg, 48000, 2);
  (void)tok.tokenize(pool, wav.data(), 48000);  // warm-up (first-use state in kernels, if any)
  for (int64_t n : {int64_t(48000), int64_t(20000)}) {
    g_allocs = 0;
    g_counting = true;
    std::vector<int32_t> t = tok.tokenize(pool, wav.data(), n, n == 20000 ? 10 : -1);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 1) << n << " samples";
    EXPECT_FALSE(t.empty());
  }
}

TEST_F(S3TokTest, InputErrors) {
  S3Tokenizer tok(*file, cfg, 16000, 2);
  ThreadPool pool(1);
  std::vector<float> wav = test_wave(16001, 4);
  EXPECT_NE(error_of([&] { tok.tokenize(pool, wav.data(), 16001); })
                .find("16001 samples exceed the reserved "
                      "max_samples 16000"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.tokenize(pool, wav.data(), 200); }).find("200 samples is too short"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.tokenize(pool, wav.data(), 16000, 0); }).find("max_tokens must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.tokenize(pool, nullptr, 16000); }).find("null wave"), std::string::npos);
  EXPECT_NE(error_of([&] { S3Tokenizer t(*file, cfg, 200, 2); }).find("max_samples 200 must exceed 200"),
            std::string::npos);
  // Scratch is sized for pools of up to max_threads.
  EXPECT_NE(error_of([&] { S3Tokenizer t(*file, cfg, 16000, 0); }).find("max_threads 0 must be >= 1"),
            std::string::npos);
  ThreadPool pool3(3);
  EXPECT_NE(error_of([&] {
              tok.tokenize(pool3, wav.data(), 16000);
            }).find("a pool of 3 threads exceeds the 2 its scratch was reserved for"),
            std::string::npos);
  // Over 30 s of mel frames after the cut: upstream's long-audio path is not ported.
  S3Tokenizer big(*file, cfg, 16000 * 31, 2);
  std::vector<float> longw = test_wave(16000 * 31, 5);
  EXPECT_NE(error_of([&] { big.tokenize(pool, longw.data(), 16000 * 31); }).find("3100 mel frames"), std::string::npos);
  EXPECT_EQ(big.tokenize(pool, longw.data(), 16000 * 31, 10).size(), 10u);
}

TEST(S3TokWeights, ErrorsNameTheTensor) {
  const ModelConfig cfg = small_config();
  ThreadPool pool(1);
  struct Case {
    std::vector<Edit> edits;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"s3tok.encoder.blocks.1.attn.key.weight", true, {}, DType::F32}},
       "missing tensor 's3tok.encoder.blocks.1.attn.key.weight'"},
      {{{"s3tok.encoder.blocks.0.mlp.0.weight", false, {512, 64}, DType::F32}},
       "tensor 's3tok.encoder.blocks.0.mlp.0.weight' has shape [512, 64], expected [512, 128]"},
      {{{"s3tok.encoder.conv2.weight", false, {}, DType::F16}}, "tensor 's3tok.encoder.conv2.weight' must be f32"},
      {{{"s3tok.encoder.blocks.0.attn_ln.bias", false, {}, DType::F16}},
       "tensor 's3tok.encoder.blocks.0.attn_ln.bias' must be f32"},
  };
  for (const Case& c : cases) {
    const std::string p = write_gguf(cfg, c.edits);
    auto f = GgufFile::open(p);
    const std::string err = error_of([&] { S3Tokenizer t(*f, cfg, 16000, 2); });
    EXPECT_NE(err.find(c.want), std::string::npos) << err;
    std::remove(p.c_str());
  }
  // F16 Linear weights are accepted (the matmul widens them).
  {
    const std::string p = write_gguf(cfg, {{"s3tok.encoder.blocks.0.attn.query.weight", false, {}, DType::F16}});
    auto f = GgufFile::open(p);
    S3Tokenizer t(*f, cfg, 16000, 2);
    std::vector<float> wav = test_wave(16000, 6);
    EXPECT_EQ(t.gemm_precision(), GemmPrecision::F32);  // f32 by default, even with lossy weights
    const std::vector<int32_t> a = t.tokenize(pool, wav.data(), 16000);
    EXPECT_EQ(a.size(), 25u);
    t.set_gemm_precision(GemmPrecision::Auto);
    EXPECT_EQ(t.gemm_precision(), resolve_gemm_precision(GemmPrecision::Auto, true));
    t.set_gemm_precision(GemmPrecision::BF16);  // the arena holds the bf16 GEMM scratch too
    EXPECT_EQ(t.gemm_precision(), GemmPrecision::BF16);
    EXPECT_EQ(t.tokenize(pool, wav.data(), 16000).size(), 25u);
    t.set_gemm_precision(GemmPrecision::F32);
    EXPECT_EQ(t.tokenize(pool, wav.data(), 16000), a);
    std::remove(p.c_str());
  }
}

TEST(S3TokWeights, ConfigErrors) {
  ModelConfig cfg = small_config();
  const std::string p = write_gguf(cfg);
  auto f = GgufFile::open(p);
  ModelConfig bad = cfg;
  bad.s3tok.n_head = 4;  // 4 x 64 != 128
  EXPECT_NE(error_of([&] { S3Tokenizer t(*f, bad, 16000, 2); }).find("width 128 must be n_head (4) x 64"),
            std::string::npos);
  bad = cfg;
  bad.s3tok.n_mels = 80;
  EXPECT_NE(error_of([&] { S3Tokenizer t(*f, bad, 16000, 2); }).find("front-end (n_mels 80"), std::string::npos);
  bad = cfg;
  bad.s3tok.codebook_levels = 5;
  EXPECT_NE(error_of([&] { S3Tokenizer t(*f, bad, 16000, 2); }).find("FSQ has 5 levels"), std::string::npos);
  bad = cfg;
  bad.s3tok.codebook_dim = 6;
  EXPECT_NE(error_of([&] { S3Tokenizer t(*f, bad, 16000, 2); }).find("FSQ has 3 levels x 6 dims"), std::string::npos);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace cbx
