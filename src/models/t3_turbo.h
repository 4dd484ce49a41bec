// T3 Turbo/Nano inference (t3.py inference_turbo; spec §6.4, §6.5, §6.7, §6.8, §7).
//
// Prompt (inputs_embeds, wpe added by the backbone at every absolute position):
//   0          spkr_enc(speaker_emb)                 Linear(S -> d, bias)
//   1 .. P     speech_emb(prompt_tokens)             P <= cond_prompt_len (375)
//   P+1 .. +Lt text_emb(text_ids)                    GPT-2 BPE ids, no SOT/EOT
//   last       speech_emb(6561)                      BOS, once
// Generation: one token is sampled from the prefill logits (repetition history [6561]);
// then up to max_new more, each fed back as speech_emb(token), with the generated tokens as
// the history. The loop stops on EOS 6562 (the prefill token is not checked, as upstream)
// or when every processed logit is -inf (nothing appended then). A trailing EOS is dropped.
// Post-processing (tts_turbo.py): keep tokens < 6561, append n_silence_tokens (3) x 4299.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "models/sampler.h"
#include "models/t3_gpt2.h"

namespace cbx {

class GgufFile;

struct T3TurboOptions {
  int64_t max_text = 1024;  // GPT-2 tokenizer model_max_length (text is truncated there)
  int64_t max_prompt = 0;   // 0 = t3.cond_prompt_len
  int64_t max_new = -1;     // tokens after the prefill one; -1 = pipeline.max_new_tokens
  DType kv_type = DType::F16;
  bool pack_planar = true;       // T3Gpt2Options::pack_planar
  int64_t row_prefill_max = -1;  // T3Gpt2Options::row_prefill_max (-1: automatic)
  // Keep the keys/values of the voice prefix (speaker row + prompt speech tokens, rows that
  // do not depend on the text) and reuse them while the voice stays the same (T3Turbo::prefill).
  bool prefix_cache = true;
  std::function<void(size_t bytes)> on_packed;  // T3Gpt2Options::on_packed
};

struct T3TurboResult {
  std::vector<int32_t> tokens;         // as sampled, trailing EOS removed
  std::vector<int32_t> speech_tokens;  // post-processed for S3Gen
  bool stopped_eos = false;
  bool stopped_all_inf = false;
  int64_t prompt_len = 0;      // prefill rows
  bool prefix_reused = false;  // the voice prefix came from the cache (T3Turbo::prefill)
  int64_t n_decode = 0;        // single-token forward calls
  double prefill_ms = 0, decode_ms = 0;
};

// Called once per sampled position with the raw speech logits [speech_vocab], the processed
// ones (sampler steps 1-4) and the token picked (-1 when every processed logit was -inf).
// step 0 is the prefill. Both pointers are valid during the call only.
using T3StepFn = std::function<void(int64_t step, const float* logits, const float* processed, int32_t token)>;

class T3Turbo {
 public:
  // Reads the config from f and binds the T3 weights (f must outlive this object).
  T3Turbo(const GgufFile& f, ThreadPool& pool, const T3TurboOptions& o = {});
  T3Turbo(const ModelConfig& c, const GgufFile& f, ThreadPool& pool, const T3TurboOptions& o = {});
  T3Turbo(const T3Turbo&) = delete;  // the backbone holds references to cfg_ and w_
  T3Turbo& operator=(const T3Turbo&) = delete;

  // Assembles the prompt embeddings (row layout above) into the object's arena:
  // text_ids [Lt], speaker_emb [speaker_embed_size], prompt_tokens [P] -> [1 + P + Lt + 1, d].
  Tensor build_prompt(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
                      const int32_t* prompt_tokens, int64_t n_prompt);

  // Runs build_prompt's rows from an empty cache; returns the logits of the last row (valid
  // until the next forward). With the prefix cache on (T3TurboOptions::prefix_cache) and no
  // capture set on the backbone, it runs as two forward calls, the voice prefix (speaker row
  // + the n_prompt prompt tokens) and the rest (text + BOS), and keeps the prefix's keys and
  // values: a later prefill with the same speaker embedding and prompt tokens loads them
  // instead of running the prefix again. Loading gives the bits the forward would give (the
  // prefix rows never see the text), so results do not depend on the cache. *reused (when
  // given) says whether the prefix came from the cache.
  const Tensor& prefill(const Tensor& embeds, const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens,
                        int64_t n_prompt, bool* reused = nullptr);
  // Runs and keeps the voice prefix now (e.g. a server's voice at start-up), unless it is
  // cached already; returns the milliseconds spent. No-op with the prefix cache off.
  double warm_prefix(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens, int64_t n_prompt);

  // The kept voice prefix, for a disk cache (pipeline/prefix_cache.h): rows = 1 + n_prompt
  // (0: none kept), its speaker embedding and prompt tokens, and its keys/values
  // (T3Gpt2::save_kv_rows layout, prefix_kv_bytes(n_prompt) bytes).
  struct KeptPrefix {
    int64_t rows = 0;
    const float* speaker = nullptr;
    int64_t n_speaker = 0;
    const int32_t* tokens = nullptr;
    int64_t n_prompt = 0;
    const uint8_t* kv = nullptr;
    size_t kv_bytes = 0;
  };
  KeptPrefix kept_prefix() const;
  size_t prefix_kv_bytes(int64_t n_prompt) const;
  // Keeps keys/values read back from such a cache as the prefix of (speaker_emb,
  // prompt_tokens), as if prefill had computed them: kv holds prefix_kv_bytes(n_prompt) bytes
  // that kept_prefix() gave for the same voice, T3 weights, kernels and KV type (the cache
  // checks those). Throws cbx::Error with the prefix cache off or for sizes out of range.
  void keep_prefix(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens, int64_t n_prompt,
                   const uint8_t* kv);

  // max_new < 0 uses the options' max_new. Resets the KV cache first (prefill).
  T3TurboResult generate(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
                         const int32_t* prompt_tokens, int64_t n_prompt, const SamplerParams& sp, int64_t max_new = -1,
                         const T3StepFn& on_step = nullptr);

  // Keep tokens < 6561 and append the silence tokens (spec §7).
  std::vector<int32_t> postprocess(const std::vector<int32_t>& tokens) const;

  const ModelConfig& config() const { return cfg_; }
  const T3Gpt2Weights& weights() const { return w_; }
  T3Gpt2& backbone() { return *gpt_; }
  int64_t max_new() const { return max_new_; }
  // The pipeline's defaults (GGUF sampler.* metadata) as sampler parameters.
  SamplerParams default_sampler() const;

 private:
  void init(const GgufFile& f, const T3TurboOptions& o);

  ModelConfig cfg_;
  ThreadPool& pool_;
  T3Gpt2Weights w_;
  std::unique_ptr<T3Gpt2> gpt_;
  int64_t max_text_ = 0, max_prompt_ = 0, max_new_ = 0;
  Arena arena_;        // prompt embeddings, ids, the single-token embedding
  Tensor prompt_buf_;  // [max_batch, d]
  Tensor tok_emb_;     // [1, d]
  Tensor tok_id_;      // I32 [1]
  size_t mark_ = 0;
  // The voice prefix cache (prefill): keys/values of prefix_rows_ rows (0: none) and the
  // speaker embedding and prompt tokens they came from (capacity reserved at init).
  bool prefix_cache_ = true;
  std::unique_ptr<uint8_t[]> prefix_kv_;
  // prefix_kv_ has not changed since the backbone's last save_kv_rows / load_kv_rows with it
  // (T3Gpt2::kv_rows_source() says whether that was the last, kv_rows_unchanged() whether a
  // forward has written those cache rows since).
  bool cache_holds_prefix_ = false;
  std::vector<float> prefix_spk_;
  std::vector<int32_t> prefix_ids_;
  int64_t prefix_rows_ = 0;
  bool prefix_matches(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens,
                      int64_t n_prompt) const;
};

}  // namespace cbx
