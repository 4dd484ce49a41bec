// libFuzzer target for torch .pt loading. The first byte picks the layer under test:
//   0: the whole file (zip + data.pkl + storages) via load_torch_pt_memory;
//   1: the restricted unpickler alone (a zip's CRCs would hide most pickle mutations),
//      with storages "0".."9" served from a fixed 256-byte buffer.
// Any input must either load or throw cbx::Error. A loaded tree is flattened, written with
// save_torch_pt and must load back identical.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "convert/pickle.h"
#include "convert/torch_pt.h"
#include "core/error.h"

namespace {

volatile uint64_t g_sink;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_torch_pt: round trip mismatch: %s\n", what);
  std::abort();
}

// Trees may share subtrees (a DAG of depth d has 2^d paths): compare each pair once.
using Seen = std::set<std::pair<const cbx::PyObject*, const cbx::PyObject*>>;
bool same(const cbx::PyObject& a, const cbx::PyObject& b, Seen& seen) {
  using K = cbx::PyObject::Kind;
  if (a.kind != b.kind) return false;
  if (!seen.insert({&a, &b}).second) return true;
  switch (a.kind) {
    case K::None:
      return true;
    case K::Bool:
      return a.b == b.b;
    case K::Int:
      return a.i == b.i;
    case K::Float:
      return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;
    case K::String:
    case K::Bytes:
      return a.s == b.s;
    case K::List:
    case K::Tuple:
      if (a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i)
        if (!same(*a.items[i], *b.items[i], seen)) return false;
      return true;
    case K::Dict:
      if (a.dict.size() != b.dict.size()) return false;
      for (size_t i = 0; i < a.dict.size(); ++i)
        if (!same(*a.dict[i].first, *b.dict[i].first, seen) || !same(*a.dict[i].second, *b.dict[i].second, seen))
          return false;
      return true;
    case K::Tensor:
      return a.tensor->dtype == b.tensor->dtype && a.tensor->shape == b.tensor->shape &&
             a.tensor->data == b.tensor->data;
  }
  return false;
}

void exercise(const cbx::PyObject& root) {
  try {
    g_sink = g_sink + cbx::flatten_state_dict(root).size();
  } catch (const cbx::Error&) {
  }
  static const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                  "/fuzz_torch_pt_" + std::to_string(getpid()) + ".pt";
  try {
    cbx::save_torch_pt(path, root);
  } catch (const cbx::Error&) {
    return;  // e.g. a tree nested deeper than the writer allows
  }
  cbx::PyRef back = cbx::load_torch_pt(path);
  std::remove(path.c_str());
  Seen seen;
  if (!same(root, *back, seen)) finding("tree");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 2;
  ++data;
  --size;
  cbx::PyRef root;
  try {
    if (mode == 0) {
      root = cbx::load_torch_pt_memory(data, size, "fuzz.pt");
    } else {
      static uint8_t storage[256];
      for (size_t i = 0; i < sizeof(storage); ++i) storage[i] = uint8_t(i * 37);
      cbx::StorageFetch fetch = [](const std::string& key) {
        if (key.size() != 1 || key[0] < '0' || key[0] > '9') cbx::fail("fuzz: no storage '%s'", key.c_str());
        return cbx::StorageBytes{storage, sizeof(storage) - size_t(key[0] - '0') * 16};
      };
      cbx::UnpickleOptions o;
      o.file = "fuzz.pkl";
      o.max_tensor_bytes = size_t(16) << 20;
      root = cbx::unpickle_torch(data, size, fetch, o);
    }
  } catch (const cbx::Error&) {
    return 0;
  }
  exercise(*root);
  return 0;
}
