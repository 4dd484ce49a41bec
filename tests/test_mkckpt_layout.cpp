// The upstream tensor table (src/convert/upstream_layout) and the files chatterbox-mkckpt
// writes from it, read back through the library's own safetensors / torch.load readers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "convert/safetensors.h"
#include "convert/torch_pt.h"
#include "convert/upstream_layout.h"
#include "text/gpt2_tokenizer.h"

namespace cbx {
namespace {

std::vector<UpstreamTensor> table(CkptFile f, CkptVariant v, bool tiny) {
  std::vector<UpstreamTensor> out;
  for_each_upstream_tensor(f, v, upstream_dims(v, tiny), [&](const UpstreamTensor& t) { out.push_back(t); });
  return out;
}

std::map<std::string, std::vector<int64_t>> shapes(const std::vector<UpstreamTensor>& ts) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const auto& t : ts) m[t.name] = t.shape;
  return m;
}

TEST(UpstreamLayout, FullSizeCountsAndUniqueNames) {
  struct Case {
    CkptFile f;
    CkptVariant v;
    size_t n;
  } cases[] = {
      {CkptFile::T3, CkptVariant::Turbo, 299},  // matches a third-party header dump
      {CkptFile::T3, CkptVariant::Mtl, 292},
      {CkptFile::T3, CkptVariant::Nano, 155},  // GPT-2 small: 12 layers x 12 + 11
      {CkptFile::VE, CkptVariant::Nano, 16},
      {CkptFile::S3Gen, CkptVariant::Nano, 2491},
      {CkptFile::VE, CkptVariant::Turbo, 16},
      {CkptFile::VE, CkptVariant::Mtl, 16},
      {CkptFile::S3Gen, CkptVariant::Turbo, 2491},
      {CkptFile::S3Gen, CkptVariant::Mtl, 2490},  // no mean-flow time_embed_mixer
  };
  for (const auto& c : cases) {
    for (bool tiny : {false, true}) {
      const auto ts = table(c.f, c.v, tiny);
      if (!tiny) {
        EXPECT_EQ(ts.size(), c.n) << upstream_file_name(c.f, c.v);
      }
      EXPECT_EQ(shapes(ts).size(), ts.size()) << "duplicate names in " << upstream_file_name(c.f, c.v);
    }
  }
  size_t wn = 0;
  for (const auto& t : table(CkptFile::S3Gen, CkptVariant::Mtl, false)) wn += t.role == TensorRole::WnG;
  EXPECT_EQ(wn, 82u);
}

TEST(UpstreamLayout, FullSizeShapesConfirmedUpstream) {
  const auto s3 = shapes(table(CkptFile::S3Gen, CkptVariant::Turbo, false));
  const std::map<std::string, std::vector<int64_t>> want = {
      {"speaker_encoder.head.conv1.weight", {32, 1, 3, 3}},
      {"speaker_encoder.xvector.tdnn.linear.weight", {128, 320, 5}},
      {"speaker_encoder.xvector.dense.linear.weight", {192, 1024, 1}},
      {"speaker_encoder.xvector.transit1.linear.weight", {256, 512, 1}},
      {"flow.decoder.estimator.down_blocks.0.0.block1.block.0.weight", {256, 320, 3}},
      {"flow.decoder.estimator.time_embed_mixer.weight", {1024, 2048}},
      {"mel2wav.conv_pre.parametrizations.weight.original0", {512, 1, 1}},
      {"mel2wav.conv_pre.parametrizations.weight.original1", {512, 80, 7}},
      {"mel2wav.ups.0.parametrizations.weight.original1", {512, 256, 16}},
      {"mel2wav.f0_predictor.classifier.weight", {1, 512}},
      {"mel2wav.m_source.l_linear.weight", {1, 9}},
      {"flow.input_embedding.weight", {6561, 512}},
      {"flow.encoder.encoders.0.self_attn.pos_bias_u", {8, 64}},
      {"tokenizer.encoder.blocks.5.attn.fsmn_block.weight", {1280, 1, 31}},
      {"tokenizer._mel_filters", {128, 201}},
  };
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(s3.count(name)) << name;
    EXPECT_EQ(s3.at(name), shape) << name;
  }
  const auto t3 = shapes(table(CkptFile::T3, CkptVariant::Turbo, false));
  EXPECT_EQ(t3.at("tfmr.h.23.attn.c_attn.weight"), (std::vector<int64_t>{1024, 3072}));
  EXPECT_EQ(t3.at("text_emb.weight"), (std::vector<int64_t>{50276, 1024}));
  const auto t3m = shapes(table(CkptFile::T3, CkptVariant::Mtl, false));
  EXPECT_EQ(t3m.at("text_emb.weight"), (std::vector<int64_t>{2454, 1024}));
  EXPECT_EQ(t3m.at("speech_pos_emb.emb.weight"), (std::vector<int64_t>{4100, 1024}));
  EXPECT_EQ(upstream_file_name(CkptFile::T3, CkptVariant::Mtl, 3), "t3_mtl23ls_v3.safetensors");
  // Nano: GPT2_small (12 layers, 768 wide, 12 heads); every other file is Turbo's.
  const auto t3n = shapes(table(CkptFile::T3, CkptVariant::Nano, false));
  EXPECT_EQ(t3n.at("tfmr.h.11.attn.c_attn.weight"), (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(t3n.at("tfmr.h.11.mlp.c_fc.weight"), (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(t3n.count("tfmr.h.12.ln_1.weight"), 0u);
  EXPECT_EQ(t3n.at("text_emb.weight"), (std::vector<int64_t>{50276, 768}));
  EXPECT_EQ(t3n.at("speech_head.weight"), (std::vector<int64_t>{6563, 768}));
  EXPECT_EQ(upstream_file_name(CkptFile::T3, CkptVariant::Nano), "t3_nano_v1.safetensors");
  EXPECT_EQ(upstream_file_name(CkptFile::S3Gen, CkptVariant::Nano), "s3gen_meanflow.safetensors");
  EXPECT_EQ(shapes(table(CkptFile::S3Gen, CkptVariant::Nano, false)), s3);
}

// Generates tiny checkpoints and checks every file against the table with the library readers.
TEST(MkckptFiles, TinyFilesMatchTable) {
  const std::string bin = std::string(CBX_BINARY_DIR) + "/bin/chatterbox-mkckpt";
  if (access(bin.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << bin;
  const auto dir = std::filesystem::temp_directory_path() / ("cbx_mkckpt_layout_" + std::to_string(getpid()));
  for (CkptVariant v : {CkptVariant::Turbo, CkptVariant::Nano, CkptVariant::Mtl}) {
    const std::string vname = v == CkptVariant::Turbo ? "turbo" : v == CkptVariant::Nano ? "nano" : "mtl";
    const std::string out = (dir / vname).string();
    const std::string cmd = bin + " --variant " + vname + " --size tiny --seed 3 " + out + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    for (CkptFile f : {CkptFile::T3, CkptFile::S3Gen, CkptFile::VE}) {
      const auto want = table(f, v, true);
      const std::string path = out + "/" + upstream_file_name(f, v);
      std::map<std::string, std::pair<DType, std::vector<int64_t>>> got;
      if (upstream_file_is_torch_pickle(f, v)) {
        const PyRef root = load_torch_pt(path);
        for (const auto& [name, t] : flatten_state_dict(*root)) got[name] = {t->dtype, t->shape};
      } else {
        const auto st = SafetensorsFile::open(path);
        for (const auto& name : st->names()) got[name] = {st->dtype(name), st->shape(name)};
      }
      EXPECT_EQ(got.size(), want.size()) << path;
      for (const auto& t : want) {
        auto it = got.find(t.name);
        ASSERT_NE(it, got.end()) << path << ": missing " << t.name;
        EXPECT_EQ(it->second.first, t.dtype) << t.name;
        EXPECT_EQ(it->second.second, t.shape) << t.name;
      }
    }
    if (v != CkptVariant::Mtl) {  // the tokenizer files load and round-trip
      const Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(out);
      EXPECT_EQ(tok.size(), size_t(upstream_dims(v, true).text_vocab));
      EXPECT_EQ(tok.token_to_id("[laugh]"), int32_t(tok.size()) - 1);
      const std::string text = "Hello there, it's 2025 [chuckle] ok.";
      const auto ids = tok.encode(text);
      EXPECT_EQ(tok.decode(ids), text);
      EXPECT_NE(std::find(ids.begin(), ids.end(), tok.token_to_id("[chuckle]")), ids.end());
    }
    const PyRef conds = load_torch_pt(out + "/conds.pt");
    ASSERT_TRUE(conds->get("t3") && conds->get("gen"));
    const PyObject* tok = conds->get("t3")->get("cond_prompt_speech_tokens");
    ASSERT_TRUE(tok && tok->kind == PyObject::Kind::Tensor);
    EXPECT_EQ(tok->tensor->dtype, DType::I64);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cbx
