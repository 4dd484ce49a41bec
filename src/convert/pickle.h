// The pickle subset torch.save uses (protocol 2, plus the protocol 3/4 opcodes newer
// Pythons emit), restricted like torch.load(weights_only=True): only whitelisted globals
// (OrderedDict, torch rebuild functions, storage/dtype classes, torch.Size) can be named
// or called, and nothing is ever executed. Storages are fetched through a callback.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "convert/torch_pt.h"

namespace cbx {

// Raw bytes of storage `key`; `name` (e.g. "data/0") is for messages.
struct StorageBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
using StorageFetch = std::function<StorageBytes(const std::string& key)>;

struct UnpickleOptions {
  std::string file = "<memory>";              // named in every error
  size_t max_tensor_bytes = size_t(1) << 30;  // total materialised tensor bytes (expanded views)
  size_t max_objects = size_t(1) << 22;       // objects created by the pickle program
  int max_depth = 512;                        // nesting of the resulting tree
};

// Runs the restricted unpickler over `data`. Throws cbx::Error naming opts.file.
PyRef unpickle_torch(const uint8_t* data, size_t size, const StorageFetch& fetch, const UnpickleOptions& opts);

// Serialises `root` as torch.save's data.pkl (protocol 2). Tensors become persistent ids
// ('storage', torch.<Type>Storage, key, 'cpu', numel); `storages` receives one tensor
// per key ("0", "1", ...; a tensor shared in the tree is stored once).
std::string pickle_torch(const PyObject& root, std::vector<const CkptTensor*>* storages);

}  // namespace cbx
