// libFuzzer target for the audio the server writes (audio/audio_encode.h): WAV and raw PCM, whole
// (encode_audio) and streamed (AudioStreamEncoder, chunked as the input says), read back. Input:
// 4 bytes sample rate (little-endian), 1 byte chunk length, then float32 samples as raw bits (so
// NaN, +-inf, denormals and out-of-range values all occur). Every sample count and rate either
// encodes or throws cbx::Error; what encodes must read back (read_audio_memory) with the same rate
// and length and exactly the samples float_to_pcm16 promises (clipped, NaN as silence), raw PCM
// must be those int16 values, and the streamed bytes must equal the whole file's but for the WAV
// header's length fields ("unknown" in a stream).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "audio/audio_encode.h"
#include "audio/audio_file.h"
#include "core/error.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_audio_roundtrip: %s\n", what.c_str());
  std::abort();
}

std::vector<uint8_t> stream(cbx::AudioFormat f, int rate, const std::vector<float>& x, size_t chunk) {
  cbx::AudioStreamEncoder enc(f, rate);
  std::vector<uint8_t> out;
  for (size_t i = 0; i < x.size(); i += chunk) {
    const std::vector<uint8_t> b = enc.push(x.data() + i, std::min(chunk, x.size() - i));
    out.insert(out.end(), b.begin(), b.end());
  }
  const std::vector<uint8_t> b = enc.finish();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  uint32_t rate_bits;
  std::memcpy(&rate_bits, data, 4);
  const int rate = int(rate_bits);
  const size_t chunk = size_t(data[4]) + 1;
  std::vector<float> x((size - 5) / 4);
  if (!x.empty()) std::memcpy(x.data(), data + 5, x.size() * 4);

  std::vector<int16_t> pcm(x.size());
  if (!x.empty()) cbx::float_to_pcm16(x.data(), x.size(), pcm.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float c = std::isnan(x[i]) ? 0.f : std::fmin(1.f, std::fmax(-1.f, x[i]));
    if (std::abs(int(pcm[i]) - int(std::lround(c * 32767.f))) > 0) finding("float_to_pcm16 does not clip and round");
  }

  std::vector<uint8_t> wav;
  try {
    wav = cbx::encode_audio(x.data(), x.size(), rate, cbx::AudioFormat::Wav);
  } catch (const cbx::Error&) {
    // Refused (no samples, a sample rate WAV cannot hold): the stream must refuse it as well.
    try {
      (void)stream(cbx::AudioFormat::Wav, rate, x, chunk);
    } catch (const cbx::Error&) {
      return 0;
    }
    finding("encode_audio refuses what the stream encoder writes");
  }
  if (wav.size() != 44 + 2 * x.size()) finding("WAV size");
  cbx::AudioData a;
  try {
    a = cbx::read_audio_memory(wav.data(), wav.size(), "fuzz.wav");
  } catch (const cbx::Error& e) {
    finding(std::string("our WAV does not read back: ") + e.what());
  }
  if (a.sample_rate != rate || a.file_channels != 1 || a.samples.size() != x.size()) finding("WAV rate or length");
  for (size_t i = 0; i < x.size(); ++i)
    if (a.samples[i] != float(pcm[i]) / 32768.f) finding("WAV sample " + std::to_string(i));

  const std::vector<uint8_t> raw = cbx::encode_audio(x.data(), x.size(), rate, cbx::AudioFormat::Pcm16);
  if (raw.size() != 2 * x.size() || std::memcmp(raw.data(), wav.data() + 44, raw.size()) != 0)
    finding("raw PCM differs from the WAV's samples");

  std::vector<uint8_t> ws, ps;
  try {
    ws = stream(cbx::AudioFormat::Wav, rate, x, chunk);
    ps = stream(cbx::AudioFormat::Pcm16, rate, x, chunk);
  } catch (const cbx::Error& e) {
    finding(std::string("the stream encoder refuses what encode_audio writes: ") + e.what());
  }
  if (ps != raw) finding("streamed PCM differs");
  if (ws.size() != wav.size() || std::memcmp(ws.data() + 44, wav.data() + 44, raw.size()) != 0 ||
      std::memcmp(ws.data() + 8, wav.data() + 8, 32) != 0)
    finding("streamed WAV differs");
  try {
    a = cbx::read_audio_memory(ws.data(), ws.size(), "fuzz-stream.wav");
  } catch (const cbx::Error& e) {
    finding(std::string("our streamed WAV does not read back: ") + e.what());
  }
  if (a.sample_rate != rate || a.samples.size() != x.size()) finding("streamed WAV rate or length");
  return 0;
}
