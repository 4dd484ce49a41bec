// struct Voice and .voice files (pipeline/voice.h): bit-exact round trips through bytes and files,
// metadata, and every validation that must refuse a voice (wrong variant, sizes, token ranges,
// non-finite values, prompt mel / token mismatch, not a voice file, newer format, missing or
// ill-typed tensors, corrupt bytes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"
#include "pipeline/voice.h"

using namespace cbx;

namespace {

std::string tmp_path(const std::string& name) {
  return testing::TempDir() + "cbx_test_voice_file_" + std::to_string(getpid()) + "_" + name;
}

// A voice shaped like one built from a 10 s reference, with random contents.
Voice make_voice(Variant variant, uint32_t seed, int64_t tp = 250, int64_t p = 375) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int32_t> tok(0, 6560);
  Voice v;
  v.variant = variant;
  v.speaker_emb.resize(256);
  for (float& x : v.speaker_emb) x = nd(rng);
  v.cond_prompt_tokens.resize(size_t(p));
  for (int32_t& t : v.cond_prompt_tokens) t = tok(rng);
  v.emotion_adv = variant == Variant::Mtl ? 0.5f : 0.0f;
  v.prompt_token.resize(size_t(tp));
  for (int32_t& t : v.prompt_token) t = tok(rng);
  v.mel_dim = 80;
  v.prompt_feat.resize(size_t(2 * tp * 80));
  for (float& x : v.prompt_feat) x = nd(rng) - 5.f;
  v.embedding.resize(192);
  for (float& x : v.embedding) x = nd(rng);
  v.source = "ref.wav";
  v.model = "turbo-q4_0.gguf";
  v.source_sample_rate = 44100;
  v.source_channels = 2;
  v.source_samples = 441000;
  v.ref_samples = 240000;
  v.t3_samples = 160000;
  v.s3gen_samples = 240000;
  v.loudness_lufs = -21.37f;
  v.loudness_gain = 0.5123f;
  return v;
}

void expect_same(const Voice& a, const Voice& b) {
  EXPECT_EQ(a.variant, b.variant);
  ASSERT_EQ(a.speaker_emb.size(), b.speaker_emb.size());
  EXPECT_EQ(0, std::memcmp(a.speaker_emb.data(), b.speaker_emb.data(), a.speaker_emb.size() * 4));
  EXPECT_EQ(a.cond_prompt_tokens, b.cond_prompt_tokens);
  EXPECT_EQ(0, std::memcmp(&a.emotion_adv, &b.emotion_adv, 4));
  EXPECT_EQ(a.prompt_token, b.prompt_token);
  EXPECT_EQ(a.mel_dim, b.mel_dim);
  ASSERT_EQ(a.prompt_feat.size(), b.prompt_feat.size());
  EXPECT_EQ(0, std::memcmp(a.prompt_feat.data(), b.prompt_feat.data(), a.prompt_feat.size() * 4));
  ASSERT_EQ(a.embedding.size(), b.embedding.size());
  EXPECT_EQ(0, std::memcmp(a.embedding.data(), b.embedding.data(), a.embedding.size() * 4));
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.source_sample_rate, b.source_sample_rate);
  EXPECT_EQ(a.source_channels, b.source_channels);
  EXPECT_EQ(a.source_samples, b.source_samples);
  EXPECT_EQ(a.ref_samples, b.ref_samples);
  EXPECT_EQ(a.t3_samples, b.t3_samples);
  EXPECT_EQ(a.s3gen_samples, b.s3gen_samples);
  EXPECT_EQ(a.loudness_lufs, b.loudness_lufs);
  EXPECT_EQ(a.loudness_gain, b.loudness_gain);
}

// Expects fn to throw cbx::Error whose message holds every needle.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << *needles.begin();
  } catch (const Error& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

Voice from_bytes(const std::vector<uint8_t>& b) {
  auto f = GgufFile::from_memory(b.data(), b.size(), "mem.voice");
  return voice_from_gguf(*f);
}

// Rewrites a voice image through GgufWriter, letting `edit` change metadata and tensors.
std::vector<uint8_t> rewrite(const std::vector<uint8_t>& img, const std::string& drop_key,
                             const std::string& drop_tensor, const GgufValue* set_value = nullptr,
                             const std::string& set_key = "") {
  auto f = GgufFile::from_memory(img.data(), img.size(), "mem.voice");
  GgufWriter w;
  for (const std::string& k : f->keys())
    if (k != drop_key) w.set_value(k, k == set_key && set_value ? *set_value : f->get(k));
  if (set_value && !f->has(set_key)) w.set_value(set_key, *set_value);
  for (const GgufTensorInfo& ti : f->tensors()) {
    if (ti.name == drop_tensor) continue;
    Tensor t = f->tensor(ti);
    std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    w.add_tensor(ti.name, ti.dtype, shape, t.data, ti.nbytes);
  }
  return w.to_bytes();
}

}  // namespace

TEST(Voice, RoundTripBytesIsBitExact) {
  for (Variant var : {Variant::Turbo, Variant::Nano, Variant::Mtl}) {
    Voice v = make_voice(var, 7, 199, var == Variant::Mtl ? 150 : 375);
    v.prompt_feat.resize(size_t(399 * 80));  // Tm = 2 Tp + 1 (a reference that is not whole tokens)
    v.prompt_feat[5] = -0.0f;
    v.prompt_feat[6] = 1e-38f;  // subnormal-adjacent values survive
    Voice r = from_bytes(voice_to_bytes(v));
    expect_same(v, r);
    EXPECT_EQ(r.n_prompt_frames(), 399);
  }
}

TEST(Voice, RoundTripFile) {
  const std::string p = tmp_path("a.voice");
  Voice v = make_voice(Variant::Turbo, 3);
  save_voice(v, p);
  EXPECT_TRUE(is_gguf_file(p));
  Voice r = load_voice(p);
  expect_same(v, r);
  std::remove(p.c_str());
}

TEST(Voice, MetadataNamesTheFormat) {
  std::vector<uint8_t> b = voice_to_bytes(make_voice(Variant::Mtl, 1, 100, 150));
  auto f = GgufFile::from_memory(b.data(), b.size(), "m");
  EXPECT_EQ(f->get("general.architecture").as_string(), "chatterbox-voice");
  EXPECT_EQ(f->get("chatterbox.voice.format_version").as_int(), kVoiceFormatVersion);
  EXPECT_EQ(f->get("chatterbox.voice.variant").as_string(), "mtl");
  EXPECT_EQ(f->get("chatterbox.voice.source").as_string(), "ref.wav");
  EXPECT_EQ(f->get("chatterbox.voice.source_samples").as_int(), 441000);
  // Same tensor names, shapes and dtypes as a model's built-in voice.
  ModelConfig c = default_config(Variant::Mtl);
  c.voice.n_cond_prompt_tokens = 150;
  c.voice.n_prompt_tokens = 100;
  c.voice.n_prompt_frames = 200;
  int n_voice_specs = 0;
  for (const TensorSpec& s : model_tensor_specs(c)) {
    if (s.name.rfind("voice.", 0) != 0) continue;
    ++n_voice_specs;
    const GgufTensorInfo* ti = f->find_tensor(s.name);
    ASSERT_TRUE(ti) << s.name;
    EXPECT_EQ(ti->dtype, s.is_int ? DType::I32 : DType::F32) << s.name;
    ASSERT_EQ(size_t(ti->ndim), s.shape.size()) << s.name;
    for (int d = 0; d < ti->ndim; ++d) EXPECT_EQ(ti->shape[d], s.shape[size_t(d)]) << s.name;
  }
  EXPECT_EQ(n_voice_specs, 6);
  EXPECT_EQ(f->tensors().size(), 6u);
}

TEST(Voice, CheckAgainstModel) {
  const ModelConfig turbo = default_config(Variant::Turbo);
  const ModelConfig nano = default_config(Variant::Nano);
  const ModelConfig mtl = default_config(Variant::Mtl);
  check_voice(make_voice(Variant::Turbo, 1), turbo, "v");
  check_voice(make_voice(Variant::Turbo, 1), nano, "v");  // same conditioning recipe
  check_voice(make_voice(Variant::Nano, 1), turbo, "v");
  check_voice(make_voice(Variant::Mtl, 1, 250, 150), mtl, "v");
  expect_error([&] { check_voice(make_voice(Variant::Turbo, 1, 250, 150), mtl, "x.voice"); },
               {"x.voice", "built for a turbo model", "mtl model"});
  expect_error([&] { check_voice(make_voice(Variant::Mtl, 1, 250, 150), turbo, "x.voice"); },
               {"built for a mtl model", "turbo model"});
  // An MTL model takes at most 150 T3 prompt tokens.
  Voice big = make_voice(Variant::Mtl, 1, 250, 375);
  expect_error([&] { check_voice(big, mtl, "v"); }, {"375 T3 prompt tokens", "at most 150"});
  Voice v = make_voice(Variant::Turbo, 2);
  v.speaker_emb.resize(255);
  expect_error([&] { check_voice(v, turbo, "v"); }, {"speaker_emb has 255 values", "takes 256"});
  v = make_voice(Variant::Turbo, 2);
  v.embedding.resize(191);
  expect_error([&] { check_voice(v, turbo, "v"); }, {"embedding has 191 values", "takes 192"});
  v = make_voice(Variant::Turbo, 2);
  v.mel_dim = 40;
  v.prompt_feat.resize(size_t(500 * 40));
  expect_error([&] { check_voice(v, turbo, "v"); }, {"40 mel bins", "takes 80"});
  v = make_voice(Variant::Turbo, 2, 251);
  expect_error([&] { check_voice(v, turbo, "v"); }, {"251 S3Gen prompt tokens", "10 s"});
}

TEST(Voice, ValidateRefusesBrokenVoices) {
  Voice v = make_voice(Variant::Turbo, 4);
  v.cond_prompt_tokens[3] = 6561;
  expect_error([&] { validate_voice(v, "v"); }, {"cond_prompt_tokens[3] = 6561", "speech vocabulary"});
  v = make_voice(Variant::Turbo, 4);
  v.prompt_token[0] = -1;
  expect_error([&] { validate_voice(v, "v"); }, {"prompt_token[0] = -1"});
  v = make_voice(Variant::Turbo, 4);
  v.prompt_feat[17] = NAN;
  expect_error([&] { validate_voice(v, "v"); }, {"prompt_feat[17] is not finite"});
  v = make_voice(Variant::Turbo, 4);
  v.speaker_emb[0] = INFINITY;
  expect_error([&] { validate_voice(v, "v"); }, {"speaker_emb[0] is not finite"});
  v = make_voice(Variant::Turbo, 4);
  v.prompt_feat.resize(size_t(300 * 80));  // 300 frames for 250 tokens
  expect_error([&] { validate_voice(v, "v"); }, {"300 frames for 250 prompt tokens"});
  v = make_voice(Variant::Turbo, 4);
  v.prompt_feat.resize(v.prompt_feat.size() - 3);
  expect_error([&] { validate_voice(v, "v"); }, {"not a positive multiple of 80"});
  v = make_voice(Variant::Turbo, 4);
  v.cond_prompt_tokens.clear();
  expect_error([&] { validate_voice(v, "v"); }, {"cond_prompt_tokens is empty"});
  v = make_voice(Variant::Turbo, 4);
  v.speaker_emb.clear();
  expect_error([&] { save_voice(v, tmp_path("never.voice")); }, {"speaker_emb is empty"});
}

TEST(Voice, LoadRefusesWhatIsNotAVoice) {
  const std::vector<uint8_t> good = voice_to_bytes(make_voice(Variant::Turbo, 5));
  // A model GGUF (another architecture).
  GgufValue arch;
  arch.type = GgufType::STRING;
  arch.v = std::string("chatterbox");
  expect_error([&] { from_bytes(rewrite(good, "", "", &arch, "general.architecture")); },
               {"not a voice file", "'chatterbox'"});
  expect_error([&] { from_bytes(rewrite(good, "general.architecture", "")); }, {"not a voice file"});
  // A newer format.
  GgufValue ver;
  ver.type = GgufType::I32;
  ver.v = int64_t(kVoiceFormatVersion + 1);
  expect_error([&] { from_bytes(rewrite(good, "", "", &ver, "chatterbox.voice.format_version")); },
               {"format version 2 is not supported"});
  // Unknown variant, missing variant.
  GgufValue var;
  var.type = GgufType::STRING;
  var.v = std::string("original");
  expect_error([&] { from_bytes(rewrite(good, "", "", &var, "chatterbox.voice.variant")); },
               {"unknown voice variant 'original'"});
  expect_error([&] { from_bytes(rewrite(good, "chatterbox.voice.variant", "")); },
               {"missing metadata 'chatterbox.voice.variant'"});
  // Missing tensors are named.
  for (const char* t :
       {"voice.speaker_emb", "voice.cond_prompt_tokens", "voice.emotion_adv", "voice.prompt_token", "voice.embedding"})
    expect_error([&] { from_bytes(rewrite(good, "", t)); }, {"missing tensor", t});
  // Corrupt bytes: the GGUF reader refuses them by name.
  std::vector<uint8_t> cut(good.begin(), good.begin() + long(good.size() / 2));
  expect_error([&] { from_bytes(cut); }, {"mem.voice"});
  // A file that is not a GGUF at all.
  const std::string p = tmp_path("noise.voice");
  {
    std::ofstream o(p, std::ios::binary);
    o << "RIFF....WAVEfmt ";
  }
  EXPECT_FALSE(is_gguf_file(p));
  expect_error([&] { load_voice(p); }, {"noise.voice"});
  std::remove(p.c_str());
  expect_error([&] { is_gguf_file(tmp_path("missing.voice")); }, {"missing.voice", "cannot open"});
}

TEST(Voice, IllTypedTensorsAreRefused) {
  Voice v = make_voice(Variant::Turbo, 6);
  GgufWriter w;
  w.set_string("general.architecture", kVoiceArchitecture);
  w.set_i32("chatterbox.voice.format_version", 1);
  w.set_string("chatterbox.voice.variant", "turbo");
  w.add_tensor("voice.speaker_emb", DType::F32, {256}, v.speaker_emb.data(), 256 * 4);
  // Token ids stored as floats.
  std::vector<float> ftok(v.cond_prompt_tokens.begin(), v.cond_prompt_tokens.end());
  w.add_tensor("voice.cond_prompt_tokens", DType::F32, {int64_t(ftok.size())}, ftok.data(), ftok.size() * 4);
  w.add_tensor("voice.emotion_adv", DType::F32, {1}, &v.emotion_adv, 4);
  w.add_tensor("voice.prompt_token", DType::I32, {250}, v.prompt_token.data(), 250 * 4);
  w.add_tensor("voice.prompt_feat", DType::F32, {500, 80}, v.prompt_feat.data(), v.prompt_feat.size() * 4);
  w.add_tensor("voice.embedding", DType::F32, {192}, v.embedding.data(), 192 * 4);
  expect_error([&] { from_bytes(w.to_bytes()); }, {"voice.cond_prompt_tokens", "expected a contiguous i32"});
}

TEST(Voice, Compatibility) {
  EXPECT_TRUE(voice_compatible(Variant::Turbo, Variant::Turbo));
  EXPECT_TRUE(voice_compatible(Variant::Turbo, Variant::Nano));
  EXPECT_TRUE(voice_compatible(Variant::Mtl, Variant::Mtl));
  EXPECT_FALSE(voice_compatible(Variant::Mtl, Variant::Turbo));
  EXPECT_FALSE(voice_compatible(Variant::Nano, Variant::Mtl));
}
