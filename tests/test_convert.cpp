// Checkpoint -> GGUF conversion: recipes (weight norm, BatchNorm folding, GPT-2 transpose),
// dtype policy, metadata round trip, and tiny synthetic Turbo / Multilingual checkpoints
// (tools/mkckpt) converted end to end: every tensor present with the shapes the metadata
// implies, values equal to the source within the bound of their storage type, quantize ==
// convert, and corrupt inputs rejected with the file (and tensor) named.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "convert/convert.h"
#include "convert/convert_internal.h"
#include "convert/quant_policy.h"
#include "convert/quantize.h"
#include "convert/safetensors.h"
#include "convert/torch_pt.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"

using namespace cbx;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/cbx-test-convert-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

CkptTensor make_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  CkptTensor t;
  t.name = name;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::vector<float> gguf_f32(const GgufFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  std::vector<float> out(size_t(t.numel()));
  type_traits(t.dtype).to_float(t.data, out.data(), t.numel());
  return out;
}

// Max |a - b| over each 32-block must stay within the storage type's bound relative to
// the block's max |b| (Q8_0: half a step of amax/127 plus the f16 scale rounding; Q4_0:
// one step of amax/8 at the clamped end; F16: 2^-11 relative; F32: exact).
void expect_close_for(DType dt, const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double rel = dt == DType::F32    ? 0
               : dt == DType::F16  ? 1.0 / 2048
               : dt == DType::Q8_0 ? 1.0 / 254 + 2e-3
                                   : 1.0 / 8 + 1e-2;
  double err2 = 0, ref2 = 0;
  for (size_t b = 0; b < ref.size(); b += 32) {
    size_t e = std::min(ref.size(), b + 32);
    double amax = 0;
    for (size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(double(ref[i])));
    for (size_t i = b; i < e; ++i) {
      double d = std::fabs(double(got[i]) - ref[i]);
      err2 += d * d, ref2 += double(ref[i]) * ref[i];
      if (dt == DType::F16) {
        ASSERT_LE(d, std::fabs(ref[i]) * rel + 6e-8) << what << " [" << i << "]";
      } else {
        ASSERT_LE(d, amax * rel + 1e-7) << what << " [" << i << "] as " << dtype_name(dt);
      }
    }
  }
  double nmse = ref2 > 0 ? err2 / ref2 : err2;
  double max_nmse = dt == DType::F32 ? 0 : dt == DType::F16 ? 1e-6 : dt == DType::Q8_0 ? 1e-4 : 2e-2;
  EXPECT_LE(nmse, max_nmse) << what << " as " << dtype_name(dt);
}

std::string mkckpt_bin() { return std::string(CBX_BINARY_DIR) + "/bin/chatterbox-mkckpt"; }

bool make_tiny(const std::string& variant, const std::string& dir, int seed) {
  if (!fs::exists(mkckpt_bin())) return false;
  std::string cmd = mkckpt_bin() + " --variant " + variant + " --size tiny --seed " + std::to_string(seed) +
                    " --threads 1 " + dir + " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------------------------------

TEST(ConvertRecipes, WeightNormBatchNormTranspose) {
  TempDir tmp;
  // conv: v [4, 3, 5], g [4, 1, 1]; legacy weight_g/weight_v; ConvTranspose g [in=3, 1, 1]
  std::vector<float> v = randn(60, 1), g = {0.5f, -2.0f, 1.0f, 3.0f};
  std::vector<float> tv = randn(3 * 2 * 4, 2), tg = {1.5f, 0.25f, -1.0f};
  std::vector<float> c1 = randn(6, 3);
  std::vector<float> mean = {0.1f, -0.2f}, var = {0.5f, 2.0f}, w = {1.5f, -1.0f}, b = {0.3f, 0.0f};
  std::vector<CkptTensor> ts = {
      make_f32("mel2wav.conv_pre.parametrizations.weight.original0", {4, 1, 1}, g),
      make_f32("mel2wav.conv_pre.parametrizations.weight.original1", {4, 3, 5}, v),
      make_f32("mel2wav.ups.0.weight_g", {3, 1, 1}, tg),
      make_f32("mel2wav.ups.0.weight_v", {3, 2, 4}, tv),
      make_f32("speaker_encoder.head.bn1.bias", {2}, b),
      make_f32("speaker_encoder.head.bn1.running_mean", {2}, mean),
      make_f32("speaker_encoder.head.bn1.running_var", {2}, var),
      make_f32("speaker_encoder.head.bn1.weight", {2}, w),
      make_f32("speaker_encoder.xvector.dense.nonlinear.batchnorm.running_mean", {2}, mean),
      make_f32("speaker_encoder.xvector.dense.nonlinear.batchnorm.running_var", {2}, var),
      make_f32("flow.x.weight", {2, 3}, c1),
  };
  CkptTensor nbt;
  nbt.name = "speaker_encoder.head.bn1.num_batches_tracked";
  nbt.dtype = DType::I64;
  nbt.data.resize(8);
  ts.push_back(nbt);
  std::vector<const CkptTensor*> ptrs;
  for (auto& t : ts) ptrs.push_back(&t);
  write_safetensors(tmp.path + "/s.safetensors", ptrs);
  auto src = SourceFile::open(tmp.path + "/s.safetensors");
  std::map<std::string, Recipe> rs;
  collect_recipes(*src, s3gen_prefixes(), {}, nullptr, rs);
  std::set<std::string> names;
  for (auto& [n, r] : rs) names.insert(n);
  EXPECT_EQ(names, (std::set<std::string>{"hift.conv_pre.weight", "hift.ups.0.weight", "campplus.head.bn1.scale",
                                          "campplus.head.bn1.shift", "campplus.dense.nonlinear.batchnorm.scale",
                                          "campplus.dense.nonlinear.batchnorm.shift", "flow.x.weight"}));

  auto wn_ref = [](const std::vector<float>& g, const std::vector<float>& v, size_t n0) {
    std::vector<float> out(v.size());
    size_t inner = v.size() / n0;
    for (size_t i = 0; i < n0; ++i) {
      double ss = 0;
      for (size_t j = 0; j < inner; ++j) ss += double(v[i * inner + j]) * v[i * inner + j];
      for (size_t j = 0; j < inner; ++j) out[i * inner + j] = float(g[i] * v[i * inner + j] / std::sqrt(ss));
    }
    return out;
  };
  std::vector<float> got = run_recipe(rs["hift.conv_pre.weight"]);
  std::vector<float> ref = wn_ref(g, v, 4);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6f);
  EXPECT_EQ(rs["hift.ups.0.weight"].shape, (std::vector<int64_t>{3, 2, 4}));
  got = run_recipe(rs["hift.ups.0.weight"]);  // per input channel (dim 0 of [in, out, k])
  ref = wn_ref(tg, tv, 3);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6f);

  std::vector<float> sc = run_recipe(rs["campplus.head.bn1.scale"]);
  std::vector<float> sh = run_recipe(rs["campplus.head.bn1.shift"]);
  for (int i = 0; i < 2; ++i) {
    float s = w[i] / std::sqrt(var[i] + 1e-5f);
    EXPECT_NEAR(sc[i], s, 1e-6f);
    EXPECT_NEAR(sh[i], b[i] - mean[i] * s, 1e-6f);
  }
  sc = run_recipe(rs["campplus.dense.nonlinear.batchnorm.scale"]);  // affine=False
  EXPECT_NEAR(sc[1], 1.0f / std::sqrt(2.0f + 1e-5f), 1e-6f);

  // GPT-2 Conv1D: [in, out] -> [out, in]
  EXPECT_TRUE(t3_needs_transpose("tfmr.h.3.attn.c_attn.weight"));
  EXPECT_TRUE(t3_needs_transpose("tfmr.h.0.mlp.c_proj.weight"));
  EXPECT_FALSE(t3_needs_transpose("tfmr.h.0.mlp.c_proj.bias"));
  EXPECT_FALSE(t3_needs_transpose("tfmr.wpe.weight"));
  std::vector<CkptTensor> t3 = {make_f32("tfmr.h.0.attn.c_proj.weight", {2, 3}, c1)};
  write_safetensors(tmp.path + "/t.safetensors", {&t3[0]});
  auto t3src = SourceFile::open(tmp.path + "/t.safetensors");
  std::map<std::string, Recipe> r3;
  collect_recipes(*t3src, t3_prefixes(), t3_dropped(), t3_needs_transpose, r3);
  const Recipe& tr = r3.at("t3.tfmr.h.0.attn.c_proj.weight");
  EXPECT_EQ(tr.shape, (std::vector<int64_t>{3, 2}));
  got = run_recipe(tr);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[size_t(j * 2 + i)], c1[size_t(i * 3 + j)]);
}

TEST(ConvertRecipes, UnpairedWeightNormIsAnError) {
  TempDir tmp;
  std::vector<CkptTensor> ts = {
      make_f32("mel2wav.conv_post.parametrizations.weight.original1", {2, 2, 1}, randn(4, 5))};
  write_safetensors(tmp.path + "/s.safetensors", {&ts[0]});
  auto src = SourceFile::open(tmp.path + "/s.safetensors");
  std::map<std::string, Recipe> rs;
  std::string msg = error_of([&] { collect_recipes(*src, s3gen_prefixes(), {}, nullptr, rs); });
  EXPECT_NE(msg.find("s.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("original0"), std::string::npos) << msg;
}

TEST(ConvertPolicy, DtypeChoices) {
  using C = TensorClass;
  EXPECT_EQ(parse_target_type("Q4_0"), DType::Q4_0);
  EXPECT_THROW(parse_target_type("bf16"), Error);
  EXPECT_THROW(parse_target_type("q5_k"), Error);
  std::vector<int64_t> big{1024, 1024}, small{80, 512}, odd{1024, 1000};
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.attn.c_attn.weight", big, C::Matmul, false, DType::Q4_0), DType::Q4_0);
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.attn.c_attn.weight", big, C::Matmul, false, DType::F32), DType::F32);
  EXPECT_EQ(policy_dtype("flow.encoder_proj.weight", small, C::Matmul, false, DType::Q4_0), DType::F32);
  EXPECT_EQ(policy_dtype("x.weight", odd, C::Matmul, false, DType::Q8_0), DType::F32);
  EXPECT_EQ(policy_dtype("t3.speech_head.weight", big, C::Head, false, DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(policy_dtype("t3.speech_head.weight", big, C::Head, false, DType::F16), DType::F16);
  EXPECT_EQ(policy_dtype("s3tok.encoder.blocks.0.mlp.0.weight", big, C::Matmul, false, DType::Q4_0), DType::F16);
  EXPECT_EQ(policy_dtype("ve.lstm.weight_hh_l0", big, C::Matmul, false, DType::Q4_0), DType::F32);
  EXPECT_EQ(policy_dtype("t3.text_emb.weight", big, C::Embedding, false, DType::Q4_0), DType::F16);
  EXPECT_EQ(policy_dtype("cfm.down_blocks.0.2.weight", {256, 256, 3}, C::Conv, false, DType::F16), DType::F32);
  EXPECT_EQ(policy_dtype("t3.tfmr.ln_f.weight", {1024}, C::Vector, false, DType::F16), DType::F32);
  EXPECT_EQ(policy_dtype("voice.prompt_token", {250}, C::Data, true, DType::Q4_0), DType::I32);

  // By role: S3Gen (flow encoder, CFM estimator, HiFT) stays F16 whatever --type says, unless
  // --s3gen-type overrides it; T3 follows --type alone.
  const std::string cfm_q = "cfm.down_blocks.0.1.0.attn1.to_q.weight",
                    ff = "flow.encoder.encoders.0.feed_forward.w_1.weight";
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    EXPECT_EQ(policy_dtype(cfm_q, big, C::Matmul, false, t), DType::F16) << dtype_name(t);
    EXPECT_EQ(policy_dtype(ff, big, C::Matmul, false, t), DType::F16) << dtype_name(t);
    EXPECT_EQ(policy_dtype("flow.input_embedding.weight", big, C::Embedding, false, t), DType::F16);
    EXPECT_EQ(policy_dtype("campplus.xvector.dense.linear.weight", big, C::Matmul, false, t), DType::F32);
  }
  EXPECT_EQ(policy_dtype(cfm_q, big, C::Matmul, false, DType::F32), DType::F32);
  EXPECT_EQ(policy_dtype(cfm_q, big, C::Matmul, false, QuantTypes(DType::Q4_0, DType::Q8_0)), DType::Q8_0);
  EXPECT_EQ(policy_dtype(ff, big, C::Matmul, false, QuantTypes(DType::F32, DType::Q4_0)), DType::Q4_0);
  EXPECT_EQ(policy_dtype("flow.encoder_proj.weight", small, C::Matmul, false, QuantTypes(DType::Q4_0, DType::Q4_0)),
            DType::F32);
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.mlp.c_fc.weight", big, C::Matmul, false, QuantTypes(DType::Q4_0, DType::F32)),
            DType::Q4_0);
  EXPECT_EQ(
      policy_dtype("s3tok.encoder.blocks.0.mlp.0.weight", big, C::Matmul, false, QuantTypes(DType::Q4_0, DType::Q4_0)),
      DType::F16);
  EXPECT_EQ(QuantTypes(DType::Q4_0).s3gen_type(), DType::F16);
  EXPECT_EQ(QuantTypes(DType::F32).s3gen_type(), DType::F32);
  EXPECT_EQ(quant_part("hift.conv_pre.weight"), QuantPart::S3Gen);
  EXPECT_EQ(quant_part("t3.speech_head.weight"), QuantPart::T3);
  std::string msg = error_of([] { parse_target_type("q2", "--s3gen-type"); });
  EXPECT_NE(msg.find("--s3gen-type 'q2'"), std::string::npos) << msg;
}

// --type q4_k: the T3 matrices take Q4_K (K a multiple of 256), a T3 matrix whose K is not
// falls back to Q8_0, the head stays >= Q8_0, S3Gen stays F16 unless overridden, and an
// S3Gen override to q4_k follows the same K rule.
TEST(ConvertPolicy, Q4KDtypeChoices) {
  using C = TensorClass;
  EXPECT_EQ(parse_target_type("q4_k"), DType::Q4_K);
  EXPECT_EQ(parse_target_type("Q4_K"), DType::Q4_K);
  EXPECT_EQ(gguf_file_type(DType::Q4_K), 14u);
  const DType q = DType::Q4_K;
  std::vector<int64_t> big{1024, 1024}, wide{1024, 4096}, k384{1024, 384}, small{80, 512};
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.attn.c_attn.weight", big, C::Matmul, false, q), q);
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.mlp.c_proj.weight", wide, C::Matmul, false, q), q);
  EXPECT_EQ(policy_dtype("t3.tfmr.h.0.attn.c_proj.weight", k384, C::Matmul, false, q), DType::Q8_0);
  EXPECT_EQ(policy_dtype("t3.speech_head.weight", big, C::Head, false, q), DType::Q8_0);
  EXPECT_EQ(policy_dtype("t3.text_emb.weight", big, C::Embedding, false, q), DType::F16);
  EXPECT_EQ(policy_dtype("flow.encoder_proj.weight", small, C::Matmul, false, q), DType::F32);
  EXPECT_EQ(policy_dtype("cfm.down_blocks.0.1.0.attn1.to_q.weight", big, C::Matmul, false, q), DType::F16);
  EXPECT_EQ(policy_dtype("hift.f0_predictor.classifier.weight", big, C::Matmul, false, q), DType::F16);
  EXPECT_EQ(policy_dtype("s3tok.encoder.blocks.0.mlp.0.weight", big, C::Matmul, false, q), DType::F16);
  EXPECT_EQ(policy_dtype("cfm.x.weight", big, C::Matmul, false, QuantTypes(q, q)), q);
  EXPECT_EQ(policy_dtype("cfm.x.weight", k384, C::Matmul, false, QuantTypes(q, q)), DType::Q8_0);
  EXPECT_EQ(QuantTypes(q).s3gen_type(), DType::F16);
}

TEST(ConvertConfig, MetadataRoundTrip) {
  for (Variant v : {Variant::Turbo, Variant::Nano, Variant::Mtl}) {
    ModelConfig c = default_config(v);
    c.voice = {375, 250, 500};
    GgufWriter w;
    w.set_string("general.architecture", "chatterbox");
    write_config(c, w);
    std::vector<uint8_t> bytes = w.to_bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    ModelConfig r = read_config(*f);
    EXPECT_EQ(r.variant, v);
    EXPECT_EQ(r.t3.arch, c.t3.arch);
    EXPECT_EQ(r.t3.n_layer, c.t3.n_layer);
    EXPECT_EQ(r.hift.upsample_rates, c.hift.upsample_rates);
    EXPECT_EQ(r.languages, c.languages);
    EXPECT_FLOAT_EQ(r.pipeline.top_p, c.pipeline.top_p);
    EXPECT_EQ(r.cfm.t_scheduler, c.cfm.t_scheduler);
    // Same table from both configs
    auto a = model_tensor_specs(c), b = model_tensor_specs(r);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].name, b[i].name);
  }
  // Full-size tensor counts (upstream: 299 Turbo T3 tensors less wte and text_head = 297).
  ModelConfig tc = default_config(Variant::Turbo);
  tc.voice = {375, 250, 500};
  auto specs = model_tensor_specs(tc);
  size_t n_t3 = 0;
  for (const auto& s : specs) n_t3 += s.name.rfind("t3.", 0) == 0;
  EXPECT_EQ(n_t3, 297u);
  // Every name fits GGML's 64-byte limit.
  for (Variant v : {Variant::Turbo, Variant::Mtl}) {
    ModelConfig c = default_config(v);
    c.voice = {150, 250, 500};
    for (const auto& s : model_tensor_specs(c)) EXPECT_LT(s.name.size(), 64u) << s.name;
  }
}

TEST(ConvertConfig, MissingKeyNamesIt) {
  GgufWriter w;
  w.set_string("general.architecture", "chatterbox");
  w.set_string("chatterbox.variant", "turbo");
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "x.gguf");
  std::string msg = error_of([&] { read_config(*f); });
  EXPECT_NE(msg.find("chatterbox.format_version"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------

class ConvertTiny : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertTiny, EveryTensorShapesAndValues) {
  const std::string variant = GetParam();
  TempDir tmp;
  const std::string dir = tmp.path + "/ckpt";
  if (!make_tiny(variant, dir, 11)) GTEST_SKIP() << "chatterbox-mkckpt not built";
  CheckpointFiles files = detect_checkpoint(dir);
  EXPECT_EQ(variant_name(files.variant), variant);

  std::map<DType, std::string> out;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0}) {
    ConvertOptions o;
    o.dir = dir;
    o.out = tmp.path + "/m-" + dtype_name(t) + ".gguf";
    o.type = t;
    // Progress: every source file read, then each encoded tensor once, counting up to the total.
    std::vector<std::string> read;
    int64_t last = 0, total = -1;
    o.on_progress = [&](const ProgressEvent& e) {
      if (std::string(e.stage) == "reading") {
        read.push_back(e.item);
        return;
      }
      ASSERT_STREQ(e.stage, "tensor");
      EXPECT_EQ(e.done, last + 1) << e.item;
      EXPECT_FALSE(e.item.empty());
      if (total < 0) total = e.total;
      EXPECT_EQ(e.total, total);
      last = e.done;
    };
    ConvertStats st = convert_checkpoint(o);
    EXPECT_GT(st.n_tensors, 600u);
    EXPECT_EQ(last, total);
    EXPECT_GT(total, 600);
    EXPECT_LE(size_t(total), st.n_tensors);  // the built-in voice's tensors are stored directly
    EXPECT_EQ(read.size(), 4u);              // T3, S3Gen, voice encoder, conds.pt
    out[t] = o.out;
  }
  // Sources, for value checks.
  auto t3 = SourceFile::open(files.t3);
  auto s3 = SourceFile::open(files.s3gen);

  for (const auto& [target, path] : out) {
    SCOPED_TRACE(std::string(dtype_name(target)));
    auto f = GgufFile::open(path);
    ModelConfig c = read_config(*f);
    std::vector<std::string> problems = check_model_tensors(*f, c);
    for (const auto& p : problems) ADD_FAILURE() << p;
    EXPECT_EQ(c.t3.n_layer, variant == "turbo" ? count_indexed(*t3, "tfmr.h.", ".ln_1.weight")
                                               : count_indexed(*t3, "tfmr.layers.", ".input_layernorm.weight"));
    // Every stored dtype is the policy's choice.
    std::map<std::string, TensorSpec> specs;
    for (auto& s : model_tensor_specs(c)) specs[s.name] = s;
    size_t n_quant = 0;
    for (const auto& ti : f->tensors()) {
      const TensorSpec& s = specs.at(ti.name);
      EXPECT_EQ(ti.dtype, policy_dtype(s.name, s.shape, s.role, s.is_int, target)) << ti.name;
      n_quant += ti.dtype == target;
    }
    if (target != DType::F32) {
      EXPECT_GE(n_quant, 8u);  // tiny Turbo: the 2 x 4 T3 layer matrices
    }
    // S3Gen keeps its matrices at F16 for every quantized --type; T3's eligible ones take the type.
    if (target == DType::Q8_0 || target == DType::Q4_0) {
      size_t n_s3gen_f16 = 0;
      for (const auto& ti : f->tensors()) {
        const TensorSpec& s = specs.at(ti.name);
        if (quant_part(ti.name) == QuantPart::S3Gen) {
          EXPECT_FALSE(type_traits(ti.dtype).is_quantized) << ti.name << " is " << dtype_name(ti.dtype);
          n_s3gen_f16 += ti.dtype == DType::F16 && s.role == TensorClass::Matmul;
        }
        if (quant_part(ti.name) == QuantPart::T3 && s.role == TensorClass::Matmul && policy_matmul_eligible(s.shape)) {
          EXPECT_EQ(ti.dtype, target) << ti.name;
        }
      }
      EXPECT_GT(n_s3gen_f16, 10u);
      EXPECT_EQ(f->get(kConvertS3genTypeKey).as_string(), "f16");
    }

    // Values: plain, transposed (GPT-2) and weight-normed tensors against the sources.
    std::vector<std::pair<std::string, std::string>> plain = {
        {"t3.speech_emb.weight", "speech_emb.weight"},
        {"t3.speech_head.weight", "speech_head.weight"},
        {"t3.cond_enc.spkr_enc.weight", "cond_enc.spkr_enc.weight"}};
    if (variant == "turbo") {
      plain.push_back({"t3.tfmr.h.0.ln_1.weight", "tfmr.h.0.ln_1.weight"});
    } else {
      plain.push_back({"t3.tfmr.layers.1.mlp.down_proj.weight", "tfmr.layers.1.mlp.down_proj.weight"});
      plain.push_back({"t3.cond_enc.perceiver.attn.to_q.weight", "cond_enc.perceiver.attn.to_q.weight"});
    }
    for (const auto& [g, u] : plain) expect_close_for(f->find_tensor(g)->dtype, gguf_f32(*f, g), t3->read_f32(u), g);
    for (const auto& [g, u] : std::vector<std::pair<std::string, std::string>>{
             {"cfm.down_blocks.0.1.0.attn1.to_q.weight", "flow.decoder.estimator.down_blocks.0.1.0.attn1.to_q.weight"},
             {"flow.encoder.encoders.0.feed_forward.w_1.weight", "flow.encoder.encoders.0.feed_forward.w_1.weight"},
             {"s3tok.encoder.blocks.0.mlp.0.weight", "tokenizer.encoder.blocks.0.mlp.0.weight"},
             {"flow.input_embedding.weight", "flow.input_embedding.weight"}})
      expect_close_for(f->find_tensor(g)->dtype, gguf_f32(*f, g), s3->read_f32(u), g);
    if (variant == "turbo") {
      // GPT-2 Conv1D [in, out] stored as [out, in]
      std::vector<float> src = t3->read_f32("tfmr.h.1.mlp.c_fc.weight");
      const auto& ss = t3->shape("tfmr.h.1.mlp.c_fc.weight");
      std::vector<float> tr(src.size());
      for (int64_t i = 0; i < ss[0]; ++i)
        for (int64_t j = 0; j < ss[1]; ++j) tr[size_t(j * ss[0] + i)] = src[size_t(i * ss[1] + j)];
      EXPECT_EQ(f->find_tensor("t3.tfmr.h.1.mlp.c_fc.weight")->shape[0], ss[1]);
      expect_close_for(f->find_tensor("t3.tfmr.h.1.mlp.c_fc.weight")->dtype,
                       gguf_f32(*f, "t3.tfmr.h.1.mlp.c_fc.weight"), tr, "c_fc");
    }
    // Weight norm fused: each output row of hift.conv_pre has norm |g|.
    std::vector<float> w = gguf_f32(*f, "hift.conv_pre.weight");
    std::string gname = s3->has("mel2wav.conv_pre.parametrizations.weight.original0")
                            ? "mel2wav.conv_pre.parametrizations.weight.original0"
                            : "mel2wav.conv_pre.weight_g";
    std::vector<float> g = s3->read_f32(gname);
    size_t inner = w.size() / g.size();
    for (size_t i = 0; i < g.size(); ++i) {
      double ss = 0;
      for (size_t j = 0; j < inner; ++j) ss += double(w[i * inner + j]) * w[i * inner + j];
      EXPECT_NEAR(std::sqrt(ss), std::fabs(g[i]), 1e-4 * std::fabs(g[i]) + 1e-6) << "row " << i;
    }
    // The built-in voice.
    EXPECT_EQ(f->find_tensor("voice.prompt_token")->dtype, DType::I32);
    EXPECT_EQ(f->find_tensor("voice.prompt_feat")->shape[1], c.flow.mel_dim);
    // Tokenizer
    EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_array().items.size() > 0, true);
    if (variant == "mtl") {
      EXPECT_TRUE(f->has("chatterbox.tokenizer.cangjie"));
    } else {
      EXPECT_EQ(f->get("chatterbox.tokenizer.added_tokens").as_array().items.size(), 19u);
    }
  }

  // An S3Gen override (the layout of files converted before the policy went by role) converts,
  // passes the layout check and is what quantize makes with the same flags.
  ConvertOptions o;
  o.dir = dir;
  o.out = tmp.path + "/m-s3gen-q4.gguf";
  o.type = DType::Q4_0;
  o.s3gen_type = DType::Q4_0;
  convert_checkpoint(o);
  {
    auto f = GgufFile::open(o.out);
    for (const auto& p : check_model_tensors(*f, read_config(*f))) ADD_FAILURE() << p;
    EXPECT_EQ(f->find_tensor("cfm.down_blocks.0.1.0.attn1.to_q.weight")->dtype, DType::Q4_0);
    EXPECT_EQ(f->get(kConvertS3genTypeKey).as_string(), "q4_0");
  }

  // quantize(f32 file) gives the same tensor bytes as converting straight to the type.
  std::vector<std::pair<QuantTypes, std::string>> cases = {{DType::F16, out[DType::F16]},
                                                           {DType::Q8_0, out[DType::Q8_0]},
                                                           {DType::Q4_0, out[DType::Q4_0]},
                                                           {QuantTypes(DType::Q4_0, DType::Q4_0), o.out}};
  for (const auto& [t, ref] : cases) {
    SCOPED_TRACE(ref);
    std::string q = tmp.path + "/requant.gguf";
    int64_t n_events = 0, last_total = 0;
    QuantizeStats qs = quantize_gguf(out[DType::F32], q, t, [&](const ProgressEvent& e) {
      EXPECT_EQ(e.done, ++n_events);
      last_total = e.total;
    });
    EXPECT_EQ(size_t(n_events), qs.n_tensors);
    EXPECT_EQ(last_total, n_events);
    auto a = GgufFile::open(q), b = GgufFile::open(ref);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
      const auto& ta = a->tensors()[i];
      const auto* tb = b->find_tensor(ta.name);
      ASSERT_TRUE(tb) << ta.name;
      ASSERT_EQ(ta.dtype, tb->dtype) << ta.name;
      ASSERT_EQ(ta.nbytes, tb->nbytes) << ta.name;
      EXPECT_EQ(std::memcmp(a->tensor(ta).data, b->tensor(*tb).data, ta.nbytes), 0) << ta.name;
    }
    EXPECT_EQ(a->get(kConvertTypeKey).as_string(), dtype_name(t.type));
    EXPECT_EQ(a->get(kConvertS3genTypeKey).as_string(), b->get(kConvertS3genTypeKey).as_string());
  }
  // A quantized file cannot be requantized to another type.
  std::string msg = error_of([&] { quantize_gguf(out[DType::Q4_0], tmp.path + "/x.gguf", DType::Q8_0); });
  EXPECT_NE(msg.find("requantizing needs an F32/F16 source"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Variants, ConvertTiny, ::testing::Values("turbo", "mtl"));

TEST(ConvertErrors, TruncatedMissingWrongShapeUnknown) {
  TempDir tmp;
  const std::string dir = tmp.path + "/ckpt";
  if (!make_tiny("turbo", dir, 3)) GTEST_SKIP() << "chatterbox-mkckpt not built";
  ConvertOptions o;
  o.dir = dir;
  o.out = tmp.path + "/m.gguf";

  // Truncated safetensors: the message names the file.
  fs::copy_file(dir + "/t3_turbo_v1.safetensors", tmp.path + "/t3.bak");
  fs::resize_file(dir + "/t3_turbo_v1.safetensors", fs::file_size(dir + "/t3_turbo_v1.safetensors") / 2);
  std::string msg = error_of([&] { convert_checkpoint(o); });
  EXPECT_NE(msg.find("t3_turbo_v1.safetensors"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(o.out));
  fs::remove(dir + "/t3_turbo_v1.safetensors");
  fs::copy_file(tmp.path + "/t3.bak", dir + "/t3_turbo_v1.safetensors");

  // Truncated conds.pt
  fs::copy_file(dir + "/conds.pt", tmp.path + "/conds.bak");
  fs::resize_file(dir + "/conds.pt", fs::file_size(dir + "/conds.pt") - 100);
  msg = error_of([&] { convert_checkpoint(o); });
  EXPECT_NE(msg.find("conds.pt"), std::string::npos) << msg;
  fs::remove(dir + "/conds.pt");
  fs::copy_file(tmp.path + "/conds.bak", dir + "/conds.pt");

  // Wrong shape: a VE tensor one element too long; the message names file and tensor.
  {
    auto ve = SafetensorsFile::open(dir + "/ve.safetensors");
    std::vector<CkptTensor> ts;
    for (const auto& n : ve->names()) ts.push_back(ve->read(n));
    ve.reset();
    for (auto& t : ts)
      if (t.name == "proj.bias") {
        t.shape[0] += 1;
        t.data.resize(t.data.size() + 4);
      }
    std::vector<const CkptTensor*> ptrs;
    for (auto& t : ts) ptrs.push_back(&t);
    write_safetensors(dir + "/ve.safetensors", ptrs);
    msg = error_of([&] { convert_checkpoint(o); });
    EXPECT_NE(msg.find("ve.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("proj.bias"), std::string::npos) << msg;
    // Wrong dtype
    for (auto& t : ts)
      if (t.name == "proj.bias") {
        t.shape[0] -= 1;
        t.dtype = DType::I32;
        t.data.resize(t.data.size() - 4);
      }
    write_safetensors(dir + "/ve.safetensors", ptrs);
    msg = error_of([&] { convert_checkpoint(o); });
    EXPECT_NE(msg.find("ve.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("proj.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  }

  // Missing file: named, with the variant expected.
  fs::remove(dir + "/merges.txt");
  msg = error_of([&] { detect_checkpoint(dir); });
  EXPECT_NE(msg.find("merges.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Turbo"), std::string::npos) << msg;

  // Unknown variant: no T3 file at all.
  fs::remove(dir + "/t3_turbo_v1.safetensors");
  msg = error_of([&] { detect_checkpoint(dir); });
  EXPECT_NE(msg.find("unknown checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t3_mtl23ls_v2"), std::string::npos) << msg;
}

TEST(ConvertErrors, MtlMissingCangjie) {
  TempDir tmp;
  const std::string dir = tmp.path + "/ckpt";
  if (!make_tiny("mtl", dir, 4)) GTEST_SKIP() << "chatterbox-mkckpt not built";
  fs::remove(dir + "/Cangjie5_TC.json");
  std::string msg = error_of([&] { detect_checkpoint(dir); });
  EXPECT_NE(msg.find("Cangjie5_TC.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Multilingual"), std::string::npos) << msg;
}
