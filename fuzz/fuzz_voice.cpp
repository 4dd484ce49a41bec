// libFuzzer target for .voice files (pipeline/voice.h): any input must either be read as a voice
// or throw cbx::Error. A voice that reads must pass validation, be checkable against a model
// config (which may refuse it with cbx::Error), and survive a write/read round trip bit-exactly.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"
#include "pipeline/voice.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_voice: %s\n", what);
  std::abort();
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cbx::Voice v;
  try {
    std::unique_ptr<cbx::GgufFile> f = cbx::GgufFile::from_memory(data, size, "fuzz.voice");
    v = cbx::voice_from_gguf(*f);
  } catch (const cbx::Error&) {
    return 0;
  }
  try {
    cbx::validate_voice(v, "fuzz");
  } catch (const cbx::Error&) {
    finding("voice_from_gguf returned a voice validate_voice refuses");
  }
  for (cbx::Variant var : {cbx::Variant::Turbo, cbx::Variant::Mtl}) {
    try {
      cbx::check_voice(v, cbx::default_config(var), "fuzz");
    } catch (const cbx::Error&) {
    }
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = cbx::voice_to_bytes(v);
  } catch (const cbx::Error&) {
    finding("a voice that was read cannot be written");
  }
  cbx::Voice r;
  try {
    std::unique_ptr<cbx::GgufFile> f = cbx::GgufFile::from_memory(bytes.data(), bytes.size(), "rewritten.voice");
    r = cbx::voice_from_gguf(*f);
  } catch (const cbx::Error&) {
    finding("a rewritten voice does not read back");
  }
  if (r.variant != v.variant || !same_bits(r.speaker_emb, v.speaker_emb) ||
      !same_bits(r.cond_prompt_tokens, v.cond_prompt_tokens) || !same_bits(r.prompt_token, v.prompt_token) ||
      !same_bits(r.prompt_feat, v.prompt_feat) || !same_bits(r.embedding, v.embedding) || r.mel_dim != v.mel_dim ||
      std::memcmp(&r.emotion_adv, &v.emotion_adv, sizeof(float)) != 0 || r.source != v.source ||
      r.source_samples != v.source_samples)
    finding("round trip mismatch");
  return 0;
}
