// Audio encoders (src/audio/audio_encode.h): every format encoded, decoded back with libsndfile
// and compared with the input; the stream encoder against the whole-buffer one; format names.
#include <gtest/gtest.h>
#include <sndfile.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "audio/audio_encode.h"
#include "audio/audio_file.h"
#include "core/error.h"

using namespace cbx;

namespace {

constexpr int kRate = 24000;
const size_t kLen = size_t(1.7 * kRate);  // 40800 samples

const AudioFormat kAll[] = {AudioFormat::Wav,  AudioFormat::WavFloat, AudioFormat::Flac, AudioFormat::OggVorbis,
                            AudioFormat::Opus, AudioFormat::Mp3,      AudioFormat::Pcm16};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Linear chirp 200 -> 3000 Hz at amplitude 0.5: no period, so the alignment lag is unique.
std::vector<float> chirp(size_t n, int sr) {
  std::vector<float> x(n);
  const double f0 = 200, f1 = 3000, T = double(n) / sr;
  for (size_t i = 0; i < n; ++i) {
    double t = double(i) / sr;
    x[i] = float(0.5 * std::sin(2 * M_PI * (f0 * t + 0.5 * (f1 - f0) / T * t * t)));
  }
  return x;
}

// Best normalised cross-correlation of y against x over lags in [min_lag, max_lag] (y[i + lag]
// vs x[i]); returns the correlation and stores the lag.
double best_correlation(const std::vector<float>& x, const std::vector<float>& y, int min_lag, int max_lag,
                        int* lag_out) {
  double best = -2;
  for (int lag = min_lag; lag <= max_lag; ++lag) {
    double xy = 0, xx = 0, yy = 0;
    for (size_t i = 0; i < x.size() && i + size_t(lag) < y.size(); ++i) {
      double a = x[i], b = y[i + size_t(lag)];
      xy += a * b;
      xx += a * a;
      yy += b * b;
    }
    double c = xy / std::sqrt(xx * yy + 1e-30);
    if (c > best) {
      best = c;
      *lag_out = lag;
    }
  }
  return best;
}

AudioData decode(const std::vector<uint8_t>& bytes, AudioFormat f) {
  return read_audio_memory(bytes.data(), bytes.size(), audio_format_name(f));
}

// Raw 16-bit LE -> float the way libsndfile's normalised reads scale (1/32768).
std::vector<float> decode_pcm16(const std::vector<uint8_t>& b) {
  std::vector<float> y(b.size() / 2);
  for (size_t i = 0; i < y.size(); ++i) y[i] = float(int16_t(uint16_t(b[2 * i] | (b[2 * i + 1] << 8)))) / 32768.0f;
  return y;
}

}  // namespace

TEST(AudioFormatNames, FromName) {
  for (AudioFormat f : kAll) EXPECT_EQ(audio_format_from_name(audio_format_name(f)), f);
  EXPECT_EQ(audio_format_from_name("FLAC"), AudioFormat::Flac);
  EXPECT_EQ(audio_format_from_name("Wav-Float"), AudioFormat::WavFloat);
  EXPECT_EQ(audio_format_from_name("wav32f"), AudioFormat::WavFloat);
  EXPECT_EQ(audio_format_from_name("vorbis"), AudioFormat::OggVorbis);
  EXPECT_EQ(audio_format_from_name("raw"), AudioFormat::Pcm16);
  std::string e = error_of([] { audio_format_from_name("aiff"); });
  EXPECT_NE(e.find("'aiff'"), std::string::npos) << e;
  for (const char* n : {"wav", "wav-float", "flac", "ogg", "opus", "mp3", "pcm"})
    EXPECT_NE(e.find(n), std::string::npos) << n << " missing from: " << e;
  EXPECT_NE(error_of([] { audio_format_from_name(""); }), "");
}

TEST(AudioFormatNames, FromPath) {
  EXPECT_EQ(audio_format_from_path("out.wav"), AudioFormat::Wav);
  EXPECT_EQ(audio_format_from_path("/a/b.c/OUT.WAV"), AudioFormat::Wav);
  EXPECT_EQ(audio_format_from_path("x.Flac"), AudioFormat::Flac);
  EXPECT_EQ(audio_format_from_path("x.ogg"), AudioFormat::OggVorbis);
  EXPECT_EQ(audio_format_from_path("x.oga"), AudioFormat::OggVorbis);
  EXPECT_EQ(audio_format_from_path("x.opus"), AudioFormat::Opus);
  EXPECT_EQ(audio_format_from_path("dir/x.mp3"), AudioFormat::Mp3);
  EXPECT_EQ(audio_format_from_path("x.pcm"), AudioFormat::Pcm16);
  EXPECT_EQ(audio_format_from_path("x.RAW"), AudioFormat::Pcm16);
  std::string e = error_of([] { audio_format_from_path("speech.aiff"); });
  EXPECT_NE(e.find("'.aiff'"), std::string::npos) << e;
  EXPECT_NE(e.find(".wav"), std::string::npos) << e;
  EXPECT_NE(e.find(".opus"), std::string::npos) << e;
  // No extension: never a silent WAV.
  for (const char* p : {"speech", "dir.d/speech", "dir/.wav", "speech."}) {
    e = error_of([p] { audio_format_from_path(p); });
    EXPECT_NE(e.find("no file extension"), std::string::npos) << p << ": " << e;
    EXPECT_NE(e.find(p), std::string::npos) << e;
  }
}

TEST(AudioFormatNames, MimeAndExtension) {
  EXPECT_STREQ(audio_format_mime(AudioFormat::Wav), "audio/wav");
  EXPECT_STREQ(audio_format_mime(AudioFormat::WavFloat), "audio/wav");
  EXPECT_STREQ(audio_format_mime(AudioFormat::Flac), "audio/flac");
  EXPECT_STREQ(audio_format_mime(AudioFormat::OggVorbis), "audio/ogg");
  EXPECT_STREQ(audio_format_mime(AudioFormat::Opus), "audio/ogg; codecs=opus");
  EXPECT_STREQ(audio_format_mime(AudioFormat::Mp3), "audio/mpeg");
  EXPECT_STREQ(audio_format_mime(AudioFormat::Pcm16), "audio/pcm");
  for (AudioFormat f : kAll) {
    if (f == AudioFormat::WavFloat) continue;  // shares .wav with Wav
    EXPECT_EQ(audio_format_from_path(std::string("a") + audio_format_extension(f)), f);
  }
}

// Debian's libsndfile 1.2.0 carries FLAC, Vorbis, Opus and LAME/mpg123.
TEST(AudioEncode, AllFormatsAvailable) {
  for (AudioFormat f : kAll) EXPECT_TRUE(audio_format_available(f)) << audio_format_name(f);
}

TEST(AudioEncode, LosslessRoundTrip) {
  std::vector<float> x = chirp(kLen, kRate);
  // 16-bit: float_to_pcm16 (x 32767, rounded) read back / 32768 -> within 1.5 LSB.
  const float tol16 = 2.0f / 32768.0f;
  std::vector<uint8_t> wav = encode_audio(x.data(), x.size(), kRate, AudioFormat::Wav);
  EXPECT_EQ(wav, encode_wav_pcm16(x.data(), x.size(), kRate));
  AudioData dw = decode(wav, AudioFormat::Wav);
  ASSERT_EQ(dw.samples.size(), kLen);
  for (size_t i = 0; i < kLen; ++i) ASSERT_NEAR(dw.samples[i], x[i], tol16) << i;

  for (AudioFormat f : {AudioFormat::WavFloat, AudioFormat::Flac}) {
    std::vector<uint8_t> b = encode_audio(x.data(), x.size(), kRate, f);
    AudioData d = decode(b, f);
    EXPECT_EQ(d.sample_rate, kRate) << audio_format_name(f);
    EXPECT_EQ(d.file_channels, 1) << audio_format_name(f);
    ASSERT_EQ(d.samples.size(), kLen) << audio_format_name(f);
    if (f == AudioFormat::WavFloat)
      EXPECT_EQ(d.samples, x);  // exact
    else
      EXPECT_EQ(d.samples, dw.samples);  // FLAC 16-bit holds exactly the WAV's samples
  }
  EXPECT_LT(encode_audio(x.data(), x.size(), kRate, AudioFormat::Flac).size(), wav.size());

  std::vector<uint8_t> pcm = encode_audio(x.data(), x.size(), kRate, AudioFormat::Pcm16);
  ASSERT_EQ(pcm.size(), 2 * kLen);
  EXPECT_TRUE(std::equal(pcm.begin(), pcm.end(), wav.begin() + 44));
}

// Lossy codecs: rate, one channel, the decoded length against the input's, and the waveform
// (best correlation over a small lag). Length tolerances from how each codec frames audio:
//  * Vorbis: the last page's granule position trims the decode to the exact length;
//  * Opus: pre-skip and the final granule position trim it to the exact length;
//  * MP3: mpg123 trims LAME's encoder delay and padding with the Info tag, so the length is
//    exact too; we allow one MPEG-2 frame (576 samples) of slack, no lag.
// Opus's waveform correlates less (~0.93 on this chirp): its 24 <-> 48 kHz resampling leaves
// about half a sample of delay, which costs correlation at the chirp's top (3 kHz).
TEST(AudioEncode, LossyRoundTrip) {
  std::vector<float> x = chirp(kLen, kRate);
  struct Case {
    AudioFormat f;
    long len_tol;
    double min_corr;
  } cases[] = {{AudioFormat::OggVorbis, 0, 0.98}, {AudioFormat::Opus, 0, 0.90}, {AudioFormat::Mp3, 576, 0.98}};
  for (const Case& c : cases) {
    std::vector<uint8_t> b = encode_audio(x.data(), x.size(), kRate, c.f);
    AudioData d = decode(b, c.f);
    const char* name = audio_format_name(c.f);
    EXPECT_EQ(d.sample_rate, kRate) << name;
    EXPECT_EQ(d.file_channels, 1) << name;
    EXPECT_LE(std::labs(long(d.samples.size()) - long(kLen)), c.len_tol)
        << name << ": decoded " << d.samples.size() << " of " << kLen;
    int lag = -1;
    double corr = best_correlation(x, d.samples, 0, 64, &lag);
    EXPECT_GE(corr, c.min_corr) << name;
    EXPECT_EQ(lag, 0) << name;
    // Well below 16-bit WAV's 2 bytes per sample.
    EXPECT_LT(b.size(), kLen / 2) << name;
  }
}

TEST(AudioEncode, ClipsAndSilencesNaN) {
  std::vector<float> x = {1.5f, -1.5f, std::nanf(""), 0.25f};
  x.resize(2000, 0.0f);
  for (AudioFormat f : {AudioFormat::Wav, AudioFormat::WavFloat, AudioFormat::Flac}) {
    std::vector<uint8_t> b = encode_audio(x.data(), x.size(), kRate, f);
    AudioData d = decode(b, f);
    ASSERT_EQ(d.samples.size(), x.size());
    float top = f == AudioFormat::WavFloat ? 1.0f : 32767.0f / 32768.0f;
    EXPECT_EQ(d.samples[0], top) << audio_format_name(f);
    EXPECT_EQ(d.samples[1], -top) << audio_format_name(f);
    EXPECT_EQ(d.samples[2], 0.0f) << audio_format_name(f);
  }
  // Lossy codecs get clipped input too: a square of +-4 must not decode beyond ~full scale.
  std::vector<float> loud(kLen);
  for (size_t i = 0; i < kLen; ++i) loud[i] = (i / 40) % 2 ? 4.0f : -4.0f;
  for (AudioFormat f : {AudioFormat::OggVorbis, AudioFormat::Opus, AudioFormat::Mp3}) {
    AudioData d = decode(encode_audio(loud.data(), loud.size(), kRate, f), f);
    float peak = 0;
    for (float v : d.samples) peak = std::max(peak, std::fabs(v));
    EXPECT_LT(peak, 1.6f) << audio_format_name(f);
  }
}

TEST(AudioEncode, BadInput) {
  std::vector<float> x(1000, 0.1f);
  std::string e = error_of([&] { encode_audio(x.data(), x.size(), 22050, AudioFormat::Opus); });
  EXPECT_NE(e.find("opus"), std::string::npos) << e;
  EXPECT_NE(e.find("22050"), std::string::npos) << e;
  EXPECT_NE(e.find("24000"), std::string::npos) << e;
  e = error_of([&] { encode_audio(x.data(), x.size(), 7000, AudioFormat::Mp3); });
  EXPECT_NE(e.find("mp3"), std::string::npos) << e;
  EXPECT_NE(e.find("7000"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { encode_audio(x.data(), x.size(), 0, AudioFormat::Flac); }), "");
  EXPECT_NE(error_of([&] { encode_audio(x.data(), x.size(), -5, AudioFormat::Wav); }), "");
  for (AudioFormat f : kAll) {
    std::string e0 = error_of([&] { encode_audio(x.data(), 0, kRate, f); });
    EXPECT_NE(e0.find("no samples"), std::string::npos) << audio_format_name(f) << ": " << e0;
    if (!audio_format_streamable(f)) continue;
    AudioStreamEncoder s(f, kRate);
    s.push(x.data(), 0);
    e0 = error_of([&] { s.finish(); });
    EXPECT_NE(e0.find("without samples"), std::string::npos) << audio_format_name(f) << ": " << e0;
  }
  // Other rates work where the codec has them.
  for (int sr : {16000, 48000}) {
    AudioData d = decode(encode_audio(x.data(), x.size(), sr, AudioFormat::Opus), AudioFormat::Opus);
    EXPECT_EQ(d.sample_rate, sr);
  }
  AudioData d = decode(encode_audio(x.data(), x.size(), 44100, AudioFormat::Mp3), AudioFormat::Mp3);
  EXPECT_EQ(d.sample_rate, 44100);
}

TEST(AudioEncode, WriteAudioFile) {
  std::vector<float> x = chirp(kLen, kRate);
  char dir[] = "/tmp/cbx_test_audio_encode_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/out.flac";
  write_audio(path, x.data(), x.size(), kRate, audio_format_from_path(path));
  AudioData d = read_audio(path);
  EXPECT_EQ(d.samples.size(), kLen);
  std::remove(path.c_str());
  std::string e = error_of(
      [&] { write_audio(std::string(dir) + "/no/such/dir/x.wav", x.data(), x.size(), kRate, AudioFormat::Wav); });
  EXPECT_NE(e.find("cannot create"), std::string::npos) << e;
  rmdir(dir);
}

// The unknown-length WAV header: libsndfile reads through the 0xFFFFFFFF sizes to the end.
TEST(AudioStream, WavHeaderDecodes) {
  std::vector<float> x = chirp(kLen, kRate);
  std::vector<uint8_t> h = wav_stream_header(kRate);
  ASSERT_EQ(h.size(), 44u);
  EXPECT_EQ(std::memcmp(h.data(),
                        "RIFF\xff\xff\xff\xff"
                        "WAVE",
                        12),
            0);
  EXPECT_EQ(std::memcmp(h.data() + 36, "data\xff\xff\xff\xff", 8), 0);
  std::vector<uint8_t> b = h;
  std::vector<uint8_t> pcm = encode_pcm16(x.data(), x.size());
  b.insert(b.end(), pcm.begin(), pcm.end());
  AudioData d = decode(b, AudioFormat::Wav);
  EXPECT_EQ(d.sample_rate, kRate);
  EXPECT_EQ(d.samples.size(), kLen);
  EXPECT_EQ(d.samples, decode_pcm16(pcm));
}

// Streams pushed in uneven chunks decode to what the whole-buffer encoder gives (lossless and
// Ogg codecs: identical samples; MP3: the same audio behind the blank Info frame). 4 s, so that
// Vorbis (~4 KB Ogg pages, 1-2 s each here) sends an audio page before the end.
TEST(AudioStream, MatchesWholeBuffer) {
  const size_t kLen = 4 * kRate;
  std::vector<float> x = chirp(kLen, kRate);
  const size_t chunks[] = {1, 999, 4800, 7, 12000, 3333};
  for (AudioFormat f : kAll) {
    const char* name = audio_format_name(f);
    if (!audio_format_streamable(f)) {
      EXPECT_EQ(f, AudioFormat::WavFloat);
      std::string e = error_of([f] { AudioStreamEncoder s(f, kRate); });
      EXPECT_NE(e.find("cannot be streamed"), std::string::npos) << e;
      continue;
    }
    AudioStreamEncoder s(f, kRate);
    std::vector<uint8_t> b;
    size_t pushes_with_bytes = 0;
    for (size_t i = 0, k = 0; i < kLen; ++k) {
      size_t m = std::min(chunks[k % 6], kLen - i);
      std::vector<uint8_t> part = s.push(x.data() + i, m);
      pushes_with_bytes += !part.empty();
      b.insert(b.end(), part.begin(), part.end());
      i += m;
    }
    // Bytes come out while encoding, not only at the end.
    EXPECT_GE(pushes_with_bytes, 2u) << name;
    std::vector<uint8_t> tail = s.finish();
    b.insert(b.end(), tail.begin(), tail.end());
    EXPECT_NE(error_of([&] { s.push(x.data(), 10); }), "") << name;
    EXPECT_NE(error_of([&] { s.finish(); }), "") << name;

    std::vector<uint8_t> whole = encode_audio(x.data(), x.size(), kRate, f);
    if (f == AudioFormat::Pcm16) {
      EXPECT_EQ(b, whole);
      continue;
    }
    AudioData ds = decode(b, f), dw = decode(whole, f);
    EXPECT_EQ(ds.sample_rate, kRate) << name;
    if (f != AudioFormat::Mp3) {
      EXPECT_EQ(ds.samples, dw.samples) << name;
      continue;
    }
    // MP3: the blank Info frame decodes as one 576-sample frame of silence and the encoder
    // delay (576 + 529 decoder samples) is no longer trimmed; the padding at the end neither.
    int lag = -1;
    double corr = best_correlation(x, ds.samples, 1000, 2500, &lag);
    EXPECT_GE(corr, 0.98) << name;
    EXPECT_EQ(lag, 576 + 1105) << name;
    EXPECT_GE(ds.samples.size(), kLen + size_t(lag)) << name;
    EXPECT_LE(ds.samples.size(), kLen + size_t(lag) + 2 * 576) << name;
  }
}

// FLAC STREAMINFO's 36-bit total sample count: the whole-buffer encoder has libFLAC fill it in;
// a stream sends STREAMINFO first, so it keeps 0 ("unknown"), and readers decode to the end.
TEST(AudioStream, FlacTotalSamples) {
  std::vector<float> x = chirp(kLen, kRate);
  auto total = [](const std::vector<uint8_t>& b) {
    EXPECT_EQ(std::memcmp(b.data(), "fLaC", 4), 0);
    const uint8_t* si = b.data() + 8;  // after the marker and the block header
    return (uint64_t(si[13] & 0x0F) << 32) | (uint64_t(si[14]) << 24) | (uint64_t(si[15]) << 16) |
           (uint64_t(si[16]) << 8) | uint64_t(si[17]);
  };
  EXPECT_EQ(total(encode_audio(x.data(), x.size(), kRate, AudioFormat::Flac)), kLen);
  AudioStreamEncoder s(AudioFormat::Flac, kRate);
  std::vector<uint8_t> b = s.push(x.data(), x.size());
  std::vector<uint8_t> tail = s.finish();
  b.insert(b.end(), tail.begin(), tail.end());
  EXPECT_EQ(total(b), 0u);
  EXPECT_EQ(decode(b, AudioFormat::Flac).samples.size(), kLen);
  // Nothing handed out before finish() (less than one 1024-sample block): the count lands.
  AudioStreamEncoder s2(AudioFormat::Flac, kRate);
  EXPECT_TRUE(s2.push(x.data(), 500).empty());
  EXPECT_EQ(total(s2.finish()), 500u);
}

// What the WAV writer writes, the reader reads (issue 32, fuzz_audio_roundtrip): a rate above
// kMaxSampleRate used to be written and then refused on reading; it is now refused on writing,
// by encode_audio and by the stream encoder alike, with the rate in the message.
TEST(AudioEncode, WavSampleRateLimitMatchesReader) {
  const std::vector<float> x = {0.5f, -0.25f, 0.f, 1.f};
  for (AudioFormat f : {AudioFormat::Wav, AudioFormat::Pcm16}) {
    if (f == AudioFormat::Wav) {
      try {
        encode_audio(x.data(), x.size(), 2710976, f);
        FAIL() << "a 2710976 Hz WAV was written";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("2710976"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(AudioStreamEncoder(AudioFormat::Wav, kMaxSampleRate + 1), Error);
  }
  const std::vector<uint8_t> wav = encode_audio(x.data(), x.size(), kMaxSampleRate, AudioFormat::Wav);
  const AudioData a = read_audio_memory(wav.data(), wav.size(), "max.wav");
  EXPECT_EQ(a.sample_rate, kMaxSampleRate);
  ASSERT_EQ(a.samples.size(), x.size());
  EXPECT_EQ(a.samples[0], float(std::lround(0.5f * 32767.f)) / 32768.f);
}
