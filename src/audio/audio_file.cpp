#include "audio/audio_file.h"

#include <sndfile.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "audio/resample.h"
#include "core/error.h"
#include "core/output_file.h"

namespace cbx {
namespace {

struct SfCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SfPtr = std::unique_ptr<SNDFILE, SfCloser>;

// Frames per read call: bounded scratch whatever the file length.
constexpr sf_count_t kChunkFrames = 16384;

AudioData decode(SNDFILE* sf, const SF_INFO& info, const std::string& name, double max_seconds) {
  CBX_CHECK(info.channels > 0 && info.channels <= 256, "audio '%s': bad channel count %d", name.c_str(), info.channels);
  CBX_CHECK(info.samplerate > 0 && info.samplerate <= kMaxSampleRate, "audio '%s': bad sample rate %d Hz (1 to %d)",
            name.c_str(), info.samplerate, kMaxSampleRate);
  AudioData out;
  out.sample_rate = info.samplerate;
  out.file_channels = info.channels;
  // Frame counts of some formats (MP3, Ogg) are estimates: read until EOF.
  sf_count_t limit = -1;
  if (max_seconds > 0) limit = sf_count_t(std::floor(max_seconds * info.samplerate));
  if (info.frames > 0) {
    sf_count_t expect = limit >= 0 ? std::min(limit, info.frames) : info.frames;
    if (expect < (sf_count_t(1) << 31)) out.samples.reserve(size_t(expect));
  }
  const int ch = info.channels;
  std::vector<float> buf(size_t(kChunkFrames) * ch);
  const float inv = 1.0f / float(ch);
  for (;;) {
    sf_count_t want = kChunkFrames;
    if (limit >= 0) {
      sf_count_t left = limit - sf_count_t(out.samples.size());
      if (left <= 0) {
        out.truncated = info.frames <= 0 || info.frames > limit;
        break;
      }
      want = std::min(want, left);
    }
    sf_count_t got = sf_readf_float(sf, buf.data(), want);
    if (got <= 0) break;
    if (ch == 1) {
      out.samples.insert(out.samples.end(), buf.begin(), buf.begin() + got);
    } else {
      for (sf_count_t i = 0; i < got; ++i) {
        const float* f = &buf[size_t(i) * ch];
        float s = 0.0f;
        for (int c = 0; c < ch; ++c) s += f[c];
        out.samples.push_back(s * inv);
      }
    }
  }
  int err = sf_error(sf);
  CBX_CHECK(err == SF_ERR_NO_ERROR, "audio '%s': decode error after %zu frames: %s", name.c_str(), out.samples.size(),
            sf_error_number(err));
  CBX_CHECK(!out.samples.empty(), "audio '%s': file holds no audio samples", name.c_str());
  for (float v : out.samples) CBX_CHECK(std::isfinite(v), "audio '%s': non-finite sample value", name.c_str());
  return out;
}

// In-memory virtual I/O for read_audio_memory.
struct MemFile {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
};
sf_count_t mem_len(void* u) { return static_cast<MemFile*>(u)->size; }
sf_count_t mem_seek(sf_count_t off, int whence, void* u) {
  auto* m = static_cast<MemFile*>(u);
  sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size;
  sf_count_t p = base + off;
  if (p < 0 || p > m->size) return -1;
  m->pos = p;
  return p;
}
sf_count_t mem_read(void* ptr, sf_count_t count, void* u) {
  auto* m = static_cast<MemFile*>(u);
  sf_count_t n = std::max<sf_count_t>(0, std::min(count, m->size - m->pos));
  if (n) std::memcpy(ptr, m->data + m->pos, size_t(n));
  m->pos += n;
  return n;
}
sf_count_t mem_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t mem_tell(void* u) { return static_cast<MemFile*>(u)->pos; }

void put_u16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(uint8_t(v));
  b.push_back(uint8_t(v >> 8));
}
void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  put_u16(b, v & 0xFFFF);
  put_u16(b, v >> 16);
}

}  // namespace

AudioData read_audio(const std::string& path, double max_seconds) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail("audio '%s': cannot open: %s", path.c_str(), std::strerror(errno));
  CBX_CHECK(S_ISREG(st.st_mode), "audio '%s': not a regular file", path.c_str());
  CBX_CHECK(st.st_size > 0, "audio '%s': file is empty (0 bytes)", path.c_str());
  SF_INFO info{};
  SfPtr sf(sf_open(path.c_str(), SFM_READ, &info));
  if (!sf) fail("audio '%s': cannot decode (corrupt or unsupported format): %s", path.c_str(), sf_strerror(nullptr));
  return decode(sf.get(), info, path, max_seconds);
}

AudioData read_audio_memory(const void* data, size_t size, const std::string& name, double max_seconds) {
  CBX_CHECK(data && size > 0, "audio '%s': empty buffer", name.c_str());
  MemFile m{static_cast<const uint8_t*>(data), sf_count_t(size), 0};
  SF_VIRTUAL_IO io{mem_len, mem_seek, mem_read, mem_write, mem_tell};
  SF_INFO info{};
  SfPtr sf(sf_open_virtual(&io, SFM_READ, &info, &m));
  if (!sf) fail("audio '%s': cannot decode (corrupt or unsupported format): %s", name.c_str(), sf_strerror(nullptr));
  return decode(sf.get(), info, name, max_seconds);
}

AudioData load_audio(const std::string& path, int target_rate, double max_seconds) {
  CBX_CHECK(target_rate > 0, "audio '%s': bad target sample rate %d", path.c_str(), target_rate);
  AudioData a = read_audio(path, max_seconds);
  if (a.sample_rate != target_rate) {
    a.samples = resample_soxr(a.samples.data(), a.samples.size(), a.sample_rate, target_rate);
    a.sample_rate = target_rate;
  }
  return a;
}

void float_to_pcm16(const float* x, size_t n, int16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    if (!(v == v)) v = 0.0f;  // NaN -> silence
    v = std::min(1.0f, std::max(-1.0f, v));
    out[i] = int16_t(std::lround(v * 32767.0f));
  }
}

std::vector<uint8_t> wav_header_pcm16(int sample_rate, int64_t num_samples) {
  CBX_CHECK(sample_rate > 0 && sample_rate <= kMaxSampleRate, "wav: bad sample rate %d Hz (1 to %d)", sample_rate,
            kMaxSampleRate);
  uint32_t data_bytes = 0xFFFFFFFFu, riff_bytes = 0xFFFFFFFFu;
  if (num_samples >= 0) {
    CBX_CHECK(num_samples <= (int64_t(0xFFFFFFFFu) - 36) / 2, "wav: %lld samples exceed the 4 GiB RIFF limit",
              (long long)num_samples);
    data_bytes = uint32_t(num_samples * 2);
    riff_bytes = 36 + data_bytes;
  }
  std::vector<uint8_t> h;
  h.reserve(44);
  const char* riff = "RIFF";
  h.insert(h.end(), riff, riff + 4);
  put_u32(h, riff_bytes);
  const char* wave = "WAVEfmt ";
  h.insert(h.end(), wave, wave + 8);
  put_u32(h, 16);  // fmt chunk size
  put_u16(h, 1);   // PCM
  put_u16(h, 1);   // mono
  put_u32(h, uint32_t(sample_rate));
  put_u32(h, uint32_t(sample_rate) * 2);  // byte rate
  put_u16(h, 2);                          // block align
  put_u16(h, 16);                         // bits per sample
  const char* data = "data";
  h.insert(h.end(), data, data + 4);
  put_u32(h, data_bytes);
  return h;
}

std::vector<uint8_t> encode_pcm16(const float* x, size_t n) {
  std::vector<uint8_t> b(n * 2);
  std::vector<int16_t> s(std::min<size_t>(n, 4096));
  for (size_t i = 0; i < n; i += s.size()) {
    size_t m = std::min(s.size(), n - i);
    float_to_pcm16(x + i, m, s.data());
    for (size_t j = 0; j < m; ++j) {
      b[2 * (i + j)] = uint8_t(uint16_t(s[j]));
      b[2 * (i + j) + 1] = uint8_t(uint16_t(s[j]) >> 8);
    }
  }
  return b;
}

std::vector<uint8_t> encode_wav_pcm16(const float* x, size_t n, int sample_rate) {
  std::vector<uint8_t> out = wav_header_pcm16(sample_rate, int64_t(n));
  std::vector<uint8_t> pcm = encode_pcm16(x, n);
  out.insert(out.end(), pcm.begin(), pcm.end());
  return out;
}

void write_wav_pcm16(const std::string& path, const float* x, size_t n, int sample_rate) {
  OutputFile out(path, {}, "wav");
  out.write(encode_wav_pcm16(x, n, sample_rate));
  out.commit();
}

}  // namespace cbx
