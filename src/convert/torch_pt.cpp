// torch.save archives: locating data.pkl and the storages in the zip, and writing them.
#include "convert/torch_pt.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "convert/pickle.h"
#include "convert/zip_archive.h"
#include "core/error.h"

namespace cbx {

const PyObject* PyObject::get(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : dict)
    if (k && k->kind == Kind::String && k->s == key) return v.get();
  return nullptr;
}

namespace {

PyRef load_buffer(const uint8_t* data, size_t size, const std::string& name) {
  const char* file = name.c_str();
  if (size >= 2 && data[0] == 0x80 && data[1] <= 5)
    fail(
        "torch.load: '%s' uses the legacy (pre-1.6, non-zip) torch.save format; re-save it "
        "with a current torch",
        file);
  ZipReader zip(data, size, name);
  CBX_CHECK(!zip.entries().empty(), "torch.load: '%s': empty archive", file);
  // The archive's top directory (any name) is the first entry's; torch reads it the same way.
  const std::string& first = zip.entries()[0].name;
  const size_t slash = first.find('/');
  CBX_CHECK(slash != std::string::npos && slash > 0, "torch.load: '%s': entry '%s' is not inside an archive directory",
            file, first.c_str());
  const std::string prefix = first.substr(0, slash + 1);
  const ZipReader::Entry* pkl = zip.find(prefix + "data.pkl");
  CBX_CHECK(pkl, "torch.load: '%s': no '%sdata.pkl' (not a torch.save file?)", file, prefix.c_str());
  if (const ZipReader::Entry* bo = zip.find(prefix + "byteorder")) {
    const uint8_t* b = zip.bytes(*bo, true);
    const std::string order(reinterpret_cast<const char*>(b), size_t(bo->size));
    CBX_CHECK(order == "little", "torch.load: '%s': byteorder '%s' is not supported", file,
              order.substr(0, 16).c_str());
  }
  std::set<std::string> verified;
  StorageFetch fetch = [&](const std::string& key) {
    const std::string path = prefix + "data/" + key;
    const ZipReader::Entry* e = zip.find(path);
    CBX_CHECK(e, "torch.load: '%s': storage record '%s' is missing", file, path.c_str());
    const bool verify = verified.insert(key).second;
    StorageBytes sb;
    sb.data = zip.bytes(*e, verify);
    sb.size = size_t(e->size);
    return sb;
  };
  UnpickleOptions opts;
  opts.file = name;
  // Views may expand (stride 0) beyond the bytes stored; bound what a file can make us allocate.
  opts.max_tensor_bytes = size > (SIZE_MAX - (size_t(64) << 20)) / 4 ? SIZE_MAX : 4 * size + (size_t(64) << 20);
  return unpickle_torch(zip.bytes(*pkl, true), size_t(pkl->size), fetch, opts);
}

}  // namespace

PyRef load_torch_pt_memory(const void* data, size_t size, const std::string& name) {
  return load_buffer(static_cast<const uint8_t*>(data), size, name);
}

PyRef load_torch_pt(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CBX_CHECK(fd >= 0, "torch.load: cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("torch.load: '%s' is not a regular file", path.c_str());
  }
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail("torch.load: '%s' is empty", path.c_str());
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  CBX_CHECK(m != MAP_FAILED, "torch.load: cannot map '%s': %s", path.c_str(), std::strerror(e));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{m, size};
  return load_buffer(static_cast<const uint8_t*>(m), size, path);
}

namespace {

void flatten(const PyObject& o, const std::string& prefix, int depth, size_t* visits,
             std::map<std::string, std::shared_ptr<CkptTensor>>* out) {
  CBX_CHECK(depth < 512 && ++*visits < (size_t(1) << 22), "flatten_state_dict: structure too deep or too large at '%s'",
            prefix.c_str());
  auto child = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  switch (o.kind) {
    case PyObject::Kind::Tensor: {
      CBX_CHECK(!prefix.empty(), "flatten_state_dict: the root is a tensor, not a dict");
      // Share the loaded tensor (checkpoints are large); copy only when it already carries
      // another name, i.e. one tensor object reachable under two keys.
      std::shared_ptr<CkptTensor> t = o.tensor;
      if (t->name.empty()) {
        t->name = prefix;
      } else if (t->name != prefix) {
        t = std::make_shared<CkptTensor>(*o.tensor);
        t->name = prefix;
      }
      CBX_CHECK(out->emplace(prefix, std::move(t)).second, "flatten_state_dict: duplicate key '%s'", prefix.c_str());
      return;
    }
    case PyObject::Kind::Dict:
      for (const auto& [k, v] : o.dict) {
        if (!k || !v) continue;
        std::string ks;
        if (k->kind == PyObject::Kind::String) {
          ks = k->s;
        } else if (k->kind == PyObject::Kind::Int) {
          ks = std::to_string(k->i);
        } else {
          continue;  // keys that cannot name a tensor
        }
        flatten(*v, child(ks), depth + 1, visits, out);
      }
      return;
    case PyObject::Kind::List:
    case PyObject::Kind::Tuple:
      for (size_t j = 0; j < o.items.size(); ++j)
        if (o.items[j]) flatten(*o.items[j], child(std::to_string(j)), depth + 1, visits, out);
      return;
    default:
      return;  // None, numbers and strings carry no weights
  }
}

}  // namespace

std::map<std::string, std::shared_ptr<CkptTensor>> flatten_state_dict(const PyObject& root) {
  std::map<std::string, std::shared_ptr<CkptTensor>> out;
  size_t visits = 0;
  flatten(root, "", 0, &visits, &out);
  return out;
}

void save_torch_pt(const std::string& path, const PyObject& root) { save_torch_pt(path, root, TorchSaveOptions{}); }

void save_torch_pt(const std::string& path, const PyObject& root, const TorchSaveOptions& opts) {
  CBX_CHECK(!opts.archive_name.empty() && opts.archive_name.find('/') == std::string::npos,
            "torch.save: bad archive name '%s'", opts.archive_name.c_str());
  std::vector<const CkptTensor*> storages;
  const std::string pkl = pickle_torch(root, &storages);
  const std::string dir = opts.archive_name + "/";
  ZipWriter zip(path, opts.force_zip64);
  // Record order and contents as torch.save writes them.
  zip.add(dir + "data.pkl", pkl.data(), pkl.size());
  zip.add(dir + "byteorder", "little", 6);
  for (size_t k = 0; k < storages.size(); ++k)
    zip.add(dir + "data/" + std::to_string(k), storages[k]->data.data(), storages[k]->data.size());
  zip.add(dir + "version", "3\n", 2);
  zip.add(dir + ".data/version", "3\n", 2);
  zip.finish();
}

PyRef py_none() { return std::make_shared<PyObject>(); }

PyRef py_bool(bool v) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Bool;
  o->b = v;
  return o;
}

PyRef py_int(int64_t v) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Int;
  o->i = v;
  return o;
}

PyRef py_float(double v) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Float;
  o->f = v;
  return o;
}

PyRef py_str(const std::string& s) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::String;
  o->s = s;
  return o;
}

PyRef py_list(std::vector<PyRef> items) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::List;
  o->items = std::move(items);
  return o;
}

PyRef py_tuple(std::vector<PyRef> items) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Tuple;
  o->items = std::move(items);
  return o;
}

PyRef py_dict(std::vector<std::pair<std::string, PyRef>> items) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Dict;
  for (auto& [k, v] : items) o->dict.emplace_back(py_str(k), std::move(v));
  return o;
}

PyRef py_tensor(CkptTensor t) {
  auto o = std::make_shared<PyObject>();
  o->kind = PyObject::Kind::Tensor;
  o->tensor = std::make_shared<CkptTensor>(std::move(t));
  return o;
}

}  // namespace cbx
