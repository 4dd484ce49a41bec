// Disk cache of a Turbo voice's T3 prefix (chatterbox say --prompt-cache FILE): the keys and
// values of the speaker row + prompt speech tokens (T3Turbo::kept_prefix), so that a process
// that starts again with the same model and voice skips that forward (~1 s for the built-in
// voice on 2 cores). One voice per file; the file is ours only (a magic number), written
// whole to a temporary file renamed over FILE (core/output_file.h). Only regular files: a device
// node, FIFO or directory given as the cache is refused, never replaced.
//
// Layout (little-endian):
//   0   char[8]  "CBXPREFX"
//   8   u32      version (1)
//   12  u32      0
//   16  u64      model fingerprint (prefix_cache_model_key: the GGUF's t3.* tensors)
//   24  char[64] compute path (prefix_cache_compute_key: ISA, bf16 GEMM, precision, KV type),
//                NUL padded
//   88  i64      n_speaker     96 i64 n_prompt     104 u64 kv_bytes
//   112 f32[n_speaker] speaker embedding, i32[n_prompt] prompt tokens, u8[kv_bytes] K/V
//   end u64      checksum of every byte before it: h = 0xcbf29ce484222325, then for each
//                64-bit little-endian word w (the last one zero padded) h = (h ^ w) * 0x100000001b3
// The keys/values are bits of our own forward, so a file is used only where the same T3
// weights run on the same kernels (the prefix does not depend on the thread count).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "ops/matmul.h"

namespace cbx {

class GgufFile;

struct PrefixCacheKey {
  uint64_t model = 0;   // prefix_cache_model_key
  std::string compute;  // prefix_cache_compute_key (< 64 bytes)
  const float* speaker = nullptr;
  int64_t n_speaker = 0;
  const int32_t* tokens = nullptr;
  int64_t n_prompt = 0;
  size_t kv_bytes = 0;  // the prefix's K/V bytes on this model (T3Turbo::prefix_kv_bytes)
};

enum class PrefixCacheStatus {
  Match,     // the file holds this key's prefix: *kv points at its bytes
  Mismatch,  // a sound cache of another voice, model, kernel path or format version
  Damaged,   // ours (magic) but truncated, resized or failing its checksum
  NotOurs,   // not a prefix cache at all (no magic): never overwrite it
};

// Checks the image of a cache file (n bytes) against want. Reads nothing outside
// [data, data + n); *why says what did not match (empty on Match).
PrefixCacheStatus parse_prefix_cache(const uint8_t* data, size_t n, const PrefixCacheKey& want, const uint8_t** kv,
                                     std::string* why);

// Writes key's voice and kv (key.kv_bytes bytes) to path through an OutputFile that must not
// replace any of `inputs` (the model). Throws cbx::Error naming the path when it cannot.
void write_prefix_cache(const std::string& path, const PrefixCacheKey& key, const uint8_t* kv,
                        const std::vector<OutputInput>& inputs = {});
// Throws when path exists and is not a regular file.
void check_prefix_cache_path(const std::string& path);

// FNV-1a 64 over the names, types, shapes and sizes of the GGUF's t3.* tensors and 64 bytes
// of their data every 64 KB (plus each tensor's last 64): a re-converted or re-quantized T3
// changes it, reading ~0.1% of the weights.
uint64_t prefix_cache_model_key(const GgufFile& f);
// "isa=avx512 bf16=vdpbf16ps gemm=auto kv=f16": what else decides the prefix's bits (gemm: the
// model's load-time GEMM precision, TurboLoadParams::gemm).
std::string prefix_cache_compute_key(const char* kv_type_name, GemmPrecision gemm = GemmPrecision::Auto);

}  // namespace cbx
