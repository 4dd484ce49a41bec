// Non-finite weight scan (gguf_check.h): exponent-bit tests over the mapped tensor data.
#include "core/gguf_check.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"

namespace cbx {

namespace {

// Bits of an IEEE value: all exponent bits set is Inf (zero mantissa) or NaN.
template <class U>
struct Bits {
  U exp;  // exponent field
  U abs;  // everything but the sign
};
constexpr Bits<uint64_t> kF64{0x7ff0000000000000ull, 0x7fffffffffffffffull};
constexpr Bits<uint32_t> kF32{0x7f800000u, 0x7fffffffu};
constexpr Bits<uint16_t> kF16{0x7c00, 0x7fff};
constexpr Bits<uint16_t> kBF16{0x7f80, 0x7fff};

// Branch-free "any non-finite" over n contiguous values; the compiler vectorises it.
template <class U>
bool any_plain(const U* p, int64_t n, Bits<U> b) {
  U acc = 0;
  for (int64_t i = 0; i < n; ++i) acc |= U((p[i] & b.exp) == b.exp);
  return acc != 0;
}

// The same over the f16 scales at the start of each of n blocks of `stride` bytes (and the
// second f16 after it, dmin, when `two`: the K-quants).
bool any_scale(const uint8_t* p, int64_t n, size_t stride, bool two) {
  unsigned acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t d[2] = {0, 0};
    std::memcpy(d, p + size_t(i) * stride, two ? 4 : 2);
    acc |= unsigned((d[0] & kF16.exp) == kF16.exp) | unsigned((d[1] & kF16.exp) == kF16.exp);
  }
  return acc != 0;
}

// Counts one value (u) at element index idx into c.
template <class U>
inline void tally(U u, Bits<U> b, int64_t idx, NonFiniteCount& c) {
  const U a = u & b.abs;
  if ((a & b.exp) != b.exp) return;
  if (a == b.exp)
    ++c.inf;
  else
    ++c.nan;
  if (c.first < 0) c.first = idx;
}

template <class U>
NonFiniteCount count_plain(const U* p, int64_t n, Bits<U> b, int64_t base) {
  NonFiniteCount c;
  if (!any_plain(p, n, b)) return c;
  for (int64_t i = 0; i < n; ++i) tally(p[i], b, base + i, c);
  return c;
}

NonFiniteCount count_blocks(const uint8_t* p, int64_t nb, size_t stride, int64_t block, int64_t base_block, bool two) {
  NonFiniteCount c;
  if (!any_scale(p, nb, stride, two)) return c;
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t d[2] = {0, 0};
    std::memcpy(d, p + size_t(i) * stride, two ? 4 : 2);
    // A block counts once: by d when d is non-finite, else by dmin.
    tally((d[0] & kF16.exp) == kF16.exp ? d[0] : d[1], kF16, (base_block + i) * block, c);
  }
  return c;
}

// Elements [e0, e1) of a tensor of type dt starting at data (e0, e1 multiples of the block size).
NonFiniteCount count_range(DType dt, const uint8_t* data, int64_t e0, int64_t e1) {
  const int64_t n = e1 - e0;
  switch (dt) {
    case DType::F64:
      return count_plain(reinterpret_cast<const uint64_t*>(data) + e0, n, kF64, e0);
    case DType::F32:
      return count_plain(reinterpret_cast<const uint32_t*>(data) + e0, n, kF32, e0);
    case DType::F16:
      return count_plain(reinterpret_cast<const uint16_t*>(data) + e0, n, kF16, e0);
    case DType::BF16:
      return count_plain(reinterpret_cast<const uint16_t*>(data) + e0, n, kBF16, e0);
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K: {
      const TypeTraits& tr = type_traits(dt);
      const int64_t b0 = e0 / tr.block_size;
      return count_blocks(data + size_t(b0) * tr.block_bytes, n / tr.block_size, tr.block_bytes, tr.block_size, b0,
                          dt == DType::Q4_K || dt == DType::Q5_K);
    }
    default:
      return {};  // integer types
  }
}

bool scanned(DType dt) {
  switch (dt) {
    case DType::F64:
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::Q5_K:
      return true;
    default:
      return false;
  }
}

void add(NonFiniteCount& to, const NonFiniteCount& c) {
  to.nan += c.nan;
  to.inf += c.inf;
  if (to.first < 0) to.first = c.first;
}

// A piece of one tensor: elements [e0, e1).
struct Chunk {
  size_t tensor;
  int64_t e0, e1;
};

// ~256 KiB of tensor data per chunk: small enough to share ~1 GB out evenly over the
// threads, large enough that claiming one costs nothing next to reading it.
constexpr size_t kChunkBytes = size_t(256) << 10;

}  // namespace

bool non_finite_counts_blocks(DType dt) { return type_traits(dt).is_quantized; }

NonFiniteCount count_non_finite(DType dt, const void* data, int64_t n) {
  const TypeTraits& tr = type_traits(dt);
  CBX_CHECK(n >= 0 && n % tr.block_size == 0, "count_non_finite: %lld elements of %s (not whole blocks)", (long long)n,
            tr.name);
  return count_range(dt, static_cast<const uint8_t*>(data), 0, n);
}

std::vector<NonFiniteTensor> find_non_finite(const GgufFile& f, ThreadPool* pool) {
  const std::vector<GgufTensorInfo>& ts = f.tensors();
  std::vector<const uint8_t*> data(ts.size(), nullptr);
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < ts.size(); ++t) {
    const GgufTensorInfo& ti = ts[t];
    if (!scanned(ti.dtype)) continue;
    data[t] = static_cast<const uint8_t*>(f.tensor(ti).data);
    const TypeTraits& tr = type_traits(ti.dtype);
    const int64_t numel = int64_t(ti.nbytes / tr.block_bytes) * tr.block_size;
    const int64_t step = std::max<int64_t>(1, int64_t(kChunkBytes / tr.block_bytes)) * tr.block_size;
    for (int64_t e = 0; e < numel; e += step) chunks.push_back({t, e, std::min(numel, e + step)});
  }

  std::vector<NonFiniteCount> counts(chunks.size());
  std::atomic<size_t> next{0};
  auto work = [&](int, int) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks.size();) {
      const Chunk& c = chunks[i];
      counts[i] = count_range(ts[c.tensor].dtype, data[c.tensor], c.e0, c.e1);
    }
  };
  if (pool)
    pool->run(work);
  else
    work(0, 1);

  // Chunks are in file order and, within a tensor, in element order: the first offending
  // chunk of a tensor holds its first offending element.
  std::vector<NonFiniteTensor> out;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!counts[i].any()) continue;
    const size_t t = chunks[i].tensor;
    if (out.empty() || out.back().name != ts[t].name) out.push_back({ts[t].name, ts[t].dtype, {}});
    add(out.back().count, counts[i]);
  }
  return out;
}

std::string describe_non_finite(const NonFiniteTensor& t) {
  const bool blocks = non_finite_counts_blocks(t.dtype);
  char buf[256];
  std::snprintf(buf, sizeof buf, "has %lld NaN and %lld Inf %s, the first at element %lld", (long long)t.count.nan,
                (long long)t.count.inf, blocks ? "block scales" : "values", (long long)t.count.first);
  return "tensor '" + t.name + "' (" + dtype_name(t.dtype) + ") " + buf;
}

void check_finite_tensor(const std::string& name, DType dt, const void* data, int64_t n, const std::string& prefix,
                         const std::string& suffix) {
  const NonFiniteCount c = count_non_finite(dt, data, n);
  if (c.any()) fail("%s: %s %s", prefix.c_str(), describe_non_finite({name, dt, c}).c_str(), suffix.c_str());
}

void check_finite_weights(const GgufFile& f, ThreadPool* pool) {
  const std::vector<NonFiniteTensor> bad = find_non_finite(f, pool);
  if (bad.empty()) return;
  std::string more;
  if (bad.size() > 1) more = " (and " + std::to_string(bad.size() - 1) + " more tensors with non-finite values)";
  fail(
      "%s: %s%s; the model is damaged (NaN / Inf weights corrupt the audio): run `chatterbox info --check %s` "
      "for the full list",
      f.path().c_str(), describe_non_finite(bad[0]).c_str(), more.c_str(), f.path().c_str());
}

}  // namespace cbx
