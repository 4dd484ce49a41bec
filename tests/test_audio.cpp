// Audio: file I/O, resampling, FFT/STFT/iSTFT, mel front-ends, loudness, .npy I/O.
// PyTorch/librosa parity of the front-ends lives in tests/test_audio_parity.sh.
#include <gtest/gtest.h>
#include <sndfile.h>
#include <unistd.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "audio/audio_file.h"
#include "audio/fft.h"
#include "audio/loudness.h"
#include "audio/mel.h"
#include "audio/resample.h"
#include "audio/stft.h"
#include "core/error.h"
#include "core/npy.h"

using namespace cbx;

namespace {

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d ? d : "/tmp") + "/cbx_test_audio_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<float> sine(double freq, double amp, int sr, size_t n, double phase = 0.0) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(amp * std::sin(2 * M_PI * freq * double(i) / sr + phase));
  return x;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// Write a multi-channel file with libsndfile (interleaved frames).
void write_sf(const std::string& path, int format, int channels, int sr, const std::vector<float>& inter) {
  SF_INFO info{};
  info.samplerate = sr;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
  sf_writef_float(f, inter.data(), sf_count_t(inter.size() / channels));
  sf_close(f);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Amplitude and frequency of the dominant sinusoid by least squares at a given frequency.
double amplitude_at(const std::vector<float>& x, double freq, int sr, size_t skip) {
  double c = 0, s = 0;
  size_t n = x.size() - 2 * skip;
  for (size_t i = skip; i < skip + n; ++i) {
    c += x[i] * std::cos(2 * M_PI * freq * double(i) / sr);
    s += x[i] * std::sin(2 * M_PI * freq * double(i) / sr);
  }
  return 2.0 * std::sqrt(c * c + s * s) / double(n);
}

}  // namespace

// ---------------- file I/O ----------------

TEST(AudioFile, WavRoundTrip24k) {
  const std::string p = tmp_path("rt.wav");
  std::vector<float> x = sine(440.0, 0.8, 24000, 24000);
  x[10] = 1.5f;   // clipped to +1
  x[11] = -1.5f;  // clipped to -1
  write_wav_pcm16(p, x.data(), x.size(), 24000);
  AudioData a = read_audio(p);
  EXPECT_EQ(a.sample_rate, 24000);
  EXPECT_EQ(a.file_channels, 1);
  ASSERT_EQ(a.samples.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float want = std::min(1.0f, std::max(-1.0f, x[i]));
    // libsndfile reads PCM16 as v / 32768; we wrote round(v * 32767).
    EXPECT_NEAR(a.samples[i], want, 1.5f / 32767.0f) << i;
  }
  std::remove(p.c_str());
}

TEST(AudioFile, BufferMatchesFileAndDecodesFromMemory) {
  const std::string p = tmp_path("buf.wav");
  std::vector<float> x = sine(1000.0, 0.5, 24000, 1234);
  write_wav_pcm16(p, x.data(), x.size());
  std::vector<uint8_t> buf = encode_wav_pcm16(x.data(), x.size());
  std::ifstream f(p, std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(buf, file);
  EXPECT_EQ(buf.size(), 44u + 2 * x.size());
  AudioData a = read_audio_memory(buf.data(), buf.size(), "upload.wav");
  EXPECT_EQ(a.samples.size(), x.size());
  // Streaming: header with unknown length, then raw PCM chunks.
  std::vector<uint8_t> h = wav_header_pcm16(24000, -1);
  ASSERT_EQ(h.size(), 44u);
  EXPECT_EQ(h[4], 0xFF);
  EXPECT_EQ(h[43], 0xFF);
  std::vector<uint8_t> c1 = encode_pcm16(x.data(), 600), c2 = encode_pcm16(x.data() + 600, x.size() - 600);
  std::vector<uint8_t> all = encode_pcm16(x.data(), x.size());
  c1.insert(c1.end(), c2.begin(), c2.end());
  EXPECT_EQ(c1, all);
  std::remove(p.c_str());
}

TEST(AudioFile, StereoMixesToMonoAndFlacDecodes) {
  const int sr = 16000;
  const size_t n = 8000;
  std::vector<float> inter(2 * n);
  for (size_t i = 0; i < n; ++i) {
    inter[2 * i] = 0.5f * std::sin(2 * M_PI * 300.0 * double(i) / sr);
    inter[2 * i + 1] = -0.25f;
  }
  for (int fmt : {SF_FORMAT_WAV | SF_FORMAT_FLOAT, SF_FORMAT_FLAC | SF_FORMAT_PCM_24}) {
    SF_INFO probe{};
    probe.samplerate = sr;
    probe.channels = 2;
    probe.format = fmt;
    if (!sf_format_check(&probe)) continue;
    const std::string p = tmp_path((fmt & SF_FORMAT_TYPEMASK) == SF_FORMAT_FLAC ? "st.flac" : "st.wav");
    write_sf(p, fmt, 2, sr, inter);
    AudioData a = read_audio(p);
    EXPECT_EQ(a.file_channels, 2);
    EXPECT_EQ(a.sample_rate, sr);
    ASSERT_EQ(a.samples.size(), n);
    for (size_t i = 0; i < n; ++i)
      EXPECT_NEAR(a.samples[i], 0.5f * (inter[2 * i] + inter[2 * i + 1]), 1e-5f) << p << " " << i;
    std::remove(p.c_str());
  }
}

TEST(AudioFile, LossyFormatsDecode) {
  const int sr = 24000;
  const size_t n = 24000;
  std::vector<float> inter(2 * n);
  for (size_t i = 0; i < n; ++i) inter[2 * i] = inter[2 * i + 1] = 0.4f * std::sin(2 * M_PI * 440.0 * double(i) / sr);
  struct F {
    int fmt;
    const char* name;
  };
  for (F f : {F{SF_FORMAT_OGG | SF_FORMAT_VORBIS, "v.ogg"}, F{SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, "m.mp3"}}) {
    SF_INFO probe{};
    probe.samplerate = sr;
    probe.channels = 2;
    probe.format = f.fmt;
    if (!sf_format_check(&probe)) continue;  // this libsndfile lacks the codec
    const std::string p = tmp_path(f.name);
    write_sf(p, f.fmt, 2, sr, inter);
    AudioData a = read_audio(p);
    EXPECT_EQ(a.sample_rate, sr) << f.name;
    EXPECT_EQ(a.file_channels, 2) << f.name;
    EXPECT_NEAR(double(a.samples.size()), double(n), 0.1 * n) << f.name;  // codec padding
    EXPECT_NEAR(amplitude_at(a.samples, 440.0, sr, 2400), 0.4, 0.03) << f.name;
    AudioData b = load_audio(p, 16000);  // librosa.load(path, sr=16000)
    EXPECT_EQ(b.sample_rate, 16000);
    EXPECT_NEAR(amplitude_at(b.samples, 440.0, 16000, 1600), 0.4, 0.03) << f.name;
    std::remove(p.c_str());
  }
}

TEST(AudioFile, MaxSecondsBoundsTheDecode) {
  const std::string p = tmp_path("long.wav");
  std::vector<float> x = sine(200.0, 0.3, 16000, 3 * 16000);
  write_wav_pcm16(p, x.data(), x.size(), 16000);
  AudioData a = read_audio(p, 1.25);
  EXPECT_EQ(a.samples.size(), 20000u);
  EXPECT_TRUE(a.truncated);
  AudioData b = read_audio(p, 10.0);
  EXPECT_EQ(b.samples.size(), x.size());
  EXPECT_FALSE(b.truncated);
  std::remove(p.c_str());
}

TEST(AudioFile, ClearErrorsNameTheFile) {
  const std::string missing = tmp_path("does_not_exist.wav");
  std::string e = error_of([&] { read_audio(missing); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;

  const std::string empty = tmp_path("empty.wav");
  write_bytes(empty, "");
  e = error_of([&] { read_audio(empty); });
  EXPECT_NE(e.find(empty), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  const std::string garbage = tmp_path("garbage.wav");
  std::string g(4096, '\0');
  std::mt19937 rng(7);
  for (char& c : g) c = char(rng());
  write_bytes(garbage, g);
  e = error_of([&] { read_audio(garbage); });
  EXPECT_NE(e.find(garbage), std::string::npos) << e;

  const std::string trunc = tmp_path("trunc.wav");
  std::vector<uint8_t> w = encode_wav_pcm16(sine(100, 0.1, 24000, 100).data(), 100);
  write_bytes(trunc, std::string(w.begin(), w.begin() + 20));  // header cut short
  e = error_of([&] { read_audio(trunc); });
  EXPECT_NE(e.find(trunc), std::string::npos) << e;

  const std::string nodata = tmp_path("nodata.wav");
  std::vector<uint8_t> h = wav_header_pcm16(24000, 0);
  write_bytes(nodata, std::string(h.begin(), h.end()));
  e = error_of([&] { read_audio(nodata); });
  EXPECT_NE(e.find(nodata), std::string::npos) << e;

  e = error_of([&] { read_audio_memory(g.data(), g.size(), "upload-42"); });
  EXPECT_NE(e.find("upload-42"), std::string::npos) << e;
  for (const auto& p : {empty, garbage, trunc, nodata}) std::remove(p.c_str());
}

// ---------------- resampling ----------------

TEST(Resample, SoxrKeepsFrequencyAndAmplitude) {
  for (auto [in, out] : {std::pair{24000, 16000}, std::pair{44100, 24000}, std::pair{16000, 24000}}) {
    std::vector<float> x = sine(1000.0, 0.5, in, size_t(in));
    std::vector<float> y = resample_soxr(x.data(), x.size(), in, out);
    // librosa's length rule, ceil(n * (out / in)) in double: 44100 -> 24000 on 1 s gives 24001.
    ASSERT_EQ(y.size(), size_t(std::ceil(double(x.size()) * (double(out) / in))));
    EXPECT_NEAR(amplitude_at(y, 1000.0, out, size_t(out / 20)), 0.5, 2e-3) << in << "->" << out;
    // Nothing at a neighbouring frequency.
    EXPECT_LT(amplitude_at(y, 1100.0, out, size_t(out / 20)), 2e-3);
  }
  std::vector<float> x = sine(1000.0, 0.5, 16000, 100);
  EXPECT_EQ(resample_soxr(x.data(), x.size(), 16000, 16000), x);
}

TEST(Resample, SincMatchesTorchaudioShapeAndKeepsSine) {
  SincResampler r(24000, 16000);
  std::vector<float> x = sine(1000.0, 0.5, 24000, 24001);
  std::vector<float> y = r.process(x.data(), x.size());
  EXPECT_EQ(y.size(), 16001u);  // ceil(24001 * 2 / 3)
  EXPECT_NEAR(amplitude_at(y, 1000.0, 16000, 800), 0.5, 2e-3);
  // A tone well above the new Nyquist is removed (the Hann-sinc transition band is wide:
  // 9 kHz is only ~20 dB down, as in torchaudio).
  std::vector<float> hi = sine(10500.0, 0.5, 24000, 24000);
  std::vector<float> yh = r.process(hi.data(), hi.size());
  double rms = 0;
  for (size_t i = 800; i + 800 < yh.size(); ++i) rms += yh[i] * yh[i];
  EXPECT_LT(std::sqrt(rms / double(yh.size() - 1600)), 5e-3);
}

// ---------------- FFT / STFT / iSTFT ----------------

TEST(Fft, MatchesNaiveDftAndInverts) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (int n : {7, 16, 400, 512, 1920}) {
    std::vector<float> x(n);
    for (float& v : x) v = nd(rng);
    RealFft fft(n);
    std::vector<std::complex<float>> X(size_t(fft.bins()));
    fft.forward(x.data(), X.data());
    double maxerr = 0, scale = 0;
    for (int k = 0; k < fft.bins(); ++k) {
      std::complex<double> s = 0;
      for (int t = 0; t < n; ++t) s += double(x[t]) * std::polar(1.0, -2 * M_PI * double(k) * t / n);
      maxerr = std::max(maxerr, std::abs(s - std::complex<double>(X[k])));
      scale = std::max(scale, std::abs(s));
    }
    EXPECT_LT(maxerr / scale, 1e-5) << n;
    std::vector<float> y(n);
    fft.inverse(X.data(), y.data());
    for (int t = 0; t < n; ++t) EXPECT_NEAR(y[t] / n, x[t], 1e-5f) << n;
  }
}

TEST(Stft, IstftReconstructs) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> ud(-0.5f, 0.5f);
  struct Cfg {
    int n_fft, hop;
    WindowKind w;
  };
  for (Cfg c : {Cfg{16, 4, WindowKind::HannPeriodic}, Cfg{400, 160, WindowKind::HannPeriodic},
                Cfg{1920, 480, WindowKind::HannPeriodic}, Cfg{512, 128, WindowKind::HannSymmetric}}) {
    const size_t n = size_t(c.hop) * 300;  // istft's default length is hop * (frames - 1)
    std::vector<float> x(n);
    for (float& v : x) v = ud(rng);
    std::vector<float> w = make_window(c.w, c.n_fft);
    Stft stft(c.n_fft, c.hop, w);
    const int64_t frames = stft.num_frames(n);
    ASSERT_EQ(frames, int64_t(n / c.hop + 1));
    // [bins, frames] layout through the strided API.
    std::vector<std::complex<float>> spec(size_t(frames) * stft.bins());
    stft.forward(x.data(), n, spec.data(), 1, frames);
    Istft istft(c.n_fft, c.hop, w);
    ASSERT_EQ(istft.default_length(frames), n);
    std::vector<float> y(n);
    istft.inverse(spec.data(), frames, 1, frames, y.data(), n);
    double err = 0;
    for (size_t i = 0; i < n; ++i) err = std::max(err, double(std::fabs(y[i] - x[i])));
    EXPECT_LT(err, 2e-5) << c.n_fft;
    // Planar form gives the same samples.
    std::vector<float> re(spec.size()), im(spec.size()), y2(n);
    stft.forward_planar(x.data(), n, re.data(), im.data(), 1, frames);
    istft.inverse_planar(re.data(), im.data(), frames, 1, frames, y2.data(), n);
    EXPECT_EQ(y, y2);
  }
}

TEST(Stft, ReflectPaddingAndErrors) {
  std::vector<float> w = make_window(WindowKind::Rectangular, 4);
  Stft stft(4, 2, w);
  std::vector<float> x = {1, 2, 3, 4, 5};
  std::vector<std::complex<float>> f(5);
  // frame 0 covers padded [-2, 2): reflect -> x[2], x[1], x[0], x[1] = 3 + 2 + 1 + 2.
  stft.frame(x.data(), x.size(), 0, f.data());
  EXPECT_FLOAT_EQ(f[0].real(), 8.0f);
  // last frame (2) covers [2, 6): x[2], x[3], x[4], x[3] = 3 + 4 + 5 + 4.
  stft.frame(x.data(), x.size(), 2, f.data());
  EXPECT_FLOAT_EQ(f[0].real(), 16.0f);
  EXPECT_THROW(stft.check_input(2), Error);
  EXPECT_THROW(Stft(16, 4, make_window(WindowKind::HannPeriodic, 17)), Error);
  // A window shorter than n_fft is centred (torch semantics).
  Stft s2(8, 2, std::vector<float>(4, 1.0f));
  std::vector<float> imp(32, 0.0f);
  imp[8] = 1.0f;
  s2.frame(imp.data(), imp.size(), 4, f.data());  // covers [4, 12): imp at offset 4, inside [2, 6)
  EXPECT_NEAR(std::abs(f[0]), 1.0f, 1e-6f);
}

// ---------------- mel filterbanks and front-ends ----------------

TEST(Mel, ScalesAndFilterbank) {
  EXPECT_NEAR(hz_to_mel(1000.0, MelScale::Slaney), 15.0, 1e-12);
  EXPECT_NEAR(hz_to_mel(500.0, MelScale::Slaney), 7.5, 1e-12);
  EXPECT_NEAR(hz_to_mel(1000.0, MelScale::Htk), 999.9855, 1e-3);
  for (double f : {0.0, 300.0, 1000.0, 4321.0, 8000.0})
    for (MelScale s : {MelScale::Slaney, MelScale::Htk}) EXPECT_NEAR(mel_to_hz(hz_to_mel(f, s), s), f, 1e-9);
  // Slaney-normalised filters have unit area in Hz (triangle of height 2/(hi-lo)), so the sum of
  // weights times the bin width is ~1 for filters wide enough to be well sampled.
  std::vector<float> fb = mel_filterbank(16000, 400, 40, 0, 8000);
  ASSERT_EQ(fb.size(), 40u * 201u);
  for (int m = 10; m < 40; ++m) {
    double s = 0;
    for (int k = 0; k < 201; ++k) s += fb[size_t(m) * 201 + k];
    EXPECT_NEAR(s * 40.0, 1.0, 0.05) << m;
  }
  std::vector<float> kb = kaldi_mel_banks(80, 512, 16000);
  ASSERT_EQ(kb.size(), 80u * 257u);
  for (int m = 0; m < 80; ++m) {
    EXPECT_EQ(kb[size_t(m) * 257 + 256], 0.0f);
    float mx = 0;
    for (int k = 0; k < 257; ++k) mx = std::max(mx, kb[size_t(m) * 257 + k]);
    EXPECT_LE(mx, 1.0f);
    EXPECT_GT(mx, 0.3f) << m;
  }
}

TEST(Mel, FrontEndShapes) {
  std::vector<float> x16 = sine(440.0, 0.3, 16000, 16000), x24 = sine(440.0, 0.3, 24000, 24000);
  int64_t T = 0;
  S3TokenizerMel s3;
  std::vector<float> a = s3.compute(x16.data(), x16.size(), &T);
  EXPECT_EQ(T, 100);
  EXPECT_EQ(a.size(), size_t(128 * T));
  float mx = *std::max_element(a.begin(), a.end()), mn = *std::min_element(a.begin(), a.end());
  EXPECT_NEAR(mn, mx - 2.0f, 1e-5f);  // the (max - 8) floor, after /4
  S3GenMel s3g;
  std::vector<float> b = s3g.compute(x24.data(), x24.size(), &T);
  EXPECT_EQ(T, 50);
  EXPECT_EQ(b.size(), size_t(80 * T));
  // 440 Hz peaks in a low mel bin, in every frame.
  int arg = int(std::max_element(b.begin() + 20 * 80, b.begin() + 21 * 80) - (b.begin() + 20 * 80));
  EXPECT_GT(arg, 3);
  EXPECT_LT(arg, 20);
  KaldiFbank fb;
  std::vector<float> c = fb.compute(x16.data(), x16.size(), true, &T);
  EXPECT_EQ(T, 98);
  double colsum = 0;
  for (int64_t f = 0; f < T; ++f) colsum += c[size_t(f) * 80 + 30];
  EXPECT_NEAR(colsum / double(T), 0.0, 1e-4);  // mean-normalised
  VoiceEncoderMel ve;
  std::vector<float> d = ve.compute(x16.data(), x16.size(), &T);
  EXPECT_EQ(T, 101);
  EXPECT_EQ(d.size(), size_t(40 * T));
  std::vector<float> tiny(100, 0.1f);
  EXPECT_THROW(s3.compute(tiny.data(), tiny.size()), Error);
  EXPECT_THROW(s3g.compute(tiny.data(), tiny.size()), Error);
  EXPECT_THROW(fb.compute(tiny.data(), tiny.size()), Error);
  EXPECT_THROW(ve.compute(tiny.data(), tiny.size()), Error);
}

TEST(Mel, TrimSilence) {
  std::vector<float> x(16000 * 3, 0.0f);
  std::vector<float> s = sine(300.0, 0.5, 16000, 16000);
  std::copy(s.begin(), s.end(), x.begin() + 16000);
  auto [b, e] = trim_silence(x.data(), x.size(), 20.0);
  EXPECT_LE(b, 16000u);
  EXPECT_GT(b, 16000u - 2048u);
  EXPECT_GE(e, 32000u);
  EXPECT_LT(e, 32000u + 2048u);
  std::vector<float> z(5000, 0.0f);
  auto r = trim_silence(z.data(), z.size(), 20.0);
  EXPECT_EQ(r.first, 0u);  // all frames equal the max: nothing is below -20 dB
}

// ---------------- loudness ----------------

TEST(Loudness, SineAtKnownLevel) {
  // BS.1770: a 997/1000 Hz sine at full scale in one channel reads -3.01 LKFS; at amplitude 0.5,
  // -9.03. pyloudnorm's RBJ-cookbook K-weighting (which we reproduce) is not the ITU filter:
  // its gain at 1 kHz, 48 kHz is +0.6563 dB instead of +0.691, so it reads
  // 10 log10(0.125) + 0.6563 - 0.691 = -9.0656 (analytic response of the two biquads).
  for (int sr : {48000, 24000, 16000}) {
    std::vector<float> x = sine(1000.0, 0.5, sr, size_t(sr) * 10);
    double l = integrated_loudness(x.data(), x.size(), sr);
    EXPECT_NEAR(l, -9.03, 0.1) << sr;  // BS.1770 nominal
    if (sr == 48000) {
      EXPECT_NEAR(l, -9.0656, 2e-4);
    }
  }
  std::vector<float> sil(48000, 0.0f);
  EXPECT_TRUE(std::isinf(integrated_loudness(sil.data(), sil.size(), 48000)));
  std::vector<float> shortx(100, 0.1f);
  EXPECT_THROW(integrated_loudness(shortx.data(), shortx.size(), 24000), Error);
}

TEST(Loudness, NormalizeToTarget) {
  std::vector<float> x = sine(500.0, 0.05, 24000, 24000 * 6);
  ASSERT_TRUE(normalize_loudness(x.data(), x.size(), 24000, -27.0));
  EXPECT_NEAR(integrated_loudness(x.data(), x.size(), 24000), -27.0, 1e-3);
  std::vector<float> sil(24000 * 2, 0.0f);
  EXPECT_FALSE(normalize_loudness(sil.data(), sil.size(), 24000));
  std::vector<float> shortx(1000, 0.1f);
  EXPECT_FALSE(normalize_loudness(shortx.data(), shortx.size(), 24000));
  EXPECT_EQ(shortx[0], 0.1f);
  EXPECT_NEAR(loudness_gain(-21.0, -27.0), 0.5011872, 1e-6);
}

// ---------------- .npy ----------------

TEST(Npy, RoundTripAndValidation) {
  const std::string p = tmp_path("a.npy");
  std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  npy_save_f32(p, {2, 3}, f.data());
  NpyArray a = npy_load(p);
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.to_f32(), f);
  EXPECT_EQ(a.shape_str(), "(2, 3)");
  std::vector<int64_t> i64 = {1, -2, int64_t(1) << 40};
  std::vector<uint8_t> b = npy_serialize(DType::I64, {3}, i64.data());
  EXPECT_EQ(b.size() % 64, 24u % 64);  // header padded to 64, then 24 payload bytes
  NpyArray c = npy_parse(b.data(), b.size(), "mem");
  EXPECT_EQ(c.shape_str(), "(3,)");
  EXPECT_EQ(c.as<int64_t>()[2], int64_t(1) << 40);
  std::vector<int32_t> i32 = {5};
  NpyArray s = npy_parse(npy_serialize(DType::I32, {}, i32.data()).data(),
                         npy_serialize(DType::I32, {}, i32.data()).size(), "scalar");
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.as<int32_t>()[0], 5);

  auto bad = [&](std::string hdr, size_t payload) {
    std::string img = std::string("\x93NUMPY\x01\x00", 8);
    img.push_back(char(hdr.size() & 0xFF));
    img.push_back(char(hdr.size() >> 8));
    img += hdr + std::string(payload, '\0');
    return error_of([&] { npy_parse(img.data(), img.size(), "bad.npy"); });
  };
  EXPECT_EQ(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 8), "");
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 7), "");
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", 8), "");
  EXPECT_NE(bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8), "");
  EXPECT_NE(bad("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 16), "");
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", 8), "");
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False }\n", 8), "");
  std::string e = error_of([&] { npy_parse("GARBAGE!!!!!", 12, "junk.npy"); });
  EXPECT_NE(e.find("junk.npy"), std::string::npos);
  EXPECT_NE(error_of([&] { npy_load(tmp_path("missing.npy")); }), "");
  std::remove(p.c_str());
}
