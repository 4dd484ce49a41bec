// conds.pt: the built-in voice, torch.save({"t3": T3Cond.__dict__, "gen": ref_dict})
// (tts_turbo.py / mtl_tts.py Conditionals.save; T3Cond field order from cond_enc.py;
// ref_dict keys from s3gen.py S3Token2Mel.embed_ref).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "convert/torch_pt.h"
#include "mkckpt.h"

namespace mk {
namespace {

cbx::CkptTensor f32_tensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  cbx::CkptTensor t;
  t.dtype = cbx::DType::F32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

cbx::CkptTensor i64_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  cbx::CkptTensor t;
  t.dtype = cbx::DType::I64;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 8);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// S3 speech tokens in [0, 6561): a reference clip starts with a little silence (4299).
std::vector<int64_t> speech_tokens(Rng& r, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (i < 3) ? 4299 : r.below(6561);
  return v;
}

}  // namespace

void write_conds(const Options& o) {
  const bool mtl = o.variant == cbx::CkptVariant::Mtl;
  const cbx::UpstreamDims d = cbx::upstream_dims(o.variant, o.tiny);
  // Full: T3 prompt of ENC_COND_LEN (15 s Turbo / 6 s MTL at 25 tokens/s), S3Gen prompt of
  // DEC_COND_LEN = 10 s -> 250 tokens, 500 mel frames. Tiny: shorter prompts.
  const int64_t P = o.tiny ? (mtl ? 50 : 75) : (mtl ? 150 : 375);
  const int64_t Tp = o.tiny ? 50 : 250, Tm = 2 * Tp;
  Rng r(stream_key(o.seed, "file", "conds.pt"));

  // VE embedding: ReLU then L2 normalisation -> non-negative unit vector.
  std::vector<float> spk(size_t(d.speaker_dim));
  double ss = 0;
  for (auto& x : spk) {
    x = std::max(0.0f, r.normal());
    ss += double(x) * x;
  }
  for (auto& x : spk) x = float(x / std::sqrt(std::max(ss, 1e-12)));

  // 24 kHz log-mel (natural log, floor log(1e-5)): smooth in time, louder in low bins.
  std::vector<float> feat(size_t(Tm * d.mel_bins));
  std::vector<float> state(size_t(d.mel_bins), 0.0f);
  for (int64_t t = 0; t < Tm; ++t) {
    for (int64_t b = 0; b < d.mel_bins; ++b) {
      float& s = state[size_t(b)];
      s = 0.85f * s + 0.5f * r.normal();
      const float mean = -3.0f - 5.0f * float(b) / float(d.mel_bins);
      feat[size_t(t * d.mel_bins + b)] = std::clamp(mean + 1.5f * s, -11.5129f, 2.5f);
    }
  }
  std::vector<float> xvec(size_t(d.xvector_dim));  // CAMPPlus output after affine-free BN
  for (auto& x : xvec) x = r.normal();

  const float exaggeration = 0.5f;
  auto t3 = cbx::py_dict({
      {"speaker_emb", cbx::py_tensor(f32_tensor({1, d.speaker_dim}, spk))},
      {"clap_emb", cbx::py_none()},
      {"cond_prompt_speech_tokens", cbx::py_tensor(i64_tensor({1, P}, speech_tokens(r, P)))},
      {"cond_prompt_speech_emb", cbx::py_none()},
      {"emotion_adv", cbx::py_tensor(f32_tensor({1, 1, 1}, {exaggeration}))},
  });
  auto gen = cbx::py_dict({
      {"prompt_token", cbx::py_tensor(i64_tensor({1, Tp}, speech_tokens(r, Tp)))},
      {"prompt_token_len", cbx::py_tensor(i64_tensor({1}, {Tp}))},
      {"prompt_feat", cbx::py_tensor(f32_tensor({1, Tm, d.mel_bins}, feat))},
      {"prompt_feat_len", cbx::py_none()},
      {"embedding", cbx::py_tensor(f32_tensor({1, d.xvector_dim}, xvec))},
  });
  cbx::save_torch_pt(o.dir + "/conds.pt", *cbx::py_dict({{"t3", t3}, {"gen", gen}}));
}

}  // namespace mk
