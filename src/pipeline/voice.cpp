// struct Voice: the built-in voice, validation against a model, .voice GGUF files (voice.h).
#include "pipeline/voice.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/gguf.h"
#include "core/output_file.h"

namespace cbx {

namespace {

constexpr int32_t kS3Vocab = 6561;  // 3^8 S3 speech tokens (FSQ)
constexpr const char* kKey = "chatterbox.voice.";

std::string key(const char* k) { return std::string(kKey) + k; }

// A contiguous tensor of dtype `dt` and 1 or 2 dims; returns its elements.
template <typename T>
std::vector<T> read_tensor(const GgufFile& f, const std::string& what, const char* name, DType dt, int want_ndim,
                           int64_t want_cols, int64_t* rows) {
  const GgufTensorInfo* info = f.find_tensor(name);
  CBX_CHECK(info, "%s: missing tensor '%s'", what.c_str(), name);
  Tensor t = f.tensor(*info);
  CBX_CHECK(t.dtype == dt && t.is_contiguous(), "%s: tensor '%s' is %s, expected a contiguous %s tensor", what.c_str(),
            name, dtype_name(t.dtype), dtype_name(dt));
  CBX_CHECK(t.ndim == want_ndim, "%s: tensor '%s' has shape %s, expected %d dimension(s)", what.c_str(), name,
            t.shape_str().c_str(), want_ndim);
  if (want_cols > 0)
    CBX_CHECK(t.shape[t.ndim - 1] == want_cols, "%s: tensor '%s' has shape %s, expected [.., %lld]", what.c_str(), name,
              t.shape_str().c_str(), (long long)want_cols);
  if (rows) *rows = t.ndim == 2 ? t.shape[0] : t.numel();
  return std::vector<T>(t.ptr<T>(), t.ptr<T>() + t.numel());
}

void check_tokens(const std::vector<int32_t>& v, int64_t vocab, const std::string& what, const char* name) {
  CBX_CHECK(!v.empty(), "%s: %s is empty", what.c_str(), name);
  for (size_t i = 0; i < v.size(); ++i)
    CBX_CHECK(v[i] >= 0 && v[i] < vocab, "%s: %s[%zu] = %d is outside the speech vocabulary [0, %lld)", what.c_str(),
              name, i, v[i], (long long)vocab);
}

void check_finite(const std::vector<float>& v, const std::string& what, const char* name) {
  for (size_t i = 0; i < v.size(); ++i)
    CBX_CHECK(std::isfinite(v[i]), "%s: %s[%zu] is not finite (%g)", what.c_str(), name, i, double(v[i]));
}

std::string meta_string(const GgufFile& f, const std::string& k, const std::string& what) {
  const GgufValue* v = f.find(k);
  if (!v) return "";
  CBX_CHECK(v->type == GgufType::STRING, "%s: metadata '%s' is %s, expected a string", what.c_str(), k.c_str(),
            gguf_type_name(v->type));
  return v->as_string();
}

int64_t meta_int(const GgufFile& f, const std::string& k, const std::string& what) {
  const GgufValue* v = f.find(k);
  if (!v) return 0;
  try {
    return v->as_int();
  } catch (const Error&) {
    fail("%s: metadata '%s' is %s, expected an integer", what.c_str(), k.c_str(), gguf_type_name(v->type));
  }
}

float meta_float(const GgufFile& f, const std::string& k, const std::string& what, float dflt) {
  const GgufValue* v = f.find(k);
  if (!v) return dflt;
  try {
    return float(v->as_float());
  } catch (const Error&) {
    fail("%s: metadata '%s' is %s, expected a number", what.c_str(), k.c_str(), gguf_type_name(v->type));
  }
}

}  // namespace

bool voice_compatible(Variant a, Variant b) {
  auto family = [](Variant v) { return v == Variant::Mtl ? 1 : 0; };
  return family(a) == family(b);
}

Voice builtin_voice(const GgufFile& f, const ModelConfig& c) {
  const std::string what = f.path() + ": built-in voice";
  Voice v;
  v.variant = c.variant;
  v.mel_dim = c.flow.mel_dim;
  int64_t frames = 0;
  v.speaker_emb = read_tensor<float>(f, what, "voice.speaker_emb", DType::F32, 1, 0, nullptr);
  v.cond_prompt_tokens = read_tensor<int32_t>(f, what, "voice.cond_prompt_tokens", DType::I32, 1, 0, nullptr);
  std::vector<float> emo = read_tensor<float>(f, what, "voice.emotion_adv", DType::F32, 1, 1, nullptr);
  v.emotion_adv = emo[0];
  v.prompt_token = read_tensor<int32_t>(f, what, "voice.prompt_token", DType::I32, 1, 0, nullptr);
  v.prompt_feat = read_tensor<float>(f, what, "voice.prompt_feat", DType::F32, 2, c.flow.mel_dim, &frames);
  v.embedding = read_tensor<float>(f, what, "voice.embedding", DType::F32, 1, 0, nullptr);
  v.source = "built-in";
  const std::string& p = f.path();
  const size_t slash = p.find_last_of('/');
  v.model = slash == std::string::npos ? p : p.substr(slash + 1);
  v.loudness_lufs = NAN;
  // The converter accepts conds.pt with more T3 prompt tokens than the model uses (warning);
  // the pipeline reserves for it, so only internal consistency is checked here.
  validate_voice(v, what);
  CBX_CHECK(
      int64_t(v.speaker_emb.size()) == c.t3.speaker_embed_size && int64_t(v.embedding.size()) == c.flow.spk_embed_dim,
      "%s: speaker_emb [%zu] / embedding [%zu], the model takes [%d] / [%d]", what.c_str(), v.speaker_emb.size(),
      v.embedding.size(), c.t3.speaker_embed_size, c.flow.spk_embed_dim);
  return v;
}

void validate_voice(const Voice& v, const std::string& what) {
  CBX_CHECK(v.mel_dim > 0, "%s: mel_dim %d", what.c_str(), v.mel_dim);
  CBX_CHECK(!v.speaker_emb.empty(), "%s: speaker_emb is empty", what.c_str());
  CBX_CHECK(!v.embedding.empty(), "%s: embedding is empty", what.c_str());
  CBX_CHECK(!v.prompt_feat.empty() && v.prompt_feat.size() % size_t(v.mel_dim) == 0,
            "%s: prompt_feat holds %zu floats, not a positive multiple of %d mel bins", what.c_str(),
            v.prompt_feat.size(), v.mel_dim);
  check_tokens(v.cond_prompt_tokens, kS3Vocab, what, "cond_prompt_tokens");
  check_tokens(v.prompt_token, kS3Vocab, what, "prompt_token");
  check_finite(v.speaker_emb, what, "speaker_emb");
  check_finite(v.embedding, what, "embedding");
  check_finite(v.prompt_feat, what, "prompt_feat");
  CBX_CHECK(std::isfinite(v.emotion_adv), "%s: emotion_adv is not finite", what.c_str());
  // embed_ref leaves Tm in {2 Tp, 2 Tp + 1}; the flow takes Tm <= 2 (Tp + generated) and the
  // pipeline reserves the vocoder for at most one missing prompt token.
  const int64_t tm = v.n_prompt_frames(), tp = int64_t(v.prompt_token.size());
  CBX_CHECK(tm >= 2 * (tp - 1) && tm <= 2 * tp + 2,
            "%s: prompt_feat has %lld frames for %lld prompt tokens (expected about 2 frames per token)", what.c_str(),
            (long long)tm, (long long)tp);
}

void check_voice(const Voice& v, const ModelConfig& c, const std::string& what) {
  validate_voice(v, what);
  CBX_CHECK(voice_compatible(v.variant, c.variant),
            "%s: a voice built for a %s model cannot condition a %s model (the variants prepare conditionals "
            "differently; rebuild it with `chatterbox voice create REF -m MODEL`)",
            what.c_str(), variant_name(v.variant), variant_name(c.variant));
  CBX_CHECK(int64_t(v.speaker_emb.size()) == c.t3.speaker_embed_size,
            "%s: speaker_emb has %zu values, the model takes %d", what.c_str(), v.speaker_emb.size(),
            c.t3.speaker_embed_size);
  CBX_CHECK(int64_t(v.embedding.size()) == c.flow.spk_embed_dim, "%s: embedding has %zu values, the model takes %d",
            what.c_str(), v.embedding.size(), c.flow.spk_embed_dim);
  CBX_CHECK(v.mel_dim == c.flow.mel_dim, "%s: prompt_feat has %d mel bins, the model takes %d", what.c_str(), v.mel_dim,
            c.flow.mel_dim);
  CBX_CHECK(int64_t(v.cond_prompt_tokens.size()) <= c.t3.cond_prompt_len,
            "%s: %zu T3 prompt tokens, the model takes at most %d", what.c_str(), v.cond_prompt_tokens.size(),
            c.t3.cond_prompt_len);
  check_tokens(v.cond_prompt_tokens, c.flow.vocab, what, "cond_prompt_tokens");
  check_tokens(v.prompt_token, c.flow.vocab, what, "prompt_token");
  const int64_t max_tp = int64_t(std::lround(double(c.pipeline.dec_cond_seconds) * c.pipeline.token_rate));
  CBX_CHECK(int64_t(v.prompt_token.size()) <= max_tp,
            "%s: %zu S3Gen prompt tokens, more than the %lld of a %g s reference", what.c_str(), v.prompt_token.size(),
            (long long)max_tp, double(c.pipeline.dec_cond_seconds));
}

namespace {

GgufWriter voice_writer(const Voice& v) {
  validate_voice(v, "save voice");
  GgufWriter w;
  w.set_string("general.architecture", kVoiceArchitecture);
  w.set_string("general.name", v.source.empty() ? "voice" : v.source);
  w.set_i32(key("format_version"), kVoiceFormatVersion);
  w.set_string(key("variant"), variant_name(v.variant));
  w.set_string(key("source"), v.source);
  w.set_string(key("model"), v.model);
  w.set_i32(key("source_sample_rate"), v.source_sample_rate);
  w.set_i32(key("source_channels"), v.source_channels);
  w.set_u64(key("source_samples"), uint64_t(v.source_samples));
  w.set_u64(key("ref_samples"), uint64_t(v.ref_samples));
  w.set_u64(key("t3_samples"), uint64_t(v.t3_samples));
  w.set_u64(key("s3gen_samples"), uint64_t(v.s3gen_samples));
  w.set_f32(key("loudness_lufs"), v.loudness_lufs);
  w.set_f32(key("loudness_gain"), v.loudness_gain);
  auto f32 = [&](const char* name, const std::vector<float>& d, std::vector<int64_t> shape) {
    w.add_tensor(name, DType::F32, std::move(shape), d.data(), d.size() * sizeof(float));
  };
  auto i32 = [&](const char* name, const std::vector<int32_t>& d) {
    w.add_tensor(name, DType::I32, {int64_t(d.size())}, d.data(), d.size() * sizeof(int32_t));
  };
  f32("voice.speaker_emb", v.speaker_emb, {int64_t(v.speaker_emb.size())});
  i32("voice.cond_prompt_tokens", v.cond_prompt_tokens);
  const std::vector<float> emo{v.emotion_adv};
  f32("voice.emotion_adv", emo, {1});
  i32("voice.prompt_token", v.prompt_token);
  f32("voice.prompt_feat", v.prompt_feat, {v.n_prompt_frames(), int64_t(v.mel_dim)});
  f32("voice.embedding", v.embedding, {int64_t(v.embedding.size())});
  return w;
}

}  // namespace

void save_voice(const Voice& v, const std::string& path) { voice_writer(v).write(path); }

void save_voice(const Voice& v, OutputFile& out) { voice_writer(v).write(out); }

std::vector<uint8_t> voice_to_bytes(const Voice& v) { return voice_writer(v).to_bytes(); }

Voice voice_from_gguf(const GgufFile& f) {
  const std::string& what = f.path();
  const GgufValue* arch = f.find("general.architecture");
  CBX_CHECK(arch && arch->type == GgufType::STRING, "%s: not a voice file (no general.architecture)", what.c_str());
  CBX_CHECK(arch->as_string() == kVoiceArchitecture,
            "%s: not a voice file (general.architecture is '%s', expected '%s'; a model GGUF goes to -m)", what.c_str(),
            arch->as_string().c_str(), kVoiceArchitecture);
  CBX_CHECK(f.has(key("format_version")), "%s: missing metadata '%s'", what.c_str(), key("format_version").c_str());
  const int64_t ver = meta_int(f, key("format_version"), what);
  CBX_CHECK(ver >= 1 && ver <= kVoiceFormatVersion,
            "%s: voice format version %lld is not supported (this build reads 1 .. %d)", what.c_str(), (long long)ver,
            kVoiceFormatVersion);
  const std::string variant = meta_string(f, key("variant"), what);
  CBX_CHECK(!variant.empty(), "%s: missing metadata '%s'", what.c_str(), key("variant").c_str());
  Voice v;
  try {
    v.variant = variant_from_name(variant);
  } catch (const Error&) {
    fail("%s: unknown voice variant '%s'", what.c_str(), variant.c_str());
  }
  int64_t frames = 0;
  v.speaker_emb = read_tensor<float>(f, what, "voice.speaker_emb", DType::F32, 1, 0, nullptr);
  v.cond_prompt_tokens = read_tensor<int32_t>(f, what, "voice.cond_prompt_tokens", DType::I32, 1, 0, nullptr);
  v.emotion_adv = read_tensor<float>(f, what, "voice.emotion_adv", DType::F32, 1, 1, nullptr)[0];
  v.prompt_token = read_tensor<int32_t>(f, what, "voice.prompt_token", DType::I32, 1, 0, nullptr);
  const GgufTensorInfo* feat = f.find_tensor("voice.prompt_feat");
  CBX_CHECK(feat && feat->ndim == 2, "%s: tensor 'voice.prompt_feat' missing or not [frames, mel]", what.c_str());
  v.mel_dim = int32_t(feat->shape[1]);
  v.prompt_feat = read_tensor<float>(f, what, "voice.prompt_feat", DType::F32, 2, v.mel_dim, &frames);
  v.embedding = read_tensor<float>(f, what, "voice.embedding", DType::F32, 1, 0, nullptr);
  v.source = meta_string(f, key("source"), what);
  v.model = meta_string(f, key("model"), what);
  v.source_sample_rate = int32_t(meta_int(f, key("source_sample_rate"), what));
  v.source_channels = int32_t(meta_int(f, key("source_channels"), what));
  v.source_samples = meta_int(f, key("source_samples"), what);
  v.ref_samples = meta_int(f, key("ref_samples"), what);
  v.t3_samples = meta_int(f, key("t3_samples"), what);
  v.s3gen_samples = meta_int(f, key("s3gen_samples"), what);
  v.loudness_lufs = meta_float(f, key("loudness_lufs"), what, NAN);
  v.loudness_gain = meta_float(f, key("loudness_gain"), what, 1.0f);
  validate_voice(v, what);
  return v;
}

Voice load_voice(const std::string& path) {
  std::unique_ptr<GgufFile> f = GgufFile::open(path);
  return voice_from_gguf(*f);
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CBX_CHECK(in, "'%s': cannot open (%s)", path.c_str(), std::strerror(errno));
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace cbx
