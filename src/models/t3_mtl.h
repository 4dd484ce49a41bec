// T3 Multilingual inference (t3.py T3.inference; spec §3.2, §6.4-§6.8, §15).
//
// Prefill (B = 2 rows, cond / uncond; absolute RoPE positions):
//   0            spkr_enc(speaker_emb)                               Linear(256 -> d, bias)
//   1 .. 32      perceiver(speech_emb(prompt) + speech_pos_emb[0..P-1])   (absent when P == 0)
//   33           emotion_adv_fc * exaggeration                       Linear(1 -> d, no bias)
//   34 ..        text_emb(SOT, text..., EOT) + text_pos_emb[0..Lt+1]; the uncond row's token
//                embeddings are zeroed (positions kept) when cfg_weight > 0
//   then         BOS twice: speech_emb(6561) + speech_pos_emb[0] (upstream quirk)
// Step k >= 0 samples from logits = cond + w (cond - uncond), Multilingual order (CFG ->
// repetition (history = BOS + generated) -> temperature -> min-p -> top-p -> multinomial),
// and feeds speech_emb(tok) + speech_pos_emb[k+1] to both rows. Stops after EOS (kept in the
// result, as upstream) or max_new_tokens. With cfg_weight == 0 both rows are identical, so
// one row is run (same logits, half the work). The 34 conditioning rows are the same in both
// sequences: the prefill runs them once and copies their keys/values to the uncond cache.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cbx {

class GgufFile;
class ThreadPool;
class T3Llama;
struct ModelConfig;

struct T3MtlLoadParams {
  DType kv_type = DType::F16;
  int64_t max_new_tokens = -1;  // -1: GGUF's (1000)
  int64_t max_text_tokens = 2048;
  bool pack_planar = true;  // T3LlamaOptions::pack_planar (q4p / q8p copies of Q4_0 / Q8_0 matrices)
  std::function<void(size_t bytes)> on_packed;  // T3LlamaOptions::on_packed
};

struct T3MtlCond {                          // T3 conditioning (from a Voice)
  std::vector<float> speaker_emb;           // [256]
  std::vector<int32_t> cond_prompt_tokens;  // [<= 150]; empty = no prompt (upstream None: 2 cond tokens)
  float exaggeration = 0.5f;                // emotion_adv
};

struct T3MtlSampling {
  float cfg_weight = 0.5f, temperature = 0.8f, min_p = 0.05f, top_p = 1.0f, repetition_penalty = 1.2f;
  uint64_t seed = 0;
  bool greedy = false;  // full chain, then argmax
};

struct T3MtlStats {
  double prefill_ms = 0,
         decode_ms = 0;    // prefill: cond encoder + prompt + first forward; decode: the rest
  int64_t n_steps = 0;     // tokens sampled (= returned tokens)
  bool hit_limit = false;  // stopped by max_new_tokens (no EOS)
  double weight_bytes_per_step = 0,
         kv_bytes_per_step = 0;  // per decode forward (kv: mean over the run)
  // additions
  int64_t n_decode = 0;    // single-token forward calls after the prefill (decode tok/s = n_decode / decode_ms)
  int64_t prompt_len = 0;  // prefill tokens per row
  int64_t n_rows = 0;      // batch rows run (2 with CFG, 1 when cfg_weight <= 0)
  bool aborted = false;    // should_abort returned true
};

// Debug view of one sampled step (pointers valid during the callback only). uncond is null
// when only the cond row ran (cfg_weight == 0). step 0 samples from the prefill logits.
struct T3MtlStep {
  int64_t step = 0;
  const float* cond = nullptr;       // [speech_vocab] raw logits, row 0
  const float* uncond = nullptr;     // [speech_vocab] raw logits, row 1
  const float* guided = nullptr;     // cond + w (cond - uncond)
  const float* processed = nullptr;  // after repetition, temperature, min-p, top-p
  int32_t token = -1;
};
using T3MtlStepFn = std::function<void(const T3MtlStep&)>;

struct MtlSamplerParams;
// The sampler's parameters for s (generate's and T3MtlBatch's sampler).
MtlSamplerParams mtl_sampler_params(const T3MtlSampling& s);

class T3Mtl {
 public:
  T3Mtl(const GgufFile& f, const ModelConfig& c, ThreadPool& pool, const T3MtlLoadParams& p = {});
  ~T3Mtl();
  T3Mtl(const T3Mtl&) = delete;
  T3Mtl& operator=(const T3Mtl&) = delete;

  // text_tokens: MtlTokenizer output (language tag included, no SOT/EOT: T3 adds them as upstream
  // does). Returns the generated speech tokens as upstream's generate returns them BEFORE pipeline
  // post-processing (the pipeline does drop_invalid_tokens / tail trim). should_abort polled
  // between steps (may be null). on_token (may be null) gets every sampled token as soon as it is
  // sampled, EOS included (streaming); an exception it throws leaves generate.
  std::vector<int32_t> generate(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, const T3MtlSampling& s,
                                T3MtlStats* stats = nullptr, const std::function<bool()>& should_abort = nullptr,
                                int64_t force_n_tokens = -1 /* bench: ignore EOS, exactly N tokens */,
                                const std::function<void(int32_t)>& on_token = nullptr);

  // ---- additions (debug, pipeline defaults) ----
  // The conditioning tokens [n, d] row-major (n = 34 with a prompt, 2 without).
  std::vector<float> cond_embeddings(const T3MtlCond& cond);
  // Called once per sampled step by generate (null to clear).
  void set_step_callback(T3MtlStepFn fn);
  // Decode steps through T3Llama's fused one-run step (default) or op by op (same tokens;
  // for A/B timing).
  void set_fused_decode(bool on);
  // Bytes of the decode's re-laid-out (q4p / q8p) weight copies.
  size_t packed_weight_bytes() const;
  // The GGUF's sampler.* / pipeline defaults.
  T3MtlSampling default_sampling() const;
  int64_t max_new_tokens() const;
  const ModelConfig& config() const;

  // ---- batching (models/t3_mtl_batch.h) ----
  // generate's prefill alone (the same checks and errors): the cond row, and the uncond row
  // when cfg_weight > 0, on the backbone. Returns their logits [1 or 2, speech_vocab] (valid
  // until the backbone's next call); their keys/values are left in backbone() sequences 0
  // (cond) and 1 (uncond), positions [0, *prompt_len).
  Tensor prefill(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, float cfg_weight, int64_t* prompt_len);
  // prefill for a CFG pair (cfg_weight > 0) with the conditioning prefix's keys/values taken
  // from prefix_kv instead of computed: T3Llama::save_prefix's copy of cond_len(cond) positions
  // that an earlier prefill of the same cond with cfg_weight > 0 left in sequence 0. The same
  // checks, logits and caches as prefill (which runs the prefix as one forward and copies it to
  // the uncond sequence); the conditioning encoder and the prefix forward are skipped.
  Tensor prefill_cached(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, float cfg_weight,
                        const void* prefix_kv, int64_t* prompt_len);
  // Conditioning positions (the prefix) for cond, and the most any cond gives.
  int64_t cond_len(const T3MtlCond& cond) const;
  int64_t max_cond_len() const;
  T3Llama& backbone();
  // speech_emb and speech_pos_emb tables: a fed-back token k is speech_emb[tok] +
  // speech_pos_emb[k + 1] (get_rows, then add).
  const Tensor& speech_emb_table() const;
  const Tensor& speech_pos_table() const;
  int64_t max_prefill_tokens() const;  // positions a prefill can take (conditioning, text, BOS)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
