// chatterbox debug-mtl-audio: the Multilingual pipeline after T3, on a T3 token .npy: speech-token
// post-processing, flow encoder, 10-step CFG CFM, HiFT, start trim/fade and tail trim with the
// built-in voice (MtlPipeline::postprocess + tokens_to_audio), for the end-to-end parity test
// (tests/test_mtl_audio_parity.sh) with the CFM noise and HiFT draws injectable.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/npy.h"
#include "debug_npy.h"
#include "models/hift_vocoder.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/voice.h"

namespace {

const char* kCmd = "debug mtl-audio";
const char* kUsage =
    "usage: chatterbox debug-mtl-audio -m MTL.gguf --tokens T.npy --out WAVE.npy [options]\n"
    "  --tokens F       int32/int64 .npy [n]: T3's output (before drop_invalid_tokens)\n"
    "  --out F          float32 [samples]: the waveform as synthesize returns it\n"
    "  --out-tokens F   int32 [N]: the post-processed speech tokens S3Gen took\n"
    "  --cfm-noise F    float32 [80, 2 (Tp + N)]: CFM z ~ N(0, 1) (Tp: the voice's S3Gen prompt tokens)\n"
    "  --phases F       float32 [9]: HiFT SineGen phases;  --hift-noise F  float32 [9, 480 (2 (Tp + N) - Tm)]\n"
    "                   (all three or none; without them the seeded generators draw, --seed N)\n"
    "  -t, --threads N  (default 2)\n";

int run(int argc, char** argv) {
  std::string model, tokens_path, out_path, out_tokens, noise_path, phases_path, hnoise_path;
  int threads = 2;
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return cbx::cli::option_value(kCmd, argc, argv, i); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model")
      model = next();
    else if (a == "--tokens")
      tokens_path = next();
    else if (a == "--out")
      out_path = next();
    else if (a == "--out-tokens")
      out_tokens = next();
    else if (a == "--cfm-noise")
      noise_path = next();
    else if (a == "--phases")
      phases_path = next();
    else if (a == "--hift-noise")
      hnoise_path = next();
    else if (a == "-t" || a == "--threads")
      threads = int(cbx::cli::int_flag("--threads", next(), 1, 1024));
    else if (a == "--seed")
      seed = cbx::parse_u64("--seed", next());
    else
      cbx::fail("%s: unknown option '%s'\n%s", kCmd, a.c_str(), kUsage);
  }
  CBX_CHECK(!model.empty() && !tokens_path.empty() && !out_path.empty(), "%s", kUsage);
  const bool inject = !noise_path.empty();
  CBX_CHECK(inject == !phases_path.empty() && inject == !hnoise_path.empty(),
            "%s: give all of --cfm-noise, --phases and --hift-noise, or none", kCmd);

  const cbx::NpyArray ta = cbx::npy_load(tokens_path);
  CBX_CHECK(ta.dtype == cbx::DType::I32 || ta.dtype == cbx::DType::I64, "%s: '%s' must hold int32 or int64 ids", kCmd,
            tokens_path.c_str());
  std::vector<int32_t> gen;
  for (int64_t i = 0; i < ta.numel(); ++i)
    gen.push_back(ta.dtype == cbx::DType::I32 ? ta.as<int32_t>()[i] : int32_t(ta.as<int64_t>()[i]));

  cbx::MtlLoadParams lp;
  lp.n_threads = threads;
  cbx::MtlPipeline pipe(model, lp);
  const std::vector<int32_t> speech = cbx::MtlPipeline::postprocess(gen, pipe.config().t3);
  if (!out_tokens.empty()) cbx::npy_save(out_tokens, cbx::DType::I32, {int64_t(speech.size())}, speech.data());

  cbx::NpyArray za, pa, na;
  cbx::Tensor z;
  cbx::HiftDraws draws;
  if (inject) {
    const cbx::Voice& v = pipe.voice();
    const int64_t M = pipe.config().flow.mel_dim;
    const int64_t T = pipe.config().flow.token_mel_ratio * int64_t(v.prompt_token.size() + speech.size());
    za = cbx::cli::load_f32_npy(kCmd, noise_path);
    const std::vector<int64_t> zs = cbx::cli::squeeze_to(kCmd, za, 2, noise_path);
    CBX_CHECK(zs[0] == M && zs[1] == T, "%s: '%s' has shape %s, want [%lld, %lld]", kCmd, noise_path.c_str(),
              za.shape_str().c_str(), (long long)M, (long long)T);
    z = cbx::make_tensor(cbx::DType::F32, {M, T}, za.as<float>(), za.data.size());
    pa = cbx::cli::load_f32_npy(kCmd, phases_path);
    na = cbx::cli::load_f32_npy(kCmd, hnoise_path);
    const int64_t H1 = pipe.config().hift.nb_harmonics + 1;
    int64_t spf = pipe.config().hift.hop;
    for (int32_t r : pipe.config().hift.upsample_rates) spf *= r;
    const int64_t N = spf * (T - v.n_prompt_frames());
    CBX_CHECK(pa.numel() == H1, "%s: '%s' has %lld phases, want %lld", kCmd, phases_path.c_str(), (long long)pa.numel(),
              (long long)H1);
    CBX_CHECK(na.numel() == H1 * N, "%s: '%s' has shape %s, want [%lld, %lld]", kCmd, hnoise_path.c_str(),
              na.shape_str().c_str(), (long long)H1, (long long)N);
    draws.phases = pa.as<float>();
    draws.noise = na.as<float>();
  }
  pipe.reseed_s3gen(seed);
  const std::vector<float> wave = pipe.tokens_to_audio(speech, nullptr, z, inject ? &draws : nullptr);
  cbx::npy_save_f32(out_path, {int64_t(wave.size())}, wave.data());
  std::fprintf(stderr, "%s: %zu T3 tokens -> %zu speech tokens -> %zu samples\n", kCmd, gen.size(), speech.size(),
               wave.size());
  return 0;
}

cbx::cli::RegisterCommand reg("debug-mtl-audio",
                              "Multilingual post-processing + S3Gen + HiFT + trims on T3 tokens (parity)", run);

}  // namespace
