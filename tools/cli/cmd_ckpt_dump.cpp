// chatterbox ckpt-dump: inspect (and re-write) upstream checkpoints, .safetensors or
// torch .pt. Used by tests/test_torch_pt_interop.sh and for looking into files by hand.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "convert/safetensors.h"
#include "convert/torch_pt.h"
#include "core/error.h"
#include "core/output_file.h"

namespace {

using Json = nlohmann::ordered_json;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  return r + "]";
}

// Sum of the values as double: a quick fingerprint for eyeballing two dumps.
double checksum(const cbx::CkptTensor& t) {
  double s = 0;
  if (cbx::type_traits(t.dtype).to_float) {
    for (float v : t.to_f32()) s += v;
  } else {
    for (int64_t v : t.to_i64()) s += double(v);
  }
  return s;
}

Json tensor_json(const cbx::CkptTensor& t) {
  Json j = Json::object();
  j["dtype"] = cbx::dtype_name(t.dtype);
  j["shape"] = t.shape;
  Json v = Json::array();
  if (t.dtype == cbx::DType::F64) {  // exact: to_f32 would round
    for (size_t i = 0; i + 8 <= t.data.size(); i += 8) {
      double x;
      std::memcpy(&x, t.data.data() + i, 8);
      v.push_back(x);
    }
  } else if (cbx::type_traits(t.dtype).to_float) {
    for (float x : t.to_f32()) v.push_back(double(x));
  } else {
    for (int64_t x : t.to_i64()) v.push_back(x);
  }
  j["values"] = std::move(v);
  return j;
}

// Python-like tree as JSON; a tensor becomes {"__tensor__": {...}}, a tuple {"__tuple__": [...]}.
Json to_json(const cbx::PyObject& o) {
  using K = cbx::PyObject::Kind;
  switch (o.kind) {
    case K::None:
      return nullptr;
    case K::Bool:
      return o.b;
    case K::Int:
      return o.i;
    case K::Float:
      return o.f;
    case K::String:
      return o.s;
    case K::Bytes:
      return Json{{"__bytes__", o.s.size()}};
    case K::List:
    case K::Tuple: {
      Json a = Json::array();
      for (const auto& x : o.items) a.push_back(to_json(*x));
      return o.kind == K::List ? a : Json{{"__tuple__", a}};
    }
    case K::Dict: {
      Json d = Json::object();
      for (const auto& [k, v] : o.dict) {
        std::string ks = k->kind == K::String ? k->s : k->kind == K::Int ? std::to_string(k->i) : "?";
        d[ks] = to_json(*v);
      }
      return d;
    }
    case K::Tensor:
      return Json{{"__tensor__", tensor_json(*o.tensor)}};
  }
  return nullptr;
}

void print_tree(const cbx::PyObject& o, const std::string& path) {
  using K = cbx::PyObject::Kind;
  auto child = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
  switch (o.kind) {
    case K::Dict:
      for (const auto& [k, v] : o.dict) print_tree(*v, child(k->kind == K::String ? k->s : std::to_string(k->i)));
      return;
    case K::List:
    case K::Tuple:
      for (size_t i = 0; i < o.items.size(); ++i) print_tree(*o.items[i], child(std::to_string(i)));
      return;
    case K::Tensor:
      std::printf("%s %s %s sum=%.9g\n", path.c_str(), cbx::dtype_name(o.tensor->dtype),
                  shape_str(o.tensor->shape).c_str(), checksum(*o.tensor));
      return;
    default:
      std::printf("%s %s\n", path.c_str(), to_json(o).dump().c_str());
  }
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: chatterbox ckpt-dump FILE [--json] [--save-pt OUT [--zip64]] [--save-safetensors "
               "OUT]\n"
               "  FILE is a .safetensors or a torch.save .pt file.\n"
               "  Prints every tensor (name dtype shape sum); --json prints the whole tree with values.\n"
               "  --save-pt re-writes the tree with our torch.save writer; --save-safetensors writes\n"
               "  the flattened tensors. --zip64 forces ZIP64 records (for tests).\n");
}

int cmd_ckpt_dump(int argc, char** argv) {
  std::string file, save_pt, save_st;
  bool json = false;
  cbx::TorchSaveOptions pt_opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--save-pt" && i + 1 < argc) {
      save_pt = argv[++i];
    } else if (a == "--zip64") {
      pt_opts.force_zip64 = true;
    } else if (a == "--save-safetensors" && i + 1 < argc) {
      save_st = argv[++i];
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (!file.empty() || (a.size() > 1 && a[0] == '-')) {
      std::fprintf(stderr, "chatterbox ckpt-dump: error: %s '%s'\n",
                   a[0] == '-' ? "unknown option (or missing value)" : "unexpected argument", a.c_str());
      usage(stderr);
      return 2;
    } else {
      file = a;
    }
  }
  if (file.empty()) {
    usage(stderr);
    return 2;
  }
  {
    for (const std::string* o : {&save_pt, &save_st})
      if (!o->empty()) cbx::check_output_not_input(*o, {{"input", file}});
    cbx::PyRef root;
    if (ends_with(file, ".safetensors")) {
      auto st = cbx::SafetensorsFile::open(file);
      std::vector<std::pair<std::string, cbx::PyRef>> items;
      for (const std::string& n : st->names()) items.emplace_back(n, cbx::py_tensor(st->read(n)));
      root = cbx::py_dict(std::move(items));
    } else {
      root = cbx::load_torch_pt(file);
    }
    if (json) {
      std::printf("%s\n", to_json(*root).dump().c_str());
    } else {
      print_tree(*root, "");
    }
    if (!save_pt.empty()) cbx::save_torch_pt(save_pt, *root, pt_opts);
    if (!save_st.empty()) {
      auto flat = cbx::flatten_state_dict(*root);
      std::vector<const cbx::CkptTensor*> ts;
      for (const auto& [name, t] : flat) ts.push_back(t.get());
      cbx::write_safetensors(save_st, ts);
    }
  }
  return 0;
}

cbx::cli::RegisterCommand reg("ckpt-dump", "inspect or re-write a .safetensors / torch .pt file", cmd_ckpt_dump);

}  // namespace
