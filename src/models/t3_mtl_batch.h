// Continuous batching of the T3 Multilingual decode across requests (a server's requests).
//
// Up to max_batch requests decode together. A request is a CFG pair of rows (cond, uncond), or
// one row when its cfg_weight <= 0 (as T3Mtl::generate, whose two rows would be identical).
// Every step() advances all active rows by one token as one batch, so each weight matrix is
// read once per step for all of them (RowLinear::run_rows). Requests join (start) and leave
// (finish, release) between steps. Each request has its own KV slots (one per row), positions,
// sampler (its own seed) and token limit, and its tokens are the ones T3Mtl::generate gives
// for the same inputs alone:
//  - start() runs the request's prefill on the T3Mtl's own backbone (T3Mtl::prefill, exactly
//    generate's, or T3Mtl::prefill_cached with the voice prefix below: the same caches and
//    logits), samples step 0 from its logits and copies the rows' text + BOS keys/values into
//    the request's slots;
//  - a step computes each row with T3Llama's fused one-token decode kernels in the same order
//    (run_rows gives every activation row the one-row run's bits; RoPE angles formed per row
//    from its position as the fused decode forms them; attention reads the voice prefix and
//    the row's own keys as two segments of one online softmax, the bits of one cache holding
//    both: ops/attention.h attention_part_split_multi, the rows of one prefix together);
//  - sampling is generate's loop, per request (MtlSampler, history = BOS + tokens).
// Voice prefixes: the conditioning positions (speaker, perceiver-resampled prompt, emotion:
// they depend on the speaker embedding, the prompt tokens and the exaggeration) are the same
// for the cond and uncond rows, so every row of every request with the same conditioning
// references one copy of their keys/values (shared_ptr). A CFG request whose prefix is held
// skips the conditioning encoder and the prefix forward (prefill_cached). Single-row requests
// (cfg_weight <= 0) prefill the prefix and text as one forward, as generate does: they share a
// copy only when their prefix came out with the same bytes, and never with CFG requests.
// Prefixes no request uses are kept up to kIdlePrefixes (the most recently used; as T3Batch).
// Memory: every buffer a step uses (slots for 2 * max_batch rows of the positions after the
// prefix, per-thread rows) is reserved at construction; a slot's pages become resident only
// as positions are written. step() allocates nothing; start() allocates the request's
// sampler and, for a new prefix, its copy.
// Not thread-safe: one caller drives it (and the T3Mtl, whose backbone start() uses).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "core/work_split.h"
#include "models/model_config.h"
#include "models/sampler.h"
#include "models/t3_mtl.h"

namespace cbx {

class T3Llama;

class T3MtlBatch {
 public:
  // t3: its weights and backbone (prefills) are used; it must outlive this object.
  T3MtlBatch(T3Mtl& t3, ThreadPool& pool, int max_batch);
  T3MtlBatch(const T3MtlBatch&) = delete;
  T3MtlBatch& operator=(const T3MtlBatch&) = delete;

  // Joins a request: prefill, step 0 sampled. max_new < 0: the T3Mtl's max_new_tokens.
  // ignore_eos: decode exactly max_new tokens (generate's force_n_tokens, for benchmarks).
  // Returns the request's id (0 .. max_batch - 1). Throws cbx::Error when no request slot is
  // free or an input is out of range (as generate).
  int start(const T3MtlCond& cond, const std::vector<int32_t>& text_tokens, const T3MtlSampling& s,
            int64_t max_new = -1, bool ignore_eos = false);
  // One decode step of every active, unfinished request; returns how many requests it
  // advanced (0: nothing to do). A request finishes after EOS or at its max_new tokens.
  int step();

  bool active(int req) const;    // started and not released
  bool finished(int req) const;  // active and done decoding
  // The tokens so far (generate's return value once finished: EOS kept); valid until release.
  const std::vector<int32_t>& tokens(int req) const;
  // Whether the request stopped because every processed logit was -inf (generate throws then;
  // a batch step cannot, so the request ends and the caller reports it).
  bool all_inf(int req) const;
  // generate's stats for the request (decode_ms: the whole steps it took part in).
  T3MtlStats stats(int req) const;
  // Whether the request's voice prefix was held when it joined (its prefix not computed again).
  bool prefix_reused(int req) const;
  // Frees the request's slots (finished or not: cancellation) and its voice prefix reference.
  void release(int req);

  int max_batch() const { return max_batch_; }
  int n_active() const;    // started, not released
  int n_decoding() const;  // active and not finished
  int free_slots() const { return max_batch_ - n_active(); }
  // Bytes reserved for one row's KV slot (the positions after its prefix; resident only as
  // written) and for all of them (2 * max_batch rows).
  size_t row_slot_bytes() const { return 2 * size_t(n_layer_) * size_t(n_kv_head_) * head_bytes_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // The step arena: its capacity (planned from the buffers the constructor takes) and its
  // high-water mark.
  size_t arena_bytes() const { return arena_.capacity(); }
  size_t arena_high_water() const { return arena_.high_water(); }
  size_t n_prefixes() const { return prefixes_.size(); }  // voice prefixes held (in use or idle)
  size_t n_idle_prefixes() const;                         // held with no request using them
  size_t prefix_bytes() const;                            // their keys/values
  static constexpr size_t kIdlePrefixes = 2;

 private:
  struct Prefix {
    std::vector<float> speaker;
    std::vector<int32_t> prompt;
    float exaggeration = 0.f;
    int64_t n_rows = 0;       // 2: computed alone (CFG prefill), 1: with the text (single-row prefill)
    int64_t rows = 0;         // positions
    std::vector<uint8_t> kv;  // T3Llama::save_prefix layout
  };
  struct Req {
    bool active = false, finished = false, ignore_eos = false, all_inf = false, prefix_reused = false;
    std::shared_ptr<const Prefix> prefix;
    int64_t n_rows = 0;  // 1 or 2
    std::unique_ptr<MtlSampler> sampler;
    std::vector<int32_t> history;  // BOS + tokens
    std::vector<int32_t> out;      // tokens
    int64_t limit = 0, prompt_len = 0;
    T3MtlStats st;
    double kv_sum = 0;
  };
  // The held prefix for cond (most recently used last) or null; n_rows as Prefix::n_rows.
  std::shared_ptr<const Prefix> find_prefix(const T3MtlCond& cond, int64_t n_rows);
  // Keeps the backbone's sequence 0 positions [0, rows) as cond's prefix (or takes the held one
  // with the same bytes), then drops the oldest idle prefixes beyond kIdlePrefixes.
  std::shared_ptr<const Prefix> keep_prefix(const T3MtlCond& cond, int64_t n_rows, int64_t rows);
  void trim_idle_prefixes();
  // K or V of layer l, row slot s (request * 2 + sequence), KV head h: the first position after
  // the request's prefix first.
  uint8_t* slot_head(int s, int l, int kv, int64_t h) const;
  void decode(int n_rows);
  void check_req(int req) const;

  T3Mtl& t3_;
  T3Llama& llama_;
  const T3Config& c_;
  ThreadPool& pool_;
  int max_batch_ = 0, n_layer_ = 0;
  int64_t n_kv_head_ = 0, max_ctx_ = 0;
  int64_t slot_rows_ = 0;  // positions after the prefix: SOT text EOT, BOS BOS, max_new
  size_t head_bytes_ = 0;  // slot_rows_ positions of one head
  size_t slot_bytes_ = 0;
  std::unique_ptr<uint8_t[]> slots_;  // [request][sequence][layer][K, V][H_kv][slot_rows_][D], kv type
  std::vector<Req> reqs_;
  std::vector<std::shared_ptr<const Prefix>> prefixes_;
  // Per step: the activation rows' request, sequence and position (of the token fed).
  std::vector<int> step_reqs_, row_req_, row_seq_;
  std::vector<int64_t> row_pos_;
  // Step buffers: inputs, activations and logits of 2 * max_batch rows, per-thread rows.
  Arena arena_;
  Tensor ids_, pos_ids_, emb_, pe_, x_, q_, k_, v_, att_, g_, u_, logits_, rope_;
  float* thread_h_ = nullptr;      // [nt, rows, d]
  float* thread_tmp_ = nullptr;    // [nt, rows, d]
  uint8_t* thread_act_ = nullptr;  // 2 * nt blocks of rows * act_stride_ bytes
  size_t act_stride_ = 0;
  std::vector<WorkSplit> splits_;
  std::vector<Tensor> kv_views_;  // per step: [row][layer][K prefix, K own, V prefix, V own]
};

}  // namespace cbx
