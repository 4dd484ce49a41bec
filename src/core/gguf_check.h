// Non-finite (NaN / Inf) values in a GGUF's weights. A checkpoint that diverged in training,
// or a file damaged on disk, can carry NaN or Inf weights; they spread through the layers
// that use them and silently corrupt the audio (one NaN in a T3 weight of a tiny test model
// cut its speech short without an error). This scans the mapped tensor data once:
//  - f32 / f16 / bf16 / f64 tensors: every element, by testing its exponent bits (all ones
//    is Inf or NaN; a zero mantissa tells which);
//  - q8_0 / q4_0 tensors: the f16 scale of every 32-weight block (the quants themselves are
//    integers); a block counts once, and its index is reported as its first element's;
//    q4_k / q5_k: the same with both f16 scales (d, dmin) of every 256-weight super-block;
//  - integer tensors (token ids etc.) cannot hold a non-finite value and are skipped.
// Each chunk is first tested with a branch-free OR over the exponent tests (vectorised for the
// plain types); only a chunk that has a non-finite value is scanned again element by element
// for the counts and the first index. With a pool the chunks are shared out over its threads.
// Used by `chatterbox info --check` (every offending tensor) and by convert / quantize, which
// refuse to write a model with NaN / Inf weights. Model loading does not scan: the scan reads
// every byte of the file, a large share of a load that maps the file and leaves most of it to
// the first synthesis.
// check_finite_weights is the one call to add to a load path that wants the check anyway.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cbx {

class GgufFile;
class ThreadPool;

struct NonFiniteCount {
  int64_t nan = 0;     // NaN elements (plain types) or blocks with a NaN scale (q8_0 / q4_0)
  int64_t inf = 0;     // +-Inf elements, or blocks with an infinite scale
  int64_t first = -1;  // row-major element index of the first NaN / Inf (block start); -1: none
  bool any() const { return nan + inf > 0; }
};

// True for the types whose counts are blocks (q8_0, q4_0, q4_k, q5_k), false for plain types.
bool non_finite_counts_blocks(DType dt);

// Counts the non-finite values in n elements of type dt at data (n a multiple of the block
// size). Integer types return an empty count.
NonFiniteCount count_non_finite(DType dt, const void* data, int64_t n);

struct NonFiniteTensor {
  std::string name;
  DType dtype;
  NonFiniteCount count;
};

// Every tensor of f with a non-finite value, in file order (empty: all finite). pool may be
// null (the caller's thread does all the work).
std::vector<NonFiniteTensor> find_non_finite(const GgufFile& f, ThreadPool* pool = nullptr);

// The one-line description of a tensor's non-finite values: "tensor 'x' (f16) has 3 NaN and
// 1 Inf values, the first at element 17" (blocks for q8_0 / q4_0).
std::string describe_non_finite(const NonFiniteTensor& t);

// Throws cbx::Error "<prefix>: <describe_non_finite> <suffix>" when the n elements of type dt at
// data hold a NaN / Inf (convert and quantize refuse to write such a tensor).
void check_finite_tensor(const std::string& name, DType dt, const void* data, int64_t n, const std::string& prefix,
                         const std::string& suffix);

// Throws cbx::Error when f has a non-finite weight: names the file, the first such tensor,
// its counts, how many other tensors have some, and `chatterbox info --check`.
void check_finite_weights(const GgufFile& f, ThreadPool* pool = nullptr);

}  // namespace cbx
