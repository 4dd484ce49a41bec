// Progress of a model load (cbx_model_params.progress_callback, `chatterbox say`'s and `serve`'s
// loading line). A pipeline loads in stages, each reported when it is done:
//   Open              the GGUF read (header, metadata, mmap), the tokenizer and the built-in voice
//   T3                the T3 weights bound and packed (planar decode copies), its KV cache reserved
//   Flow, Cfm, Hift   S3Gen's flow encoder, CFM estimator and HiFT vocoder, each bound, packed
//                     (bf16 / int8 GEMM copies) and its buffers reserved
// A stage's share of the whole is the bytes it processes, so the reported fraction follows the
// work done: the planar copies T3 writes (RowLinear::pack_bytes of its matrices; none for f16 /
// f32 weights or without repack, whose T3 decodes from the GGUF layout and binds in no time), the
// bytes of the GGUF tensors S3Gen's stages read and pack (flow.*, cfm.*, hift.*), the header and
// voice.* for Open. Tensors the load does not touch (the voice encoders: ve.*, campplus.*, s3tok.*,
// read on the first voice build) count for nothing. T3 also reports its progress within the
// stage, a call per planar copy written (advance), the longest part of a quantized model's load.
// The fractions never decrease and only the last stage's report is exactly 1. Bytes are a
// proxy for time (an int8 CFM quantizes its weights, a slower pass per byte than a copy).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace cbx {

class GgufFile;

// Called with the fraction of the load done, in [0, 1]; return false to cancel the load.
using LoadProgressFn = std::function<bool(float)>;

enum class LoadStage { Open = 0, T3 = 1, Flow = 2, Cfm = 3, Hift = 4 };

class LoadProgress {
 public:
  // fn may be empty: then done() only checks the order of the stages.
  LoadProgress(LoadProgressFn fn, std::string path) : fn_(std::move(fn)), path_(std::move(path)) {}

  // Sizes the stages from the tensors of f (call once, right after opening it); t3_repack: the
  // load's repack option (T3's planar copies).
  void plan(const GgufFile& f, bool t3_repack);
  // Stage s is finished: reports the fraction of the planned bytes done so far (exactly 1 after
  // Hift). Throws AbortedError ("PATH: model load cancelled by the progress callback at N%")
  // when the callback returns false.
  void done(LoadStage s);
  // `bytes` more of stage s (the one in progress: its done() not yet called) are done; the
  // stage's count is capped at its planned bytes. Reports like done() (never 1) and throws
  // the same AbortedError when the callback returns false.
  void advance(LoadStage s, uint64_t bytes);

  // The planned bytes of a stage (tests, the CLI's -v).
  uint64_t stage_bytes(LoadStage s) const { return bytes_[int(s)]; }

  static constexpr int kStages = 5;

 private:
  LoadProgressFn fn_;
  std::string path_;
  uint64_t bytes_[kStages] = {};
  uint64_t done_bytes_ = 0;   // of the finished stages
  uint64_t stage_bytes_ = 0;  // of the stage in progress (advance)
  int next_ = 0;              // the stage done() expects next

  // Reports done_bytes_ + part of the planned total (1 when last), or throws AbortedError.
  void report(uint64_t part, bool last);
};

}  // namespace cbx
