// torch.save files: a zip archive (stored entries) holding ARCHIVE/data.pkl (pickle
// protocol 2) and ARCHIVE/data/<key> storages. Only the subset torch.save writes for
// tensors, dicts (incl. OrderedDict), lists, tuples, scalars, strings and None is
// accepted (the torch.load(weights_only=True) contract): any other global is refused
// by name, nothing is ever executed.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "convert/checkpoint_tensor.h"

namespace cbx {

// The unpickled object tree.
struct PyObject;
using PyRef = std::shared_ptr<PyObject>;
struct PyObject {
  enum class Kind { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Tensor };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                              // String / Bytes
  std::vector<PyRef> items;                   // List / Tuple
  std::vector<std::pair<PyRef, PyRef>> dict;  // Dict, insertion order
  std::shared_ptr<CkptTensor> tensor;         // Tensor (materialised, contiguous)

  // Dict lookup by string key; nullptr if absent or not a dict.
  const PyObject* get(const std::string& key) const;
};

// Loads and unpickles a torch.save file. Throws cbx::Error naming the file and, for
// refused globals, the global's module.name.
PyRef load_torch_pt(const std::string& path);
PyRef load_torch_pt_memory(const void* data, size_t size, const std::string& name = "<memory>");

// Flattens a (nested) state dict into "a.b.c" -> tensor, as torch's state_dict keys
// (list/tuple items by index). The tree's tensors are shared, not copied: an unnamed
// tensor gets its key as name; one already named otherwise is copied.
std::map<std::string, std::shared_ptr<CkptTensor>> flatten_state_dict(const PyObject& root);

// Writes a torch.save-compatible file (zip + pickle protocol 2 + storages) that real
// torch.load(weights_only=True) accepts. Only the Kinds above are supported. Float and
// Bytes values are written as BINFLOAT / BINBYTES, which torch 1.13's weights_only
// unpickler refuses (plain torch.load reads them); tensors, ints, strings, None, bools and
// containers load everywhere. Subtrees reachable twice are written once (pickle memo);
// cyclic trees are refused.
void save_torch_pt(const std::string& path, const PyObject& root);
struct TorchSaveOptions {
  std::string archive_name = "archive";  // the zip's top directory
  bool force_zip64 = false;              // ZIP64 records even when not needed (tests)
};
void save_torch_pt(const std::string& path, const PyObject& root, const TorchSaveOptions& opts);

// Helpers to build trees for save_torch_pt.
PyRef py_none();
PyRef py_bool(bool v);
PyRef py_int(int64_t v);
PyRef py_float(double v);
PyRef py_str(const std::string& s);
PyRef py_list(std::vector<PyRef> items);
PyRef py_tuple(std::vector<PyRef> items);
PyRef py_dict(std::vector<std::pair<std::string, PyRef>> items);
PyRef py_tensor(CkptTensor t);

}  // namespace cbx
