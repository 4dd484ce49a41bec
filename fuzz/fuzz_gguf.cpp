// libFuzzer target for the GGUF reader (and writer): any input must either parse or throw
// cbx::Error. A parsed file's tensors and metadata are touched (first/last byte of every
// tensor, every metadata value through the accessors), then the file is rewritten with
// GgufWriter and re-read; the round trip must give the same metadata and tensor bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"

namespace {

volatile uint64_t g_sink;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_gguf: round trip mismatch: %s\n", what);
  std::abort();
}

template <typename F>
void may_throw(F f) {
  try {
    f();
  } catch (const cbx::Error&) {
  }
}

void touch(const cbx::GgufValue& v) {
  may_throw([&] { g_sink = g_sink + uint64_t(v.as_int()); });
  may_throw([&] { g_sink = g_sink + uint64_t(v.as_float() != 0); });
  may_throw([&] { g_sink = g_sink + v.as_bool(); });
  may_throw([&] { g_sink = g_sink + v.as_string().size(); });
  may_throw([&] { g_sink = g_sink + v.as_int_array().size(); });
  may_throw([&] { g_sink = g_sink + v.as_float_array().size(); });
  may_throw([&] { g_sink = g_sink + v.as_string_array().size(); });
  if (v.type == cbx::GgufType::ARRAY)
    for (const cbx::GgufValue& x : v.as_array().items) touch(x);
}

void round_trip(const cbx::GgufFile& g) {
  // Files with a huge alignment would make the rewrite allocate that much padding.
  if (g.alignment() > 65536) return;
  cbx::GgufWriter w;
  for (const std::string& k : g.keys()) w.set_value(k, g.get(k));
  for (const cbx::GgufTensorInfo& ti : g.tensors()) {
    cbx::Tensor t = g.tensor(ti);
    w.add_tensor(ti.name, ti.dtype, std::vector<int64_t>(ti.shape, ti.shape + ti.ndim), t.data, ti.nbytes);
  }
  std::vector<uint8_t> bytes = w.to_bytes();
  auto h = cbx::GgufFile::from_memory(bytes.data(), bytes.size(), "rewritten");
  if (h->keys() != g.keys()) finding("keys");
  for (const std::string& k : g.keys())
    if (!cbx::same_value(g.get(k), h->get(k))) finding("metadata value");
  if (h->alignment() != g.alignment()) finding("alignment");
  if (h->tensors().size() != g.tensors().size()) finding("tensor count");
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const cbx::GgufTensorInfo& a = g.tensors()[i];
    const cbx::GgufTensorInfo& b = h->tensors()[i];
    if (a.name != b.name || a.dtype != b.dtype || a.ndim != b.ndim || a.nbytes != b.nbytes) finding("tensor info");
    for (int d = 0; d < a.ndim; ++d)
      if (a.shape[d] != b.shape[d]) finding("tensor shape");
    if (std::memcmp(g.tensor(a).data, h->tensor(b).data, a.nbytes) != 0) finding("tensor data");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<cbx::GgufFile> g;
  try {
    g = cbx::GgufFile::from_memory(data, size, "fuzz.gguf");
  } catch (const cbx::Error&) {
    return 0;
  }
  for (const std::string& k : g->keys()) touch(g->get(k));
  for (const cbx::GgufTensorInfo& ti : g->tensors()) {
    cbx::Tensor t = g->tensor(ti.name);
    const auto* p = static_cast<const uint8_t*>(t.data);
    g_sink = g_sink + p[0] + p[t.nbytes() - 1];
  }
  // A file that parsed must also survive the writer and parse back identically.
  round_trip(*g);
  return 0;
}
