#include "audio/audio_encode.h"

#include <sndfile.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "audio/audio_file.h"
#include "core/error.h"
#include "core/output_file.h"

namespace cbx {
namespace {

struct FormatInfo {
  AudioFormat format;
  const char* name;
  const char* extension;
  const char* mime;
  int sf_format;  // libsndfile container | codec; 0: written here, not by libsndfile
};

const FormatInfo kFormats[] = {
    {AudioFormat::Wav, "wav", ".wav", "audio/wav", 0},
    {AudioFormat::WavFloat, "wav-float", ".wav", "audio/wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT},
    {AudioFormat::Flac, "flac", ".flac", "audio/flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16},
    {AudioFormat::OggVorbis, "ogg", ".ogg", "audio/ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS},
    {AudioFormat::Opus, "opus", ".opus", "audio/ogg; codecs=opus", SF_FORMAT_OGG | SF_FORMAT_OPUS},
    {AudioFormat::Mp3, "mp3", ".mp3", "audio/mpeg", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III},
    {AudioFormat::Pcm16, "pcm", ".pcm", "audio/pcm", 0},
};

// Aliases accepted besides the canonical names.
const struct {
  const char* alias;
  AudioFormat format;
} kNameAliases[] = {{"wav32f", AudioFormat::WavFloat}, {"vorbis", AudioFormat::OggVorbis}, {"raw", AudioFormat::Pcm16}};

const struct {
  const char* ext;
  AudioFormat format;
} kExtensions[] = {{".wav", AudioFormat::Wav},       {".flac", AudioFormat::Flac}, {".ogg", AudioFormat::OggVorbis},
                   {".oga", AudioFormat::OggVorbis}, {".opus", AudioFormat::Opus}, {".mp3", AudioFormat::Mp3},
                   {".pcm", AudioFormat::Pcm16},     {".raw", AudioFormat::Pcm16}};

const FormatInfo& info_of(AudioFormat f) {
  for (const FormatInfo& i : kFormats)
    if (i.format == f) return i;
  fail("audio format: bad enum value %d", int(f));
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Compression settings (SFC_SET_COMPRESSION_LEVEL, 0 = best quality .. 1 = smallest), as
// libsndfile 1.2 maps them: FLAC level = round(8 c); Vorbis quality = 1 - c; Opus bitrate =
// (1 - c) * 250000 + 6000 bit/s; LAME VBR quality = 10 c.
constexpr double kFlacLevel = 5.0 / 8.0;                            // FLAC -5
constexpr double kVorbisLevel = 0.5;                                // quality 0.5
constexpr double kOpusLevel = 1.0 - (48000.0 - 6000.0) / 250000.0;  // 48 kbit/s
constexpr double kMp3Level = 0.4;                                   // lame -V 4 (its default)
constexpr double kOpusStreamPageMs = 100.0;

// Streamed MP3 is constant-bitrate (see audio_format_streamable): libsndfile maps level c to
// 320 - 288 c kbit/s (MPEG-1, 32-48 kHz), 160 - 152 c (MPEG-2, 16-24 kHz), 64 - 56 c (MPEG-2.5).
// Targets: 128 kbit/s, 64 kbit/s, 64 kbit/s.
double mp3_cbr_level(int sample_rate) {
  if (sample_rate >= 32000) return (320.0 - 128.0) / 288.0;
  if (sample_rate >= 16000) return (160.0 - 64.0) / 152.0;
  return 0.0;
}

void check_rate(AudioFormat f, int sample_rate) {
  CBX_CHECK(sample_rate > 0 && sample_rate <= 655350, "%s encoder: bad sample rate %d Hz", audio_format_name(f),
            sample_rate);
  if (f == AudioFormat::Opus) {
    const int ok[] = {8000, 12000, 16000, 24000, 48000};
    CBX_CHECK(std::find(std::begin(ok), std::end(ok), sample_rate) != std::end(ok),
              "opus encoder: sample rate %d Hz not supported (Opus takes 8000, 12000, 16000, "
              "24000 or 48000 Hz; resample first)",
              sample_rate);
  } else if (f == AudioFormat::Mp3) {
    const int ok[] = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000};
    CBX_CHECK(std::find(std::begin(ok), std::end(ok), sample_rate) != std::end(ok),
              "mp3 encoder: sample rate %d Hz not supported (MP3 takes 8000, 11025, 12000, 16000, "
              "22050, 24000, 32000, 44100 or 48000 Hz; resample first)",
              sample_rate);
  }
}

// Output of libsndfile's virtual I/O. The bytes from `base` on are still held in `pending`;
// take() hands them out and advances base. libsndfile may seek back to fix headers: a write
// landing in the held part patches it; a write that starts in the part already handed out
// cannot be honoured and is dropped whole, so what went out stays valid.
struct ByteSink {
  std::vector<uint8_t> pending;
  sf_count_t base = 0;  // file offset of pending[0]
  sf_count_t pos = 0;
  sf_count_t end = 0;

  std::vector<uint8_t> take() {
    std::vector<uint8_t> out;
    out.swap(pending);
    base = end;
    return out;
  }
};

sf_count_t sink_len(void* u) { return static_cast<ByteSink*>(u)->end; }
sf_count_t sink_seek(sf_count_t off, int whence, void* u) {
  auto* s = static_cast<ByteSink*>(u);
  sf_count_t from = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->end;
  sf_count_t p = from + off;
  if (p < 0 || p > s->end) return -1;
  s->pos = p;
  return p;
}
sf_count_t sink_read(void*, sf_count_t, void*) { return 0; }  // write-only
sf_count_t sink_write(const void* ptr, sf_count_t count, void* u) {
  auto* s = static_cast<ByteSink*>(u);
  if (count <= 0) return 0;
  if (s->pos >= s->base) {
    size_t at = size_t(s->pos - s->base);
    if (at + size_t(count) > s->pending.size()) s->pending.resize(at + size_t(count));
    std::memcpy(s->pending.data() + at, ptr, size_t(count));
  }
  s->pos += count;
  s->end = std::max(s->end, s->pos);
  return count;
}
sf_count_t sink_tell(void* u) { return static_cast<ByteSink*>(u)->pos; }

// One libsndfile encoder writing mono frames into a ByteSink. Input reaches libsndfile in
// fixed blocks of kBlock samples (the remainder waits for more input or close()), so the bytes
// do not depend on how the caller chunked the input: libvorbis's output does otherwise.
class SfWriter {
 public:
  static constexpr size_t kBlock = 1024;

  // streaming: settings for a stream whose start goes out before the end is known (Opus pages
  // of 100 ms instead of 1 s; MP3 at a constant bitrate, see audio_format_streamable).
  SfWriter(AudioFormat f, int sample_rate, bool streaming) : format_(f) {
    check_rate(f, sample_rate);
    const char* name = audio_format_name(f);
    CBX_CHECK(audio_format_available(f), "%s encoder: the linked libsndfile (%s) was built without this format", name,
              sf_version_string());
    SF_INFO info{};
    info.samplerate = sample_rate;
    info.channels = 1;
    info.format = info_of(f).sf_format;
    CBX_CHECK(sf_format_check(&info), "%s encoder: libsndfile rejects mono at %d Hz", name, sample_rate);
    io_ = SF_VIRTUAL_IO{sink_len, sink_seek, sink_read, sink_write, sink_tell};
    sf_ = sf_open_virtual(&io_, SFM_WRITE, &info, &sink_);
    if (!sf_) fail("%s encoder: cannot open at %d Hz: %s", name, sample_rate, sf_strerror(nullptr));
    double level = -1.0;
    switch (f) {
      case AudioFormat::Flac:
        level = kFlacLevel;
        break;
      case AudioFormat::OggVorbis:
        level = kVorbisLevel;
        break;
      case AudioFormat::Opus:
        level = kOpusLevel;
        break;
      case AudioFormat::Mp3:
        level = streaming ? mp3_cbr_level(sample_rate) : kMp3Level;
        break;
      default:
        break;
    }
    if (level >= 0.0) command(SFC_SET_COMPRESSION_LEVEL, &level, sizeof(level), "compression level");
    if (streaming && f == AudioFormat::Mp3) {
      // After the level: libsndfile re-reads the saved level as a bitrate when the mode changes.
      int mode = SF_BITRATE_MODE_CONSTANT;
      command(SFC_SET_BITRATE_MODE, &mode, sizeof(mode), "constant bitrate");
    }
    if (streaming && f == AudioFormat::Opus) {
      // Not checked: libsndfile 1.2.0 returns SF_FALSE even after setting it (clamped to
      // [50, 1600] ms); the stream tests see the short pages.
      double ms = kOpusStreamPageMs;
      sf_command(sf_, SFC_SET_OGG_PAGE_LATENCY, &ms, sizeof(ms));
    }
    pending_.reserve(kBlock);
  }
  ~SfWriter() {
    if (sf_) sf_close(sf_);
  }
  SfWriter(const SfWriter&) = delete;
  SfWriter& operator=(const SfWriter&) = delete;

  void write(const float* x, size_t n) {
    CBX_CHECK(sf_, "%s encoder: already finished", audio_format_name(format_));
    for (size_t i = 0; i < n;) {
      size_t m = std::min(kBlock - pending_.size(), n - i);
      pending_.insert(pending_.end(), x + i, x + i + m);
      i += m;
      if (pending_.size() == kBlock) flush_block();
    }
  }

  std::vector<uint8_t> take() { return sink_.take(); }

  // Writes the last partial block, flushes the codec (libsndfile writes its trailers and
  // header fix-ups) and closes.
  void close() {
    CBX_CHECK(sf_, "%s encoder: already finished", audio_format_name(format_));
    flush_block();
    int err = sf_close(sf_);
    sf_ = nullptr;
    CBX_CHECK(err == 0, "%s encoder: closing failed: %s", audio_format_name(format_), sf_error_number(err));
  }

 private:
  void command(int cmd, void* data, int size, const char* what) {
    if (sf_command(sf_, cmd, data, size) == SF_TRUE) return;
    sf_close(sf_);
    sf_ = nullptr;
    fail("%s encoder: libsndfile refused the %s setting", audio_format_name(format_), what);
  }

  // Clips (NaN -> 0) and hands pending_ to libsndfile; FLAC gets float_to_pcm16's 16-bit
  // samples so it holds exactly what WAV would.
  void flush_block() {
    const size_t m = pending_.size();
    if (m == 0) return;
    sf_count_t wrote;
    if (format_ == AudioFormat::Flac) {
      int16_t pcm[kBlock];
      float_to_pcm16(pending_.data(), m, pcm);
      wrote = sf_writef_short(sf_, pcm, sf_count_t(m));
    } else {
      for (float& v : pending_) v = v == v ? std::min(1.0f, std::max(-1.0f, v)) : 0.0f;
      wrote = sf_writef_float(sf_, pending_.data(), sf_count_t(m));
    }
    CBX_CHECK(wrote == sf_count_t(m), "%s encoder: write failed after %lld samples: %s", audio_format_name(format_),
              (long long)written_, sf_strerror(sf_));
    written_ += int64_t(m);
    pending_.clear();
  }

  AudioFormat format_;
  ByteSink sink_;
  SF_VIRTUAL_IO io_{};
  SNDFILE* sf_ = nullptr;
  std::vector<float> pending_;
  int64_t written_ = 0;
};

bool sf_lists(int command_count, int command_get, int want) {
  int count = 0;
  sf_command(nullptr, command_count, &count, sizeof(count));
  for (int k = 0; k < count; ++k) {
    SF_FORMAT_INFO fi{};
    fi.format = k;
    if (sf_command(nullptr, command_get, &fi, sizeof(fi)) == 0 && fi.format == want) return true;
  }
  return false;
}

}  // namespace

AudioFormat audio_format_from_name(const std::string& name) {
  std::string n = lower(name);
  for (const FormatInfo& i : kFormats)
    if (n == i.name) return i.format;
  for (const auto& a : kNameAliases)
    if (n == a.alias) return a.format;
  fail("unknown audio format '%s' (supported: wav, wav-float, flac, ogg, opus, mp3, pcm)", name.c_str());
}

AudioFormat audio_format_from_path(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find_last_of('.');
  // A leading dot (".wav") names a hidden file, not an extension.
  if (dot == std::string::npos || dot == 0 || dot + 1 == base.size())
    fail(
        "output '%s' has no file extension to choose the audio format from (supported: .wav "
        ".flac .ogg .oga .opus .mp3 .pcm .raw)",
        path.c_str());
  std::string ext = lower(base.substr(dot));
  for (const auto& e : kExtensions)
    if (ext == e.ext) return e.format;
  fail(
      "output '%s': unsupported audio file extension '%s' (supported: .wav .flac .ogg .oga .opus "
      ".mp3 .pcm .raw)",
      path.c_str(), base.substr(dot).c_str());
}

const char* audio_format_name(AudioFormat f) { return info_of(f).name; }
const char* audio_format_extension(AudioFormat f) { return info_of(f).extension; }
const char* audio_format_mime(AudioFormat f) { return info_of(f).mime; }

bool audio_format_available(AudioFormat f) {
  int fmt = info_of(f).sf_format;
  if (fmt == 0) return true;
  return sf_lists(SFC_GET_FORMAT_MAJOR_COUNT, SFC_GET_FORMAT_MAJOR, fmt & SF_FORMAT_TYPEMASK) &&
         sf_lists(SFC_GET_FORMAT_SUBTYPE_COUNT, SFC_GET_FORMAT_SUBTYPE, fmt & SF_FORMAT_SUBMASK);
}

std::vector<uint8_t> encode_audio(const float* x, size_t n, int sample_rate, AudioFormat f) {
  // No format here makes a useful file of nothing (FLAC and MP3 would be 0 bytes).
  CBX_CHECK(n > 0, "%s encoder: no samples to encode", audio_format_name(f));
  CBX_CHECK(x, "%s encoder: null samples", audio_format_name(f));
  if (f == AudioFormat::Wav) return encode_wav_pcm16(x, n, sample_rate);
  if (f == AudioFormat::Pcm16) return encode_pcm16(x, n);
  SfWriter w(f, sample_rate, false);
  w.write(x, n);
  w.close();
  return w.take();
}

void write_audio(const std::string& path, const float* x, size_t n, int sample_rate, AudioFormat f) {
  OutputFile out(path, {}, audio_format_name(f));  // checked before the encoding
  out.write(encode_audio(x, n, sample_rate, f));
  out.commit();
}

std::vector<uint8_t> wav_stream_header(int sample_rate) { return wav_header_pcm16(sample_rate, -1); }

bool audio_format_streamable(AudioFormat f) { return f != AudioFormat::WavFloat; }

struct AudioStreamEncoder::Impl {
  int sample_rate = 0;
  bool header_sent = false;  // wav: the stream header goes out with the first bytes
  bool finished = false;
  size_t samples = 0;
  std::unique_ptr<SfWriter> sf;  // the libsndfile formats
};

AudioStreamEncoder::AudioStreamEncoder(AudioFormat f, int sample_rate) : format_(f), impl_(new Impl) {
  CBX_CHECK(audio_format_streamable(f),
            "%s cannot be streamed (its header needs the final length; use wav, pcm, flac, ogg, "
            "opus or mp3)",
            audio_format_name(f));
  CBX_CHECK(sample_rate > 0 && sample_rate <= kMaxSampleRate, "%s stream: bad sample rate %d Hz (1 to %d)",
            audio_format_name(f), sample_rate, kMaxSampleRate);
  impl_->sample_rate = sample_rate;
  if (f != AudioFormat::Wav && f != AudioFormat::Pcm16) impl_->sf = std::make_unique<SfWriter>(f, sample_rate, true);
}

AudioStreamEncoder::~AudioStreamEncoder() = default;

std::vector<uint8_t> AudioStreamEncoder::push(const float* x, size_t n) {
  CBX_CHECK(!impl_->finished, "%s stream: push after finish", audio_format_name(format_));
  CBX_CHECK(x || n == 0, "%s stream: null samples", audio_format_name(format_));
  impl_->samples += n;
  if (impl_->sf) {
    impl_->sf->write(x, n);
    return impl_->sf->take();
  }
  std::vector<uint8_t> out;
  if (format_ == AudioFormat::Wav && !impl_->header_sent) {
    out = wav_stream_header(impl_->sample_rate);
    impl_->header_sent = true;
  }
  std::vector<uint8_t> pcm = encode_pcm16(x, n);
  out.insert(out.end(), pcm.begin(), pcm.end());
  return out;
}

std::vector<uint8_t> AudioStreamEncoder::finish() {
  CBX_CHECK(!impl_->finished, "%s stream: finish called twice", audio_format_name(format_));
  impl_->finished = true;
  CBX_CHECK(impl_->samples > 0, "%s stream: finished without samples", audio_format_name(format_));
  if (impl_->sf) {
    impl_->sf->close();
    return impl_->sf->take();
  }
  if (format_ == AudioFormat::Wav && !impl_->header_sent) {
    impl_->header_sent = true;
    return wav_stream_header(impl_->sample_rate);
  }
  return {};
}

}  // namespace cbx
