// chatterbox debug-frontend: runs one audio front-end on a .npy (or audio file) input and
// writes the result as .npy, for parity tests against the PyTorch/librosa references.
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "audio/audio_file.h"
#include "audio/loudness.h"
#include "audio/mel.h"
#include "audio/resample.h"
#include "audio/stft.h"
#include "command.h"
#include "core/error.h"
#include "core/npy.h"
#include "debug_npy.h"

namespace {

const char* kUsage =
    "usage: chatterbox debug-frontend --kind KIND --in IN --out OUT.npy [options]\n"
    "  IN is a float32 .npy wave [n] (or [1, n]); for --kind decode, any audio file.\n"
    "kinds and output layouts:\n"
    "  s3tok      16 kHz S3 tokenizer log-mel          -> [128, T]\n"
    "  s3gen      24 kHz S3Gen prompt log-mel          -> [T, 80]\n"
    "  fbank      16 kHz Kaldi fbank + mean norm       -> [T, 80]  (--no-mean-norm)\n"
    "  ve         16 kHz voice-encoder power mel       -> [T, 40]\n"
    "  ve-trim    librosa.effects.trim(top_db=20) range -> int64 [2] (begin, end)\n"
    "  stft       torch.stft, periodic Hann, center, reflect -> [frames, bins, 2]\n"
    "             (--n-fft 16 --hop 4 by default: HiFT)\n"
    "  istft      torch.istft of IN [frames, bins, 2]   -> [hop * (frames - 1)]\n"
    "  resample-sinc  torchaudio sinc_interp_hann        -> [ceil(n * out / in)]\n"
    "  resample-soxr  librosa soxr_hq                    -> [ceil(n * out / in)]\n"
    "             (--sr-in 24000 --sr-out 16000 by default)\n"
    "  loudness   BS.1770 integrated loudness (pyloudnorm) -> [1] LUFS (--sr-in)\n"
    "  loudnorm   Turbo's norm_loudness to -27 LUFS      -> [n]\n"
    "  decode     read_audio (mono float32)              -> [n] (--max-seconds S)\n";

std::vector<float> load_wave(const std::string& path) {
  cbx::NpyArray a = cbx::npy_load(path);
  CBX_CHECK(a.dtype == cbx::DType::F32, "debug-frontend: '%s' must be float32", path.c_str());
  CBX_CHECK(a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1),
            "debug-frontend: '%s' must be [n] or [1, n], got %s", path.c_str(), a.shape_str().c_str());
  return a.to_f32();
}

int run(int argc, char** argv) {
  std::string kind, in, out;
  int n_fft = 16, hop = 4, sr_in = 24000, sr_out = 16000;
  double max_seconds = 0.0;
  bool mean_norm = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value("debug-frontend", argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--kind")
      kind = next();
    else if (a == "--in")
      in = next();
    else if (a == "--out")
      out = next();
    else if (a == "--n-fft")
      n_fft = int(cbx::cli::int_flag("--n-fft", next(), 1, 1048576));
    else if (a == "--hop")
      hop = int(cbx::cli::int_flag("--hop", next(), 1, 1048576));
    else if (a == "--sr-in")
      sr_in = int(cbx::cli::int_flag("--sr-in", next(), 1, 1000000));
    else if (a == "--sr-out")
      sr_out = int(cbx::cli::int_flag("--sr-out", next(), 1, 1000000));
    else if (a == "--max-seconds")
      max_seconds = cbx::parse_number("--max-seconds", next());
    else if (a == "--no-mean-norm")
      mean_norm = false;
    else
      cbx::fail("debug-frontend: unknown option '%s'\n%s", a.c_str(), kUsage);
  }
  CBX_CHECK(!kind.empty() && !in.empty() && !out.empty(), "debug-frontend: --kind, --in and --out are required\n%s",
            kUsage);

  if (kind == "decode") {
    cbx::AudioData d = cbx::read_audio(in, max_seconds);
    cbx::npy_save_f32(out, {int64_t(d.samples.size())}, d.samples.data());
    std::printf("sample_rate=%d channels=%d samples=%zu truncated=%d\n", d.sample_rate, d.file_channels,
                d.samples.size(), int(d.truncated));
    return 0;
  }
  if (kind == "istft") {
    cbx::NpyArray a = cbx::npy_load(in);
    CBX_CHECK(a.dtype == cbx::DType::F32 && a.shape.size() == 3 && a.shape[2] == 2 && a.shape[1] == n_fft / 2 + 1,
              "debug-frontend istft: want float32 [frames, %d, 2], got %s", n_fft / 2 + 1, a.shape_str().c_str());
    cbx::Istft istft(n_fft, hop, cbx::make_window(cbx::WindowKind::HannPeriodic, n_fft), true);
    const int64_t frames = a.shape[0];
    std::vector<float> y(istft.default_length(frames));
    istft.inverse(reinterpret_cast<const std::complex<float>*>(a.as<float>()), frames, istft.bins(), 1, y.data(),
                  y.size());
    cbx::npy_save_f32(out, {int64_t(y.size())}, y.data());
    return 0;
  }

  std::vector<float> x = load_wave(in);
  const size_t n = x.size();
  int64_t T = 0;
  if (kind == "s3tok") {
    cbx::S3TokenizerMel fe;
    std::vector<float> y = fe.compute(x.data(), n, &T);
    cbx::npy_save_f32(out, {cbx::S3TokenizerMel::kMels, T}, y.data());
  } else if (kind == "s3gen") {
    cbx::S3GenMel fe;
    std::vector<float> y = fe.compute(x.data(), n, &T);
    cbx::npy_save_f32(out, {T, cbx::S3GenMel::kMels}, y.data());
  } else if (kind == "fbank") {
    cbx::KaldiFbank fe;
    std::vector<float> y = fe.compute(x.data(), n, mean_norm, &T);
    cbx::npy_save_f32(out, {T, cbx::KaldiFbank::kMels}, y.data());
  } else if (kind == "ve") {
    cbx::VoiceEncoderMel fe;
    std::vector<float> y = fe.compute(x.data(), n, &T);
    cbx::npy_save_f32(out, {T, cbx::VoiceEncoderMel::kMels}, y.data());
  } else if (kind == "ve-trim") {
    auto r = cbx::trim_silence(x.data(), n, 20.0);
    int64_t v[2] = {int64_t(r.first), int64_t(r.second)};
    cbx::npy_save(out, cbx::DType::I64, {2}, v);
  } else if (kind == "stft") {
    cbx::Stft stft(n_fft, hop, cbx::make_window(cbx::WindowKind::HannPeriodic, n_fft), true, cbx::StftPad::Reflect);
    T = stft.num_frames(n);
    std::vector<std::complex<float>> y(size_t(T) * stft.bins());
    stft.forward(x.data(), n, y.data(), stft.bins(), 1);
    cbx::npy_save_f32(out, {T, stft.bins(), 2}, reinterpret_cast<const float*>(y.data()));
  } else if (kind == "resample-sinc") {
    cbx::SincResampler r(sr_in, sr_out);
    std::vector<float> y = r.process(x.data(), n);
    cbx::npy_save_f32(out, {int64_t(y.size())}, y.data());
  } else if (kind == "resample-soxr") {
    std::vector<float> y = cbx::resample_soxr(x.data(), n, sr_in, sr_out);
    cbx::npy_save_f32(out, {int64_t(y.size())}, y.data());
  } else if (kind == "loudness") {
    double l = cbx::integrated_loudness(x.data(), n, sr_in);
    float v = float(l);
    cbx::npy_save_f32(out, {1}, &v);
    std::printf("integrated_loudness=%.6f LUFS\n", l);
  } else if (kind == "loudnorm") {
    bool done = cbx::normalize_loudness(x.data(), n, sr_in);
    cbx::npy_save_f32(out, {int64_t(n)}, x.data());
    std::printf("normalized=%d\n", int(done));
  } else {
    cbx::fail("debug-frontend: unknown --kind '%s'\n%s", kind.c_str(), kUsage);
  }
  return 0;
}

cbx::cli::RegisterCommand reg("debug-frontend", "run an audio front-end (mel/fbank/stft/resample/loudness) on a .npy",
                              run);
}  // namespace
