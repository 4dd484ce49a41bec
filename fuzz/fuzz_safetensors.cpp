// libFuzzer target for the safetensors reader (and writer): any input must either parse or
// throw cbx::Error. Every tensor of a parsed file is read and converted; the file is then
// rewritten with write_safetensors and must read back with the same names, dtypes, shapes,
// bytes and metadata.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "convert/safetensors.h"
#include "core/error.h"

namespace {

volatile uint64_t g_sink;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: round trip mismatch: %s\n", what);
  std::abort();
}

void round_trip(const cbx::SafetensorsFile& f, const std::vector<cbx::CkptTensor>& ts) {
  static const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                  "/fuzz_safetensors_" + std::to_string(getpid()) + ".safetensors";
  std::vector<const cbx::CkptTensor*> ptrs;
  for (const auto& t : ts) ptrs.push_back(&t);
  // What the reader accepted, the writer must write and the reader read back: a library error
  // inside the round trip is a finding, reported with its message (not a terminate()).
  std::unique_ptr<cbx::SafetensorsFile> g;
  try {
    cbx::write_safetensors(path, ptrs, f.metadata());
    g = cbx::SafetensorsFile::open(path);
  } catch (const cbx::Error& e) {
    std::remove(path.c_str());
    std::fprintf(stderr, "fuzz_safetensors: round trip failed: %s\n", e.what());
    std::abort();
  }
  std::remove(path.c_str());
  if (g->names() != f.names()) finding("names");
  if (g->metadata() != f.metadata()) finding("metadata");
  for (const auto& t : ts) {
    cbx::CkptTensor u = g->read(t.name);
    if (u.dtype != t.dtype || u.shape != t.shape || u.data != t.data) finding("tensor");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<cbx::SafetensorsFile> f;
  try {
    f = cbx::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
  } catch (const cbx::Error&) {
    return 0;
  }
  std::vector<cbx::CkptTensor> ts;
  for (const std::string& n : f->names()) {
    if (!f->has(n)) finding("has");
    ts.push_back(f->read(n));  // a parsed file's tensors must all be readable
    const cbx::CkptTensor& t = ts.back();
    if (t.shape != f->shape(n) || t.dtype != f->dtype(n)) finding("accessors");
    // Every parsed tensor converts without error (sizes were validated).
    if (cbx::type_traits(t.dtype).to_float) {
      g_sink = g_sink + t.to_f32().size();
    } else {
      g_sink = g_sink + t.to_i64().size();
    }
  }
  round_trip(*f, ts);
  return 0;
}
