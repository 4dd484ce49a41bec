// conds.pt -> the built-in voice: torch.save({"t3": T3Cond.__dict__, "gen": ref_dict}).
// Batch dims (always 1) are dropped; token ids are stored as I32.
#include <cstdio>

#include "convert/convert_internal.h"
#include "core/error.h"

namespace cbx {

namespace {

const CkptTensor& need_tensor(const PyObject& d, const char* group, const char* key, const std::string& file) {
  const PyObject* o = d.get(key);
  CBX_CHECK(o, "%s: missing '%s.%s'", file.c_str(), group, key);
  CBX_CHECK(o->kind == PyObject::Kind::Tensor && o->tensor, "%s: '%s.%s' is not a tensor", file.c_str(), group, key);
  return *o->tensor;
}

// Shape without leading/trailing 1s that torch keeps for batch/channel.
std::vector<int64_t> squeeze(const std::vector<int64_t>& s) {
  std::vector<int64_t> r;
  for (int64_t d : s)
    if (d != 1) r.push_back(d);
  return r;
}

std::vector<float> floats(const CkptTensor& t, const char* what, int64_t n, const std::string& file) {
  CBX_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::F64,
            "%s: '%s' has dtype %s, expected a float type", file.c_str(), what, dtype_name(t.dtype));
  CBX_CHECK(n < 0 || t.numel() == n, "%s: '%s' has shape %s, expected %lld elements", file.c_str(), what,
            shape_to_string(t.shape).c_str(), (long long)n);
  return t.to_f32();
}

std::vector<int32_t> tokens(const CkptTensor& t, const char* what, int64_t vocab, const std::string& file) {
  CBX_CHECK(t.dtype == DType::I64 || t.dtype == DType::I32 || t.dtype == DType::I16,
            "%s: '%s' has dtype %s, expected an integer type", file.c_str(), what, dtype_name(t.dtype));
  CBX_CHECK(squeeze(t.shape).size() <= 1, "%s: '%s' has shape %s, expected (1, N)", file.c_str(), what,
            shape_to_string(t.shape).c_str());
  std::vector<int64_t> v = t.to_i64();
  CBX_CHECK(!v.empty(), "%s: '%s' is empty", file.c_str(), what);
  std::vector<int32_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    CBX_CHECK(v[i] >= 0 && v[i] < vocab, "%s: '%s'[%zu] = %lld outside the speech vocabulary [0, %lld)", file.c_str(),
              what, i, (long long)v[i], (long long)vocab);
    r[i] = int32_t(v[i]);
  }
  return r;
}

}  // namespace

VoiceTensors read_voice(const std::string& path, ModelConfig& c, const WarningFn& warn) {
  const std::string file = base_name(path);
  PyRef root = load_torch_pt(path);
  CBX_CHECK(root && root->kind == PyObject::Kind::Dict, "%s: expected a dict {'t3': ..., 'gen': ...}", file.c_str());
  const PyObject* t3 = root->get("t3");
  const PyObject* gen = root->get("gen");
  CBX_CHECK(t3 && t3->kind == PyObject::Kind::Dict, "%s: missing dict 't3'", file.c_str());
  CBX_CHECK(gen && gen->kind == PyObject::Kind::Dict, "%s: missing dict 'gen'", file.c_str());

  VoiceTensors v;
  // S3 speech tokens index the flow's embedding (6561 rows) and T3's speech table.
  const int64_t vocab = c.flow.vocab;
  v.speaker_emb = floats(need_tensor(*t3, "t3", "speaker_emb", file), "t3.speaker_emb", c.t3.speaker_embed_size, file);
  v.cond_prompt_tokens =
      tokens(need_tensor(*t3, "t3", "cond_prompt_speech_tokens", file), "t3.cond_prompt_speech_tokens", vocab, file);
  const PyObject* emo = t3->get("emotion_adv");
  if (emo && emo->kind == PyObject::Kind::Tensor) {
    v.emotion_adv = floats(*emo->tensor, "t3.emotion_adv", 1, file);
  } else if (emo && (emo->kind == PyObject::Kind::Float || emo->kind == PyObject::Kind::Int)) {
    v.emotion_adv = {float(emo->kind == PyObject::Kind::Float ? emo->f : double(emo->i))};
  } else {
    v.emotion_adv = {c.pipeline.exaggeration};  // absent/None: the variant's default
  }
  const PyObject* clap = t3->get("clap_emb");
  CBX_CHECK(!clap || clap->kind == PyObject::Kind::None, "%s: 't3.clap_emb' must be None", file.c_str());

  v.prompt_token = tokens(need_tensor(*gen, "gen", "prompt_token", file), "gen.prompt_token", vocab, file);
  const CkptTensor& feat = need_tensor(*gen, "gen", "prompt_feat", file);
  CBX_CHECK(!feat.shape.empty() && feat.shape.back() == c.flow.mel_dim && squeeze(feat.shape).size() <= 2,
            "%s: 'gen.prompt_feat' has shape %s, expected (1, T, %d)", file.c_str(),
            shape_to_string(feat.shape).c_str(), c.flow.mel_dim);
  v.prompt_feat = floats(feat, "gen.prompt_feat", -1, file);
  v.embedding = floats(need_tensor(*gen, "gen", "embedding", file), "gen.embedding", c.flow.spk_embed_dim, file);

  c.voice.n_cond_prompt_tokens = int32_t(v.cond_prompt_tokens.size());
  c.voice.n_prompt_tokens = int32_t(v.prompt_token.size());
  c.voice.n_prompt_frames = int32_t(v.prompt_feat.size() / size_t(c.flow.mel_dim));
  CBX_CHECK(c.voice.n_prompt_frames > 0, "%s: 'gen.prompt_feat' is empty", file.c_str());
  if (c.voice.n_cond_prompt_tokens > c.t3.cond_prompt_len)
    warn(file + " holds " + std::to_string(c.voice.n_cond_prompt_tokens) + " T3 prompt tokens, more than the " +
         std::to_string(c.t3.cond_prompt_len) + " the model uses");
  return v;
}

}  // namespace cbx
