// A voice: the conditionals Chatterbox synthesises with (spec §5.1), the model's built-in one
// (conds.pt, the GGUF's voice.* tensors), one saved in a `.voice` file, or one built from a
// reference recording exactly as upstream prepare_conditionals + S3Gen.embed_ref build it
// (spec §5.2, §5.3):
//
//   file --libsndfile--> mono --soxr HQ--> 24 kHz "full"  (librosa.load(path, sr=24000))
//   Turbo: length > 5 s is required; full *= 10^((-27 - LUFS) / 20) (pyloudnorm, BS.1770)
//   full --soxr HQ--> ref16 (librosa.resample)
//     T3 cond_prompt_tokens = S3Tokenizer(ref16[:enc_cond_seconds * 16k], max_len = cond_prompt_len)
//                             (Turbo 15 s / 375 tokens, Multilingual 6 s / 150)
//     T3 speaker_emb        = VoiceEncoder(ref16)          (the whole reference)
//   s3 = full[:10 s]
//     prompt_feat [Tm, 80]  = S3Gen 24 kHz log-mel(s3)
//     s3_16 = torchaudio sinc resample(s3, 24k -> 16k)     (a different resampler, spec §15.9)
//     embedding [192]       = CAMPPlus(s3_16)
//     prompt_token [Tp]     = S3Tokenizer(s3_16), then cut to Tm / 2 when Tm != 2 Tp
//   emotion_adv             = exaggeration (the variant's generate default: Turbo 0, MTL 0.5)
//
// Where this differs from upstream, on purpose:
//  * Bounded decode: at most VoiceBuildOptions::max_seconds (default 30 s) of the file is decoded.
//    Upstream feeds the whole file to the loudness meter and the voice encoder; for longer
//    references those two see only the first max_seconds here (a warning says so).
//  * Silent references are rejected (upstream would produce NaNs or fail inside the voice
//    encoder); heavily clipped ones get a warning. Multilingual has no upstream minimum length;
//    we require kMinReferenceSecondsMtl (every front-end then has whole frames).
//
// `.voice` file: a small GGUF (general.architecture "chatterbox-voice") holding the same tensor
// names as the model's built-in voice (voice.speaker_emb, voice.cond_prompt_tokens,
// voice.emotion_adv, voice.prompt_token, voice.prompt_feat, voice.embedding; F32 / I32, stored
// bit-exactly, so a saved voice synthesises byte-identical audio) plus metadata:
// chatterbox.voice.{format_version, variant, source, model, source_sample_rate, source_channels,
// source_samples, ref_samples, t3_samples, s3gen_samples, loudness_lufs, loudness_gain}.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/progress.h"
#include "models/model_config.h"

namespace cbx {

class OutputFile;

class GgufFile;
class ThreadPool;
class VoiceEncoder;
class CampPlus;
class S3Tokenizer;
struct AudioData;

constexpr int32_t kVoiceFormatVersion = 1;
constexpr const char* kVoiceArchitecture = "chatterbox-voice";
constexpr double kMinReferenceSecondsTurbo = 5.0;  // upstream asserts len / sr > 5.0 (strictly)
constexpr double kMinReferenceSecondsMtl = 1.0;    // ours: upstream has no minimum

struct Voice {
  Variant variant = Variant::Turbo;  // whose prepare_conditionals recipe built it
  // T3 conditioning (T3Cond)
  std::vector<float> speaker_emb;           // [t3.speaker_embed_size = 256] voice-encoder embedding
  std::vector<int32_t> cond_prompt_tokens;  // [P] S3 tokens, P <= t3.cond_prompt_len
  float emotion_adv = 0;                    // exaggeration (unused by Turbo)
  // S3Gen reference dict (embed_ref)
  std::vector<int32_t> prompt_token;  // [Tp] S3 tokens of <= 10 s
  std::vector<float> prompt_feat;     // [Tm, mel_dim] 24 kHz log-mel, row-major
  int32_t mel_dim = 80;
  std::vector<float> embedding;  // [flow.spk_embed_dim = 192] CAMPPlus x-vector

  // Provenance (informational; saved in .voice metadata).
  std::string source;              // base name of the reference file, or "built-in"
  std::string model;               // base name of the model file that built it
  int32_t source_sample_rate = 0;  // file rate
  int32_t source_channels = 0;
  int64_t source_samples = 0;  // decoded samples per channel at the file rate
  int64_t ref_samples = 0;     // 24 kHz samples after loading (the whole decoded reference)
  int64_t t3_samples = 0;      // 16 kHz samples fed to the T3 prompt tokenizer
  int64_t s3gen_samples = 0;   // 24 kHz samples fed to S3Gen.embed_ref
  float loudness_lufs = 0;     // measured integrated loudness (NaN: not measured)
  float loudness_gain = 1;     // applied gain (1: none)

  int64_t n_prompt_frames() const { return mel_dim > 0 ? int64_t(prompt_feat.size()) / mel_dim : 0; }
};

// Turbo and Nano condition alike (same class, same recipe); Multilingual differs (6 s / 150
// tokens, no loudness normalisation, exaggeration 0.5).
bool voice_compatible(Variant voice_variant, Variant model_variant);

// The model's built-in voice (voice.* tensors). Throws cbx::Error naming the file and tensor.
Voice builtin_voice(const GgufFile& f, const ModelConfig& c);

// Internal consistency of v (sizes, token ranges up to the S3 vocabulary 6561, finite floats,
// Tm vs Tp). Throws cbx::Error prefixed by `what`.
void validate_voice(const Voice& v, const std::string& what);
// v can condition model c: compatible variant, speaker_emb / embedding / mel sizes, P <= the
// model's cond_prompt_len, tokens < flow.vocab. Throws cbx::Error prefixed by `what`.
void check_voice(const Voice& v, const ModelConfig& c, const std::string& what);

// .voice files. save_voice validates first; writes through an OutputFile (core/output_file.h).
void save_voice(const Voice& v, const std::string& path);
void save_voice(const Voice& v, OutputFile& out);  // an output prepared (and checked) earlier
std::vector<uint8_t> voice_to_bytes(const Voice& v);
// Throws cbx::Error naming the file: not a GGUF, not a voice (general.architecture), newer
// format version, missing/ill-typed tensors, inconsistent sizes.
Voice load_voice(const std::string& path);
Voice voice_from_gguf(const GgufFile& f);
// True when the file starts with the GGUF magic (a .voice or a model), false for anything else
// (audio); throws when the file cannot be opened.
bool is_gguf_file(const std::string& path);

struct VoiceBuildOptions {
  float exaggeration = -1;    // emotion_adv; < 0: the model's generate default (pipeline.exaggeration)
  bool norm_loudness = true;  // Turbo's norm_loudness flag (ignored where the variant never normalises)
  double max_seconds = 30.0;  // decode at most this much of the reference (>= 10)
};

// Wall time of each stage of one build (ms). The front-ends of the networks (VE mel, Kaldi
// fbank, S3 tokenizer log-mel) run inside ve_ms, campplus_ms and s3tok_*_ms.
struct VoiceBuildTimings {
  double decode_ms = 0;         // libsndfile decode + mono mix
  double resample_24k_ms = 0;   // file rate -> 24 kHz (soxr HQ; 0 when already 24 kHz)
  double loudness_ms = 0;       // BS.1770 measurement (+ gain), silence check
  double resample_16k_ms = 0;   // 24 -> 16 kHz soxr HQ of the whole reference
  double resample_sinc_ms = 0;  // 24 -> 16 kHz sinc (torchaudio) of the first 10 s
  double s3gen_mel_ms = 0;      // prompt_feat
  double ve_ms = 0, campplus_ms = 0, s3tok_t3_ms = 0, s3tok_s3gen_ms = 0;
  double total_ms = 0;
};

// Intermediate signals of a build, reported when a capture function is set (parity tests):
//   ref24      [n]  the whole 24 kHz reference after loading (and Turbo's loudness gain)
//   ref16      [n]  its soxr 24 -> 16 kHz copy (voice encoder input, whole)
//   t3_16      [n]  ref16 cut to enc_cond seconds (T3 prompt tokenizer input)
//   s3gen_24   [n]  ref24 cut to 10 s (S3Gen prompt mel input)
//   s3gen_16   [n]  its sinc 24 -> 16 kHz copy (CAMPPlus and S3Gen prompt tokenizer input)
using VoiceCapture = std::function<void(const std::string& name, const float* data, int64_t n)>;

constexpr int kVoiceBuildSteps = 7;

// The model-free first half of a build, VoiceBuilder's and the upload fuzz target's
// (fuzz/fuzz_audio_upload.cpp): what one variant's recipe needs of the model config.
struct VoiceRecipe {
  Variant variant = Variant::Turbo;
  int sr24 = 24000, sr16 = 16000;
  double max_seconds = 30.0;   // VoiceBuildOptions::max_seconds
  double min_seconds = 0;      // the variant's minimum reference length
  int64_t enc_cond_16k = 0;    // T3 prompt tokenizer input (samples at 16 kHz)
  int64_t dec_cond_24k = 0;    // S3Gen reference (samples at 24 kHz)
  bool norm_loudness = false;  // the variant normalises and the options ask for it
  float loudness_target = -27;
};
// Checks the rates and o.max_seconds against c; throws cbx::Error naming `what` (the model file).
VoiceRecipe voice_recipe(const ModelConfig& c, const VoiceBuildOptions& o, const std::string& what);
// How much of a reference file a build decodes: max_seconds plus a margin, so that a longer file
// can be told apart and the soxr filter tail at the cut comes from real samples.
double voice_decode_seconds(const VoiceRecipe& r);

// The signals the cloning networks take, before any network runs.
struct VoiceSignals {
  std::vector<float> full;    // the reference at 24 kHz, cut to max_seconds, loudness gain applied
  std::vector<float> ref16;   // its soxr 16 kHz copy: the voice encoder's input, whole
  int64_t t3_samples = 0;     // ref16's first t3_samples feed the T3 prompt tokenizer
  int64_t s3gen_samples = 0;  // full's first s3gen_samples feed S3Gen.embed_ref
  double lufs = 0;            // integrated loudness of full before the gain
  float gain = 1;
};
// Decoded audio -> VoiceSignals: non-finite samples, too short (the variant's minimum) and silent
// references throw cbx::Error naming `name`; clipping, the max_seconds cut and a skipped loudness
// step append warnings. tm, when given, gets the resample and loudness times.
VoiceSignals voice_signals(const AudioData& a, const VoiceRecipe& r, const std::string& name,
                           std::vector<std::string>* warnings = nullptr, VoiceBuildTimings* tm = nullptr);

// Builds voices from reference audio with one model's networks (VoiceEncoder, CampPlus,
// S3Tokenizer bound zero-copy from f, scratch reserved once for max_seconds of audio). f, c and
// pool must outlive the builder. One build at a time.
class VoiceBuilder {
 public:
  VoiceBuilder(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const VoiceBuildOptions& o = {});
  ~VoiceBuilder();
  VoiceBuilder(const VoiceBuilder&) = delete;
  VoiceBuilder& operator=(const VoiceBuilder&) = delete;

  // Throws cbx::Error naming the file: unreadable / corrupt / unsupported format, shorter than
  // the variant's minimum (measured and required seconds), silent. Warnings (clipping,
  // reference cut at max_seconds, loudness step skipped) are appended to *warnings.
  Voice build(const std::string& path, VoiceBuildTimings* t = nullptr, std::vector<std::string>* warnings = nullptr);
  // Same from an in-memory file image; `name` appears in errors and as the voice's source.
  Voice build_from_memory(const void* data, size_t size, const std::string& name, VoiceBuildTimings* t = nullptr,
                          std::vector<std::string>* warnings = nullptr);
  // Same from decoded mono audio at any rate (a.samples, a.sample_rate).
  Voice build_from_audio(const AudioData& a, const std::string& name, VoiceBuildTimings* t = nullptr,
                         std::vector<std::string>* warnings = nullptr);

  const VoiceBuildOptions& options() const;
  double min_seconds() const;  // the variant's minimum reference length
  void set_capture(VoiceCapture fn);
  // Optional: called as each stage of a build starts ("step", done = 1..kVoiceBuildSteps, item =
  // the stage: decoding audio, resampling and loudness, S3 tokenizer (T3 prompt), voice encoder,
  // S3Gen mel, CAMPPlus, S3 tokenizer (S3Gen prompt)). build_from_audio starts at step 2.
  void set_progress(ProgressFn fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_;
};

// `path` names a .voice file (GGUF magic: load_voice, then check_voice against c) or reference
// audio (anything else: built with a VoiceBuilder over f, c, pool). Throws cbx::Error naming
// the file.
Voice load_or_build_voice(const std::string& path, const GgufFile& f, const ModelConfig& c, ThreadPool& pool,
                          const VoiceBuildOptions& o = {}, VoiceBuildTimings* t = nullptr,
                          std::vector<std::string>* warnings = nullptr);

}  // namespace cbx
