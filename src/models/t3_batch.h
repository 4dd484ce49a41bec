// Continuous batching of the T3 Turbo/Nano decode across sequences (a server's requests).
//
// Up to max_batch rows decode together: every step() advances all active rows by one token as
// one batch, so each weight matrix is read once per step for all of them (RowLinear::run_rows).
// Rows join (start) and leave (finish, release) between steps. Each row has its own KV slot,
// position, sampler (its own seed) and token limit, and its tokens are the ones
// T3Turbo::generate gives for the same inputs alone:
//  - the row's prefill runs on the T3Turbo's own backbone, through T3Turbo::prefill (the voice
//    prefix from its cache, the text + BOS rows as one forward), exactly as generate runs it;
//    the text rows' keys/values are then copied into the row's slot;
//  - a step computes each row's outputs with the one-row decode's kernels in the same order
//    (run_rows gives every activation row the one-row run's bits; attention reads the voice
//    prefix and the row's own keys as two segments of one online softmax, the bits of one
//    cache holding both: ops/attention.h attention_part_split; the rows of one voice go through
//    attention_part_split_multi together, which gives each row those same bits);
//  - sampling is T3Turbo::generate's loop, per row.
// Voice prefixes: rows with the same speaker embedding and prompt tokens reference one copy of
// that prefix's keys/values (shared_ptr, taken from T3Turbo::kept_prefix when the first such
// row joins); in a step the heads are walked head-major, and per head the rows sharing a prefix
// read each of its rows once (loaded and widened for all of them together).
// Memory: every buffer a step uses (slots for max_batch rows of the longest sequence, per-thread
// rows) is reserved at construction; a slot's pages become resident only as rows are written.
// step() allocates nothing; start() allocates the row's sampler and, for a new voice, its prefix.
// Not thread-safe: one caller drives it (and the T3Turbo, whose backbone start() uses).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "core/work_split.h"
#include "models/sampler.h"
#include "models/t3_turbo.h"

namespace cbx {

class T3Batch {
 public:
  // turbo: its weights, planar copies and backbone (prefills) are used; it must outlive this
  // object and have its voice prefix cache on (T3TurboOptions::prefix_cache).
  T3Batch(T3Turbo& turbo, ThreadPool& pool, int max_batch);
  T3Batch(const T3Batch&) = delete;
  T3Batch& operator=(const T3Batch&) = delete;

  // Joins a row: prefill, the prefill token sampled (T3Turbo::generate's step 0). max_new < 0:
  // the T3Turbo's. Returns the row's id (its slot, 0 .. max_batch - 1). Throws cbx::Error when
  // no slot is free or an input is out of range (as generate).
  int start(const int32_t* text_ids, int64_t n_text, const float* speaker_emb, int64_t n_speaker,
            const int32_t* prompt_tokens, int64_t n_prompt, const SamplerParams& sp, int64_t max_new = -1);
  // One decode step of every active, unfinished row; returns how many rows it advanced (0:
  // nothing to do). A row finishes on EOS, when every logit is -inf, or at its max_new.
  int step();

  bool active(int row) const;    // started and not released
  bool finished(int row) const;  // active and done decoding
  // The tokens so far (as sampled, EOS included while not finished); valid until release.
  const std::vector<int32_t>& tokens(int row) const;
  // A finished row's result (T3TurboResult fields; prefill_ms / decode_ms: the row's prefill and
  // the steps it took part in, whole-step times).
  T3TurboResult result(int row) const;
  // Frees the row's slot (finished or not: cancellation) and its voice prefix reference.
  void release(int row);

  int max_batch() const { return max_batch_; }
  int n_active() const;    // started, not released
  int n_decoding() const;  // active and not finished
  int free_slots() const { return max_batch_ - n_active(); }
  size_t n_prefixes() const;  // voice prefixes held (a referenced one per voice in use)
  // Bytes reserved for the KV slots (resident only as rows are written).
  size_t slot_bytes() const { return slot_bytes_; }
  // The step arena: its capacity (planned from the buffers the constructor takes) and its
  // high-water mark.
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }

 private:
  struct Prefix {
    std::vector<float> speaker;
    std::vector<int32_t> tokens;
    int64_t rows = 0;
    std::unique_ptr<uint8_t[]> kv;  // T3Gpt2::save_kv_rows layout
  };
  struct Row {
    bool active = false, finished = false;
    std::shared_ptr<const Prefix> prefix;
    std::unique_ptr<TurboSampler> sampler;
    std::vector<int32_t> tokens;
    int64_t pos = 0;  // absolute position of the next input token
    int64_t max_new = 0, n_decode = 0, prompt_len = 0;
    bool stopped_eos = false, stopped_all_inf = false, prefix_reused = false;
    double prefill_ms = 0, decode_ms = 0;
  };
  std::shared_ptr<const Prefix> prefix_for(const float* speaker_emb, int64_t n_speaker, const int32_t* prompt_tokens,
                                           int64_t n_prompt);
  // K or V of layer l, slot s, head h: row 0 = the first position after the voice prefix.
  uint8_t* slot_head(int s, int l, int kv, int64_t h) const;
  void decode(const int* rows, int n);
  // The sampling half of a step for step row b (its logits): the token, the stop checks.
  void advance_row(int b, const float* logits);
  void check_row(int row) const;

  T3Turbo& turbo_;
  T3Gpt2& gpt_;
  const T3Config& c_;
  ThreadPool& pool_;
  int max_batch_ = 0;
  int64_t slot_rows_ = 0;  // own rows a slot holds: text + BOS + the prefill token + max_new
  size_t head_bytes_ = 0;  // slot_rows_ rows of one head
  size_t slot_bytes_ = 0;
  std::unique_ptr<uint8_t[]> slots_;  // [slot][layer][K, V][H][slot_rows_][D], kv type
  std::vector<Row> rows_;
  std::vector<std::shared_ptr<const Prefix>> prefixes_;
  // Step buffers: inputs, activations and logits of max_batch rows, per-thread rows.
  Arena arena_;
  Tensor ids_, pos_, emb_, pe_, x_, qkv_, att_, f1_, logits_;
  Tensor thread_h_, thread_tmp_;   // [nt, max_batch * d]
  uint8_t* thread_act_ = nullptr;  // nt x max_batch rows of act_stride bytes
  size_t act_stride_ = 0;
  std::vector<WorkSplit> splits_;
  std::vector<int> step_rows_;
  std::vector<Tensor> kv_views_;  // per step: [row][layer][K prefix, K own, V prefix, V own]
};

}  // namespace cbx
