// Voice encoder: T3's 256-d speaker embedding (upstream models/voice_encoder/*.py,
// VoiceEncoder.embeds_from_wavs; spec §5.2, §11.1).
//
//   wav [n] 16 kHz -> librosa.effects.trim(top_db 20) -> mel [T, 40] (linear power mel, no
//             log; audio/mel.h VoiceEncoderMel), T = 1 + n_trimmed / 160
//   partials: 160 frames starting every round(16000 / 1.3 / 160) = 77 frames (get_num_wins: the
//             last one is kept when it covers >= 0.8 of its frames), zero-padded past T
//   per partial: 3-layer LSTM(40 -> 256 -> 256 -> 256), last hidden h_T of the top layer
//                e = relu(proj(h_T)) / ||.||      (proj: Linear 256 -> 256)
//   speaker_emb = mean_partials(e) / ||.||   (embeds_from_wavs averages and re-normalises)
//
// The partials run through the LSTM (ops/lstm.h lstm_layer_batch) in groups of up to 16, the
// pool's threads owning whole partials. Runtime: one Arena reserved at construction (14.4 MB at
// full size for 10 s: the group's gate pre-activations dominate; +160 B per mel frame); embed()
// allocates only its result. Cost at full size: ~0.45 GFLOP per partial (12 for 10 s).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace cbx {

class GgufFile;
class ThreadPool;
struct ModelConfig;
struct Tensor;

class VoiceEncoder {
 public:
  // Binds ve.* weights (zero copy; errors name the tensor); reserves all scratch for inputs of up
  // to max_samples samples at 16 kHz. Throws cbx::Error.
  VoiceEncoder(const GgufFile& f, const ModelConfig& c, int64_t max_samples);
  ~VoiceEncoder();
  VoiceEncoder(const VoiceEncoder&) = delete;
  VoiceEncoder& operator=(const VoiceEncoder&) = delete;

  // wav: mono float at 16 kHz, what upstream feeds (prepare_conditionals: the whole 16 kHz
  // reference, not the ENC_COND_LEN cut the S3 tokenizer gets). Returns T3's speaker_emb [c.ve.embed_size=256] exactly
  // as upstream computes it (VoiceEncoder.embeds_from_wavs + the mean upstream takes). Throws cbx::Error (too short, n
  // > max_samples).
  std::vector<float> embed(ThreadPool& pool, const float* wav, int64_t n);

  // Debug / parity: called during later embed() calls with named intermediates:
  //   "trim" [2] kept sample range [begin, end) (as floats), "mel" [T, 40] of the trimmed wave,
  //   "partials" [P, E] the L2-normalised partial embeddings. Empty function: none.
  using Capture = std::function<void(const char* name, const Tensor& t)>;
  void set_capture(Capture fn);
  // Partials embed() will use for n samples (after the silence trim).
  int64_t num_partials(int64_t n_trimmed) const;

  // Bytes of the scratch arena reserved at construction.
  size_t arena_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
