// Upstream checkpoint files and the per-tensor recipes of the converter: renaming,
// weight-norm fusion, BatchNorm folding and GPT-2 Conv1D transposition.
#include <cmath>
#include <cstdio>

#include "convert/convert_internal.h"
#include "core/error.h"

namespace cbx {

std::string shape_to_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string base_name(const std::string& path) {
  size_t p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

namespace {
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}
bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
}  // namespace

std::unique_ptr<SourceFile> SourceFile::open(const std::string& path) {
  auto f = std::unique_ptr<SourceFile>(new SourceFile());
  f->path_ = path;
  f->file_ = base_name(path);
  if (ends_with(path, ".safetensors")) {
    f->st_ = SafetensorsFile::open(path);
    f->names_ = f->st_->names();
    for (const auto& n : f->names_) f->meta_[n] = {f->st_->dtype(n), f->st_->shape(n)};
  } else if (ends_with(path, ".pt") || ends_with(path, ".pth")) {
    PyRef root = load_torch_pt(path);
    CBX_CHECK(root && root->kind == PyObject::Kind::Dict, "%s: expected a state dict (a dict of tensors)",
              f->file_.c_str());
    // Some training checkpoints nest the weights under "model"/"state_dict".
    const PyObject* sd = root.get();
    for (const char* k : {"state_dict", "model"}) {
      const PyObject* inner = sd->get(k);
      if (inner && inner->kind == PyObject::Kind::Dict) sd = inner;
    }
    f->pt_ = flatten_state_dict(*sd);
    for (const auto& [n, t] : f->pt_) {
      f->names_.push_back(n);
      f->meta_[n] = {t->dtype, t->shape};
    }
  } else {
    fail("%s: unknown checkpoint format (expected .safetensors or .pt)", path.c_str());
  }
  return f;
}

const std::vector<int64_t>& SourceFile::shape(const std::string& n) const {
  auto it = meta_.find(n);
  CBX_CHECK(it != meta_.end(), "%s: missing tensor '%s'", file_.c_str(), n.c_str());
  return it->second.second;
}

DType SourceFile::dtype(const std::string& n) const {
  auto it = meta_.find(n);
  CBX_CHECK(it != meta_.end(), "%s: missing tensor '%s'", file_.c_str(), n.c_str());
  return it->second.first;
}

int64_t SourceFile::dim(const std::string& n, int axis) const {
  const auto& s = shape(n);
  int a = axis < 0 ? int(s.size()) + axis : axis;
  CBX_CHECK(a >= 0 && a < int(s.size()), "%s: tensor '%s' has shape %s, expected at least %d dims", file_.c_str(),
            n.c_str(), shape_to_string(s).c_str(), axis < 0 ? -axis : axis + 1);
  return s[a];
}

std::vector<float> SourceFile::read_f32(const std::string& n) const {
  DType t = dtype(n);
  CBX_CHECK(is_float_type(t), "%s: tensor '%s' has dtype %s, expected a float type", file_.c_str(), n.c_str(),
            dtype_name(t));
  try {
    if (st_) return st_->read(n).to_f32();
    auto it = pt_.find(n);
    CBX_CHECK(it != pt_.end() && it->second, "%s: tensor '%s' was already released", file_.c_str(), n.c_str());
    return it->second->to_f32();
  } catch (const Error& e) {
    fail("%s: tensor '%s': %s", file_.c_str(), n.c_str(), e.what());
  }
}

void SourceFile::release(const std::string& n) {
  auto it = pt_.find(n);
  if (it != pt_.end()) it->second.reset();
}

int count_indexed(const SourceFile& f, const std::string& prefix, const std::string& suffix) {
  int n = 0;
  while (f.has(prefix + std::to_string(n) + suffix)) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------

namespace {
const char* kWnG = ".parametrizations.weight.original0";
const char* kWnV = ".parametrizations.weight.original1";

std::string map_prefix(const std::string& name, const PrefixMap& prefixes) {
  for (const auto& [from, to] : prefixes)
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  return "";
}
}  // namespace

std::string upstream_name(const std::string& gguf_name, const PrefixMap& prefixes) {
  std::string n = gguf_name;
  if (ends_with(n, ".scale") || ends_with(n, ".shift")) n = n.substr(0, n.size() - 6) + ".running_mean";
  for (const auto& [from, to] : prefixes)
    if (n.rfind(to, 0) == 0) return from + n.substr(to.size());
  return n;
}

void collect_recipes(SourceFile& src, const PrefixMap& prefixes, const std::set<std::string>& drop,
                     bool (*transpose)(const std::string&), std::map<std::string, Recipe>& out) {
  std::set<std::string> used;
  auto add = [&](const std::string& up_base, Recipe r, const std::string& suffix) {
    std::string g = map_prefix(up_base, prefixes);
    CBX_CHECK(!g.empty(), "%s: unexpected tensor '%s' (not part of a chatterbox checkpoint)", src.file().c_str(),
              r.inputs.back().c_str());
    r.gguf_name = g + suffix;
    r.src = &src;
    CBX_CHECK(!out.count(r.gguf_name), "%s: tensor '%s' maps to '%s' twice", src.file().c_str(), up_base.c_str(),
              r.gguf_name.c_str());
    out[r.gguf_name] = std::move(r);
  };
  auto use = [&](const std::string& n) {
    used.insert(n);
    return n;
  };

  for (const std::string& n : src.names()) {
    if (used.count(n) || drop.count(n) || ends_with(n, ".num_batches_tracked")) continue;
    // weight norm: new parametrization or legacy weight_g / weight_v
    std::string base, g, v;
    if (ends_with(n, kWnG) || ends_with(n, kWnV)) {
      base = n.substr(0, n.size() - std::string(kWnG).size());
      g = base + kWnG, v = base + kWnV;
    } else if (ends_with(n, ".weight_g") || ends_with(n, ".weight_v")) {
      base = n.substr(0, n.size() - 9);
      g = base + ".weight_g", v = base + ".weight_v";
    }
    if (!base.empty()) {
      CBX_CHECK(src.has(g) && src.has(v), "%s: weight-norm tensor '%s' without its pair '%s'", src.file().c_str(),
                n.c_str(), src.has(g) ? v.c_str() : g.c_str());
      const auto& vs = src.shape(v);
      const auto& gs = src.shape(g);
      int64_t gn = 1;
      for (int64_t d : gs) gn *= d;
      CBX_CHECK(!vs.empty() && gn == vs[0] && gs.size() == vs.size(),
                "%s: weight-norm magnitude '%s' has shape %s, expected [%lld, 1, ...] for direction %s",
                src.file().c_str(), g.c_str(), shape_to_string(gs).c_str(), (long long)(vs.empty() ? 0 : vs[0]),
                shape_to_string(vs).c_str());
      Recipe r;
      r.xf = Xform::WeightNorm;
      r.inputs = {use(g), use(v)};
      r.shape = vs;
      add(base, std::move(r), ".weight");
      continue;
    }
    // BatchNorm (eval): fold running stats and the optional affine into scale/shift
    if (ends_with(n, ".running_mean") || ends_with(n, ".running_var")) {
      base = n.substr(0, n.rfind('.'));
      std::string mean = base + ".running_mean", var = base + ".running_var";
      std::string w = base + ".weight", b = base + ".bias";
      CBX_CHECK(src.has(mean) && src.has(var), "%s: BatchNorm '%s' lacks running_mean or running_var",
                src.file().c_str(), base.c_str());
      int64_t c = src.dim(mean, 0);
      for (const std::string* t : {&var, &w, &b}) {
        if (!src.has(*t)) continue;
        CBX_CHECK(src.shape(*t) == std::vector<int64_t>{c}, "%s: tensor '%s' has shape %s, expected [%lld]",
                  src.file().c_str(), t->c_str(), shape_to_string(src.shape(*t)).c_str(), (long long)c);
      }
      Recipe r;
      r.inputs = {src.has(w) ? use(w) : "", src.has(b) ? use(b) : "", use(mean), use(var)};
      r.shape = {c};
      r.xf = Xform::BnScale;
      add(base, r, ".scale");
      r.xf = Xform::BnShift;
      add(base, std::move(r), ".shift");
      continue;
    }
    Recipe r;
    r.inputs = {use(n)};
    r.shape = src.shape(n);
    if (transpose && transpose(n)) {
      CBX_CHECK(r.shape.size() == 2, "%s: tensor '%s' has shape %s, expected 2 dims (GPT-2 Conv1D)", src.file().c_str(),
                n.c_str(), shape_to_string(r.shape).c_str());
      r.xf = Xform::Transpose;
      r.shape = {r.shape[1], r.shape[0]};
    }
    add(n, std::move(r), "");
  }
  // BatchNorm affine params consumed above must not be emitted twice: drop the plain
  // recipes that were added before their running stats were seen.
  for (const std::string& n : used) {
    if (!ends_with(n, ".weight") && !ends_with(n, ".bias")) continue;
    std::string base = n.substr(0, n.rfind('.'));
    if (!src.has(base + ".running_mean")) continue;
    std::string g = map_prefix(n, prefixes);
    auto it = out.find(g);
    if (it != out.end() && it->second.xf == Xform::Plain && it->second.src == &src) out.erase(it);
  }
}

std::vector<float> run_recipe(const Recipe& r) {
  const SourceFile& s = *r.src;
  switch (r.xf) {
    case Xform::Plain:
      return s.read_f32(r.inputs[0]);
    case Xform::Transpose: {
      std::vector<float> a = s.read_f32(r.inputs[0]);
      const int64_t rows = r.shape[1], cols = r.shape[0];  // source [rows, cols] -> [cols, rows]
      std::vector<float> t(a.size());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) t[size_t(j * rows + i)] = a[size_t(i * cols + j)];
      return t;
    }
    case Xform::WeightNorm: {
      // w[i, ...] = g[i] * v[i, ...] / ||v[i, ...]||  (torch weight_norm, dim 0; for
      // ConvTranspose1d dim 0 is the input channel, as upstream stores it)
      std::vector<float> g = s.read_f32(r.inputs[0]);
      std::vector<float> v = s.read_f32(r.inputs[1]);
      const int64_t n0 = r.shape[0];
      const int64_t inner = int64_t(v.size()) / n0;
      for (int64_t i = 0; i < n0; ++i) {
        float* row = v.data() + i * inner;
        double ss = 0;
        for (int64_t j = 0; j < inner; ++j) ss += double(row[j]) * row[j];
        const float scale = float(double(g[size_t(i)]) / std::sqrt(ss));
        for (int64_t j = 0; j < inner; ++j) row[j] *= scale;
      }
      return v;
    }
    case Xform::BnScale:
    case Xform::BnShift: {
      std::vector<float> mean = s.read_f32(r.inputs[2]);
      std::vector<float> var = s.read_f32(r.inputs[3]);
      const size_t c = mean.size();
      std::vector<float> w = r.inputs[0].empty() ? std::vector<float>(c, 1.0f) : s.read_f32(r.inputs[0]);
      std::vector<float> b = r.inputs[1].empty() ? std::vector<float>(c, 0.0f) : s.read_f32(r.inputs[1]);
      std::vector<float> out(c);
      for (size_t i = 0; i < c; ++i) {
        double scale = double(w[i]) / std::sqrt(double(var[i]) + r.bn_eps);
        out[i] = r.xf == Xform::BnScale ? float(scale) : float(double(b[i]) - double(mean[i]) * scale);
      }
      return out;
    }
  }
  CBX_ASSERT(false);
  return {};
}

}  // namespace cbx
