// Checkpoint ingest: safetensors and torch .pt readers/writers. Round trips, and every
// malformed input is a cbx::Error that names the file (and the tensor where there is one).
// Interop with real PyTorch is tests/test_torch_pt_interop.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "convert/pickle.h"
#include "convert/safetensors.h"
#include "convert/torch_pt.h"
#include "convert/zip_archive.h"
#include "core/error.h"

using namespace cbx;

namespace {

std::string tmp_path(const std::string& name) {
  // Unique per process: ctest runs each TEST as its own process, in parallel.
  return std::string(CBX_BINARY_DIR) + "/test_checkpoint_io_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Runs fn, expects a cbx::Error whose message contains every needle.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown (expected one mentioning '" << *needles.begin() << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message '" << msg << "' lacks '" << n << "'";
  }
}

template <typename T>
CkptTensor make_tensor(const std::string& name, DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
  CkptTensor t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<CkptTensor> sample_tensors() {
  std::vector<CkptTensor> ts;
  ts.push_back(make_tensor<float>("enc.w", DType::F32, {2, 3}, {1, -2, 3.5f, 0, 1e-8f, -7}));
  ts.push_back(make_tensor<uint16_t>("enc.h", DType::F16, {3}, {f32_to_f16(1.5f), f32_to_f16(-2), 0}));
  ts.push_back(make_tensor<uint16_t>("enc.b", DType::BF16, {1, 2}, {f32_to_bf16(3), f32_to_bf16(-0.25f)}));
  ts.push_back(make_tensor<double>("d", DType::F64, {2}, {1.0 / 3, -1e300}));
  ts.push_back(make_tensor<int64_t>("tok", DType::I64, {1, 3}, {INT64_MIN, 0, INT64_MAX}));
  ts.push_back(make_tensor<int32_t>("i32", DType::I32, {2}, {-5, 70000}));
  ts.push_back(make_tensor<int16_t>("i16", DType::I16, {2}, {-300, 300}));
  ts.push_back(make_tensor<int8_t>("i8", DType::I8, {3}, {-128, 0, 127}));
  ts.push_back(make_tensor<float>("scalar", DType::F32, {}, {42}));
  ts.push_back(make_tensor<float>("empty", DType::F32, {0, 4}, {}));
  return ts;
}

}  // namespace

// ------------------------------------------------------------------ CkptTensor

TEST(CkptTensor, Conversions) {
  auto ts = sample_tensors();
  EXPECT_EQ(ts[0].numel(), 6);
  EXPECT_EQ(ts[0].to_f32()[2], 3.5f);
  EXPECT_EQ(ts[1].to_f32()[1], -2.f);
  EXPECT_EQ(ts[2].to_f32()[1], -0.25f);
  EXPECT_EQ(ts[4].to_i64()[0], INT64_MIN);
  EXPECT_EQ(ts[7].to_i64()[0], -128);
  EXPECT_EQ(ts[8].numel(), 1);
  EXPECT_EQ(ts[9].numel(), 0);
  expect_error([&] { ts[0].to_i64(); }, {"enc.w"});
  expect_error([&] { ts[4].to_f32(); }, {"tok"});
  CkptTensor bad = ts[0];
  bad.data.pop_back();
  expect_error([&] { bad.to_f32(); }, {"enc.w", "bytes"});
  bad.shape = {-1, 2};
  expect_error([&] { bad.numel(); }, {"enc.w", "negative"});
  bad.shape = {int64_t(1) << 40, int64_t(1) << 40};
  expect_error([&] { bad.numel(); }, {"enc.w", "overflow"});
}

// ------------------------------------------------------------------ safetensors

TEST(Safetensors, RoundTripAllDtypes) {
  auto ts = sample_tensors();
  std::vector<const CkptTensor*> ptrs;
  for (auto& t : ts) ptrs.push_back(&t);
  const std::string path = tmp_path("rt.safetensors");
  write_safetensors(path, ptrs, {{"format", "pt"}, {"note", "x"}});

  auto raw = read_all(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(raw[8], '{');
  EXPECT_EQ(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', true);

  for (int from_mem = 0; from_mem < 2; ++from_mem) {
    auto f = from_mem ? SafetensorsFile::from_memory(raw.data(), raw.size(), "mem.safetensors")
                      : SafetensorsFile::open(path);
    ASSERT_EQ(f->names().size(), ts.size());
    EXPECT_EQ(f->metadata().at("format"), "pt");
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_EQ(f->names()[i], ts[i].name) << "file order kept";
      EXPECT_TRUE(f->has(ts[i].name));
      EXPECT_EQ(f->dtype(ts[i].name), ts[i].dtype);
      EXPECT_EQ(f->shape(ts[i].name), ts[i].shape);
      CkptTensor r = f->read(ts[i].name);
      EXPECT_EQ(r.data, ts[i].data) << ts[i].name;
      EXPECT_EQ(r.name, ts[i].name);
    }
    EXPECT_FALSE(f->has("nope"));
    expect_error([&] { f->read("nope"); }, {"missing tensor 'nope'", f->path()});
    expect_error([&] { f->shape("nope"); }, {"nope", f->path()});
  }
  std::remove(path.c_str());
}

TEST(Safetensors, WriterRejectsBadInput) {
  auto ts = sample_tensors();
  CkptTensor bad = ts[0];
  bad.data.resize(5);
  expect_error([&] { write_safetensors(tmp_path("bad.safetensors"), {&bad}); }, {"enc.w"});
  expect_error([&] { write_safetensors(tmp_path("dup.safetensors"), {&ts[0], &ts[0]}); }, {"duplicate", "enc.w"});
  CkptTensor q = ts[0];
  q.dtype = DType::Q8_0;
  expect_error([&] { write_safetensors(tmp_path("q.safetensors"), {&q}); }, {"q8_0"});
  expect_error([&] { write_safetensors("/nonexistent-dir/x.safetensors", {&ts[0]}); },
               {"/nonexistent-dir/x.safetensors"});
}

namespace {
// A safetensors buffer with the given header text (unpadded) and data bytes.
std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  std::vector<uint8_t> b(8 + header.size());
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
  std::copy(header.begin(), header.end(), b.begin() + 8);
  b.resize(b.size() + data_bytes, 0xab);
  return b;
}
void st_expect_error(const std::string& header, size_t data_bytes, std::initializer_list<std::string> needles) {
  auto b = st_bytes(header, data_bytes);
  SCOPED_TRACE(header);
  expect_error([&] { SafetensorsFile::from_memory(b.data(), b.size(), "bad.safetensors"); }, needles);
}
}  // namespace

// The fuzzing finding (../shared/data/fuzz/safetensors-empty-name.safetensors): a tensor named ""
// was read, then refused by the writer. The reader refuses it now, with the file named.
TEST(Safetensors, EmptyTensorNameRefusedByReaderAndWriter) {
  st_expect_error(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8,
                  {"bad.safetensors", "a tensor with an empty name"});
  const char* env = std::getenv("CBX_SOURCE_DIR");
  const std::string repro =
      std::string(env && *env ? env : CBX_SOURCE_DIR) + "/../shared/data/fuzz/safetensors-empty-name.safetensors";
  ASSERT_TRUE(std::ifstream(repro).good()) << "missing reproducer " << repro;
  try {
    SafetensorsFile::open(repro);
    FAIL() << "the reproducer was accepted";
  } catch (const cbx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty name"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(cbx::safetensors_name_ok(""));
  EXPECT_FALSE(cbx::safetensors_name_ok("__metadata__"));
  EXPECT_TRUE(cbx::safetensors_name_ok("w"));
}

TEST(Safetensors, MalformedHeadersNameFileAndTensor) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  auto good = st_bytes(ok, 8);
  EXPECT_NO_THROW(SafetensorsFile::from_memory(good.data(), good.size(), "good"));

  st_expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8,
                  {"bad.safetensors", "malformed header JSON"});
  st_expect_error(R"([1,2])", 0, {"bad.safetensors", "not a JSON object"});
  st_expect_error(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2,
                  {"bad.safetensors", "'w'", "F8_E4M3"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, {"bad.safetensors", "'w'", "shape"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8,
                  {"bad.safetensors", "'w'", "shape"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, {"bad.safetensors", "'w'", "shape"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, {"bad.safetensors", "'w'", "begin"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8,
                  {"bad.safetensors", "'w'", "data_offsets"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8,
                  {"bad.safetensors", "'w'", "data_offsets"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8, {"bad.safetensors", "'w'", "past"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"bad.safetensors", "'w'", "need"});
  st_expect_error(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})", 8,
                  {"bad.safetensors", "'w'", "overflow"});
  st_expect_error(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, {"bad.safetensors", "duplicate key 'w'"});
  st_expect_error(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, {"bad.safetensors", "'a'", "'b'", "overlap"});
  st_expect_error(R"({"__metadata__":{"k":1}})", 0, {"bad.safetensors", "__metadata__"});
  st_expect_error(R"({"w":7})", 0, {"bad.safetensors", "'w'"});
  st_expect_error(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, {"bad.safetensors", "'w'", "dtype"});
  std::string deep(100, '[');
  st_expect_error(R"({"w":)" + deep, 0, {"bad.safetensors"});

  // Header length past the end of the file, and a file shorter than the length field.
  auto b = st_bytes(ok, 8);
  b[0] = 0xff;
  expect_error([&] { SafetensorsFile::from_memory(b.data(), b.size(), "long.safetensors"); },
               {"long.safetensors", "truncated"});
  expect_error([&] { SafetensorsFile::from_memory(b.data(), 5, "tiny.safetensors"); },
               {"tiny.safetensors", "truncated"});
  expect_error([&] { SafetensorsFile::open(tmp_path("does-not-exist.safetensors")); }, {"does-not-exist.safetensors"});
}

TEST(Safetensors, EveryTruncationRejectedWithFileName) {
  auto ts = sample_tensors();
  std::vector<const CkptTensor*> ptrs;
  for (auto& t : ts) ptrs.push_back(&t);
  const std::string path = tmp_path("trunc.safetensors");
  write_safetensors(path, ptrs);
  auto raw = read_all(path);
  // A file cut anywhere before the last tensor's bytes end is invalid.
  for (size_t len = 0; len < raw.size(); ++len) {
    SCOPED_TRACE(len);
    expect_error([&] { SafetensorsFile::from_memory(raw.data(), len, path); }, {path});
  }
  // Cutting into the data section names the tensor that no longer fits.
  write_all(path, std::vector<uint8_t>(raw.begin(), raw.end() - 1));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "tensor 'scalar'", "truncated"});
  std::remove(path.c_str());
}

// ------------------------------------------------------------------ torch .pt

namespace {

void expect_same(const PyObject& a, const PyObject& b, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_EQ(int(a.kind), int(b.kind));
  using K = PyObject::Kind;
  switch (a.kind) {
    case K::None:
      break;
    case K::Bool:
      EXPECT_EQ(a.b, b.b);
      break;
    case K::Int:
      EXPECT_EQ(a.i, b.i);
      break;
    case K::Float:
      EXPECT_EQ(std::memcmp(&a.f, &b.f, 8), 0);
      break;
    case K::String:
    case K::Bytes:
      EXPECT_EQ(a.s, b.s);
      break;
    case K::List:
    case K::Tuple:
      ASSERT_EQ(a.items.size(), b.items.size());
      for (size_t i = 0; i < a.items.size(); ++i)
        expect_same(*a.items[i], *b.items[i], where + "[" + std::to_string(i) + "]");
      break;
    case K::Dict:
      ASSERT_EQ(a.dict.size(), b.dict.size());
      for (size_t i = 0; i < a.dict.size(); ++i) {
        expect_same(*a.dict[i].first, *b.dict[i].first, where + ".key");
        expect_same(*a.dict[i].second, *b.dict[i].second, where + "." + a.dict[i].first->s);
      }
      break;
    case K::Tensor:
      EXPECT_EQ(a.tensor->dtype, b.tensor->dtype);
      EXPECT_EQ(a.tensor->shape, b.tensor->shape);
      EXPECT_EQ(a.tensor->data, b.tensor->data);
      break;
  }
}

PyRef sample_tree() {
  auto ts = sample_tensors();
  std::vector<std::pair<std::string, PyRef>> sd;
  for (auto& t : ts) sd.emplace_back(t.name, py_tensor(t));
  auto bytes = std::make_shared<PyObject>();
  bytes->kind = PyObject::Kind::Bytes;
  bytes->s = std::string("\x00\xff\x80z", 4);
  PyRef shared = py_tensor(ts[0]);
  return py_dict({
      {"t3",
       py_dict({{"speaker_emb", py_tensor(make_tensor<float>("", DType::F32, {1, 4}, {1, 2, 3, 4}))},
                {"clap_emb", py_none()},
                {"cond_prompt_speech_tokens", py_tensor(make_tensor<int64_t>("", DType::I64, {1, 3}, {5, 6, 7}))}})},
      {"sd", py_dict(std::move(sd))},
      {"ints",
       py_list({py_int(0), py_int(255), py_int(256), py_int(65535), py_int(65536), py_int(-1), py_int(INT32_MIN),
                py_int(INT32_MAX), py_int(int64_t(INT32_MAX) + 1), py_int(int64_t(INT32_MIN) - 1), py_int(INT64_MIN),
                py_int(INT64_MAX), py_int(int64_t(1) << 40), py_int(-(int64_t(1) << 47))})},
      {"misc", py_tuple({py_bool(true), py_bool(false), py_float(-0.1), py_str("h\xc3\xa9llo"), bytes})},
      {"tuples",
       py_list({py_tuple({}), py_tuple({py_int(1)}), py_tuple({py_int(1), py_int(2)}),
                py_tuple({py_int(1), py_int(2), py_int(3)}), py_tuple({py_int(1), py_int(2), py_int(3), py_int(4)})})},
      {"empty", py_list({py_list({}), py_dict({})})},
      {"shared", py_list({shared, shared})},
  });
}

}  // namespace

TEST(TorchPt, RoundTripTree) {
  PyRef tree = sample_tree();
  for (bool zip64 : {false, true}) {
    const std::string path = tmp_path(zip64 ? "rt64.pt" : "rt.pt");
    TorchSaveOptions o;
    o.force_zip64 = zip64;
    o.archive_name = zip64 ? "s3gen" : "archive";
    save_torch_pt(path, *tree, o);
    PyRef back = load_torch_pt(path);
    expect_same(*tree, *back, "root");
    auto raw = read_all(path);
    PyRef mem = load_torch_pt_memory(raw.data(), raw.size(), "mem.pt");
    expect_same(*tree, *mem, "root");

    ZipReader zip(raw.data(), raw.size(), path);
    const std::string dir = o.archive_name + "/";
    ASSERT_TRUE(zip.find(dir + "data.pkl"));
    ASSERT_TRUE(zip.find(dir + "version"));
    EXPECT_TRUE(zip.find(dir + "byteorder"));
    size_t storages = 0;
    for (const auto& e : zip.entries()) {
      if (e.name.rfind(dir + "data/", 0) == 0) {
        ++storages;
        EXPECT_EQ(e.offset % 64, 0u) << e.name << " aligned as torch aligns storages";
      }
    }
    EXPECT_EQ(storages, 2u + sample_tensors().size() + 1) << "the shared tensor is stored once";
    std::remove(path.c_str());
  }
}

TEST(TorchPt, SharedSubtreesWrittenOnce) {
  // 40 levels of [x, x]: 2^40 leaves if expanded; the memo keeps file and load linear.
  PyRef x = py_tensor(sample_tensors()[0]);
  for (int k = 0; k < 40; ++k) x = py_list({x, x});
  const std::string path = tmp_path("dag.pt");
  save_torch_pt(path, *x);
  EXPECT_LT(read_all(path).size(), 8192u);
  PyRef back = load_torch_pt(path);
  std::remove(path.c_str());
  const PyObject* p = back.get();
  for (int k = 0; k < 40; ++k) {
    ASSERT_EQ(p->kind, PyObject::Kind::List);
    ASSERT_EQ(p->items.size(), 2u);
    EXPECT_EQ(p->items[0], p->items[1]) << "sharing preserved";
    p = p->items[0].get();
  }
  EXPECT_EQ(p->tensor->data, sample_tensors()[0].data);
}

TEST(TorchPt, FlattenAndGet) {
  PyRef tree = sample_tree();
  EXPECT_TRUE(tree->get("t3"));
  EXPECT_EQ(tree->get("t3")->get("clap_emb")->kind, PyObject::Kind::None);
  EXPECT_EQ(tree->get("missing"), nullptr);
  EXPECT_EQ(tree->get("ints")->get("x"), nullptr);
  auto flat = flatten_state_dict(*tree);
  ASSERT_TRUE(flat.count("t3.speaker_emb"));
  EXPECT_EQ(flat["t3.speaker_emb"]->name, "t3.speaker_emb");
  EXPECT_TRUE(flat.count("sd.enc.w"));
  EXPECT_TRUE(flat.count("shared.1"));
  EXPECT_FALSE(flat.count("t3.clap_emb"));
  PyRef dup =
      py_dict({{"a.b", py_tensor(sample_tensors()[0])}, {"a", py_dict({{"b", py_tensor(sample_tensors()[0])}})}});
  expect_error([&] { flatten_state_dict(*dup); }, {"duplicate key 'a.b'"});
}

namespace {

// A tiny pickle assembler for hand-made data.pkl programs.
struct Pk {
  std::string b = std::string("\x80\x02", 2);
  Pk& op(uint8_t c) {
    b.push_back(char(c));
    return *this;
  }
  Pk& raw(const std::string& s) {
    b += s;
    return *this;
  }
  Pk& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) op(uint8_t(v >> (8 * i)));
    return *this;
  }
  Pk& str(const std::string& s) {
    op('X');
    u32(uint32_t(s.size()));
    return raw(s);
  }
  Pk& i(int32_t v) {
    op('J');
    return u32(uint32_t(v));
  }
  Pk& global(const std::string& m, const std::string& n) {
    op('c');
    return raw(m + "\n" + n + "\n");
  }
  Pk& ints(std::initializer_list<int32_t> v) {
    op('(');
    for (int32_t x : v) i(x);
    return op('t');
  }
  Pk& storage(const std::string& type, const std::string& key, int32_t numel) {
    op('(').str("storage").global("torch", type).str(key).str("cpu").i(numel).op('t');
    return op('Q');
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  Pk& tensor(const std::string& type, const std::string& key, int32_t numel, int32_t off,
             std::initializer_list<int32_t> size, std::initializer_list<int32_t> stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    storage(type, key, numel).i(off).ints(size).ints(stride).op(0x89);
    global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  std::string done() { return b + "."; }
};

// A torch.save-like archive around a hand-made data.pkl and storages.
std::vector<uint8_t> archive(const std::string& pkl,
                             const std::vector<std::pair<std::string, std::string>>& records = {}) {
  const std::string path = tmp_path("handmade.pt");
  {
    ZipWriter z(path);
    z.add("arc/data.pkl", pkl.data(), pkl.size());
    for (const auto& [name, bytes] : records) z.add("arc/" + name, bytes.data(), bytes.size());
    z.finish();
  }
  auto raw = read_all(path);
  std::remove(path.c_str());
  return raw;
}

std::string floats(int n) {  // storage holding 0, 1, ..., n-1 as f32
  std::string s(size_t(n) * 4, '\0');
  for (int k = 0; k < n; ++k) {
    float v = float(k);
    std::memcpy(&s[size_t(k) * 4], &v, 4);
  }
  return s;
}

PyRef load_pkl(const std::string& pkl, const std::vector<std::pair<std::string, std::string>>& records = {}) {
  auto raw = archive(pkl, records);
  return load_torch_pt_memory(raw.data(), raw.size(), "hand.pt");
}

void pkl_expect_error(const std::string& pkl, std::initializer_list<std::string> needles,
                      const std::vector<std::pair<std::string, std::string>>& records = {}) {
  auto raw = archive(pkl, records);
  expect_error([&] { load_torch_pt_memory(raw.data(), raw.size(), "hand.pt"); }, needles);
}

}  // namespace

TEST(TorchPt, StridedViewsMaterialisedContiguous) {
  const auto st = std::vector<std::pair<std::string, std::string>>{{"data/0", floats(12)}};
  // Transposed 3x4 -> [4,3], offset 1 with stride (1,4) -> [2,3], expand via stride 0.
  PyRef r = load_pkl(Pk().op('(')
                         .tensor("FloatStorage", "0", 12, 0, {4, 3}, {1, 4})
                         .tensor("FloatStorage", "0", 12, 1, {2, 3}, {1, 4})
                         .tensor("FloatStorage", "0", 12, 5, {3, 2}, {0, 1})
                         .tensor("FloatStorage", "0", 12, 11, {}, {})
                         .op('l')
                         .done(),
                     st);
  ASSERT_EQ(r->kind, PyObject::Kind::List);
  EXPECT_EQ(r->items[0]->tensor->to_f32(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(r->items[1]->tensor->to_f32(), (std::vector<float>{1, 5, 9, 2, 6, 10}));
  EXPECT_EQ(r->items[2]->tensor->to_f32(), (std::vector<float>{5, 6, 5, 6, 5, 6}));
  EXPECT_EQ(r->items[3]->tensor->to_f32(), (std::vector<float>{11}));
  EXPECT_TRUE(r->items[3]->tensor->shape.empty());
}

// Dict keys as Python hashes them: True is 1 and False is 0 (the later value wins, the first key
// stays), the string "1" and the int 1 differ.
TEST(TorchPt, DictKeysBoolEqualsInt) {
  Pk p;
  p.op('}').op('(');
  p.op(0x88).str("x").i(1).str("y");  // {True: "x", 1: "y"} -> {True: "y"}
  p.op(0x89).str("z").i(0).str("w");  // {False: "z", 0: "w"} -> {False: "w"}
  p.str("1").str("v").i(7).str("u");
  p.op('u');
  PyRef r = load_pkl(p.done());
  ASSERT_EQ(r->kind, PyObject::Kind::Dict);
  ASSERT_EQ(r->dict.size(), 4u);
  EXPECT_EQ(r->dict[0].first->kind, PyObject::Kind::Bool);
  EXPECT_TRUE(r->dict[0].first->b);
  EXPECT_EQ(r->dict[0].second->s, "y");
  EXPECT_EQ(r->dict[1].first->kind, PyObject::Kind::Bool);
  EXPECT_FALSE(r->dict[1].first->b);
  EXPECT_EQ(r->dict[1].second->s, "w");
  EXPECT_EQ(r->get("1")->s, "v");
  EXPECT_EQ(r->dict[3].first->i, 7);
  EXPECT_EQ(r->dict[3].second->s, "u");
}

TEST(TorchPt, NewerPickleForms) {
  const auto st = std::vector<std::pair<std::string, std::string>>{{"data/k", floats(4)}};
  // Protocol 4 opcodes, OrderedDict + BUILD (state_dict _metadata), Parameter paths,
  // _rebuild_tensor_v3 on an untyped storage, torch.Size, _codecs.encode bytes.
  Pk p;
  p.b = std::string("\x80\x04\x95", 3) + std::string(8, '\0');  // PROTO 4, FRAME
  auto key = [&](const char* k) { p.op(0x8c).op(uint8_t(std::strlen(k))).raw(k); };
  p.global("collections", "OrderedDict").op(')').op('R').op(0x94);  // MEMOIZE
  p.op('(');
  key("a");  // _rebuild_parameter(tensor, True, OrderedDict())
  p.global("torch._utils", "_rebuild_parameter").op('(');
  p.tensor("FloatStorage", "k", 4, 0, {2, 2}, {2, 1}).op(0x88);
  p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  key("b");  // _rebuild_tensor_v3(untyped storage, 2, (2,), (1,), False, OrderedDict(),
             // torch.float16)
  p.global("torch._utils", "_rebuild_tensor_v3").op('(').storage("UntypedStorage", "k", 16);
  p.i(2).ints({2}).ints({1}).op(0x89);
  p.global("collections", "OrderedDict").op(')').op('R').global("torch", "float16").op('t').op('R');
  key("c");  // NEWOBJ Parameter(tensor, False)
  p.global("torch.nn.parameter", "Parameter").op('(');
  p.tensor("FloatStorage", "k", 4, 3, {1}, {1}).op(0x89).op('t').op(0x81);
  key("d");  // STACK_GLOBAL torch.Size((3, 4))
  key("torch");
  key("Size");
  p.op(0x93).ints({3, 4}).op(0x85).op('R');
  key("e");  // _codecs.encode(u"\xffA", "latin1")
  p.global("_codecs", "encode")
      .str(
          "\xc3\xbf"
          "A")
      .str("latin1")
      .op(0x86)
      .op('R');
  key("f");
  p.global("torch", "bfloat16");
  key("g");  // LONG1 with 9 bytes of sign extension: -1
  p.op(0x8a).op(9).raw(std::string(9, '\xff'));
  p.op('u');  // SETITEMS
  // BUILD with state {'_metadata': OrderedDict()}, as state_dict() pickles.
  p.op('}');
  key("_metadata");
  p.global("collections", "OrderedDict").op(')').op('R').op('s').op('b');
  p.op('0').op('h').op(0);  // POP, BINGET 0: the memoized dict
  PyRef r = load_pkl(p.done(), st);
  ASSERT_EQ(r->kind, PyObject::Kind::Dict);
  EXPECT_EQ(r->get("a")->tensor->to_f32(), (std::vector<float>{0, 1, 2, 3}));
  // Untyped storage of 16 bytes viewed as f16 from element 2: bytes 4..7 = float 1.0f.
  CkptTensor want_b = make_tensor<uint16_t>("", DType::F16, {2}, {0x0000, 0x3f80});
  EXPECT_EQ(r->get("b")->tensor->dtype, DType::F16);
  EXPECT_EQ(r->get("b")->tensor->data, want_b.data);
  EXPECT_EQ(r->get("c")->tensor->to_f32(), (std::vector<float>{3}));
  ASSERT_EQ(r->get("d")->kind, PyObject::Kind::Tuple);
  EXPECT_EQ(r->get("d")->items.size(), 2u);
  EXPECT_EQ(r->get("e")->kind, PyObject::Kind::Bytes);
  EXPECT_EQ(r->get("e")->s,
            "\xff"
            "A");
  EXPECT_EQ(r->get("f")->s, "torch.bfloat16");
  EXPECT_EQ(r->get("g")->i, -1);
}

TEST(TorchPt, MalformedPicklesNameFileAndCause) {
  const auto st = std::vector<std::pair<std::string, std::string>>{{"data/0", floats(12)}};
  pkl_expect_error(Pk().global("os", "system").str("true").op(0x85).op('R').done(),
                   {"hand.pt", "refused global 'os.system'"});
  pkl_expect_error(Pk().global("builtins", "eval").done(), {"hand.pt", "refused global 'builtins.eval'"});
  pkl_expect_error(Pk().op(0x8c).op(2).raw("os").op(0x8c).op(6).raw("system").op(0x93).done(),
                   {"refused global 'os.system'"});
  pkl_expect_error(Pk().global("torch", "float32").op(')').op('R').done(), {"not callable"});
  pkl_expect_error(Pk().global("collections", "OrderedDict").op(')').op(0x81).done(),
                   {"NEWOBJ", "collections.OrderedDict"});
  pkl_expect_error(Pk().raw("i__main__\nX\n").done(), {"hand.pt", "unsupported pickle opcode 0x69"});
  pkl_expect_error(Pk().op('a').done(), {"hand.pt", "stack underflow"});
  pkl_expect_error(Pk().op('(').op('a').done(), {"stack underflow"});
  pkl_expect_error(Pk().op('e').done(), {"MARK"});
  pkl_expect_error(Pk().op('h').op(3).done(), {"memo key 3"});
  pkl_expect_error(Pk().op(']').op('q').op(0).op('h').op(0).op('a').done(), {"recursive"});
  pkl_expect_error(Pk().op(0x8a).op(9).raw(std::string("\0\0\0\0\0\0\0\0\x01", 9)).done(), {"64 bits"});
  pkl_expect_error(Pk().op('X').u32(1000).raw("abc").done(), {"hand.pt", "truncated"});
  pkl_expect_error(Pk().op(']').done().substr(0, 3) + "", {"hand.pt", "truncated"});
  pkl_expect_error(Pk().op('N').op('N').done(), {"left on the stack"});
  pkl_expect_error(Pk().op(']').op('N').op('b').done(), {"BUILD"});
  pkl_expect_error(Pk().op('}').op('N').op('b').done(), {"BUILD"});  // only OrderedDict
  pkl_expect_error(Pk().op('}').op(']').op('K').op(1).op('s').done(), {"dict key"});
  {
    Pk deep;
    for (int k = 0; k < 2000; ++k) deep.op(']');
    for (int k = 0; k < 1999; ++k) deep.op('a');
    pkl_expect_error(deep.done(), {"nesting deeper"});
  }
  // Tensors that do not fit their storage, or name storages that are not there.
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 1, {12}, {1}).done(), {"hand.pt", "exceeds its storage"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 0, {4, 4}, {4, 1}).done(), {"exceeds its storage"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 0, {2, 2}, {0x7fffffff, 0x7fffffff}).done(),
                   {"exceeds its storage"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 0, {2}, {-1}).done(), {"negative"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 13, 0, {2}, {1}).done(), {"storage '0'", "fewer than 13"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "7", 1, 0, {1}, {1}).done(),
                   {"hand.pt", "storage record 'arc/data/7' is missing"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 0, {1 << 30, 1 << 30}, {0, 0}).done(), {"expand"}, st);
  pkl_expect_error(Pk().tensor("FloatStorage", "0", 12, 0, {2, 3}, {1}).done(), {"ranks"}, st);
  pkl_expect_error(
      Pk().op('(').str("module").global("torch", "FloatStorage").str("0").str("cpu").i(1).op('t').op('Q').done(),
      {"storage"}, st);
  pkl_expect_error(
      Pk().op('(').str("storage").global("collections", "OrderedDict").str("0").str("cpu").i(1).op('t').op('Q').done(),
      {"not a storage type"}, st);
  pkl_expect_error(Pk().storage("FloatStorage", "0", 12).done(), {"bare storage"}, st);
}

TEST(TorchPt, MalformedArchivesNameFile) {
  PyRef tree = sample_tree();
  const std::string path = tmp_path("arch.pt");
  save_torch_pt(path, *tree);
  const auto raw = read_all(path);
  std::remove(path.c_str());
  // Every truncation fails (the end-of-central-directory record goes first).
  for (size_t len = 0; len < raw.size(); len += (len < 64 || raw.size() - len < 256) ? 1 : 61) {
    SCOPED_TRACE(len);
    expect_error([&] { load_torch_pt_memory(raw.data(), len, "cut.pt"); }, {"cut.pt"});
  }
  auto find = [&](const std::vector<uint8_t>& b, const std::string& needle, size_t from = 0) {
    auto it = std::search(b.begin() + std::ptrdiff_t(from), b.end(), needle.begin(), needle.end());
    return size_t(it - b.begin());
  };
  {  // a flipped byte inside a storage fails its CRC
    ZipReader z(raw.data(), raw.size(), "x");
    const auto* e = z.find("archive/data/0");
    ASSERT_TRUE(e);
    auto b = raw;
    b[e->offset] ^= 1;
    expect_error([&] { load_torch_pt_memory(b.data(), b.size(), "crc.pt"); }, {"crc.pt", "archive/data/0", "CRC"});
  }
  {  // method 8 (deflate) in the central directory
    auto b = raw;
    const size_t cd = find(b, "PK\x01\x02");
    ASSERT_LT(cd, b.size());
    b[cd + 10] = 8;
    expect_error([&] { load_torch_pt_memory(b.data(), b.size(), "deflate.pt"); },
                 {"deflate.pt", "archive/data.pkl", "compressed"});
  }
  {  // local header offset pointing nowhere
    auto b = raw;
    const size_t cd = find(b, "PK\x01\x02");
    b[cd + 42] = 0xff;
    b[cd + 43] = 0xff;
    expect_error([&] { load_torch_pt_memory(b.data(), b.size(), "off.pt"); }, {"off.pt"});
  }
  {  // byteorder must be little
    auto b = raw;
    const size_t bo = find(b, "little", find(b, "archive/byteorder") + 1);
    ASSERT_LT(bo, b.size());
    std::memcpy(&b[bo], "bigxxx", 6);
    expect_error([&] { load_torch_pt_memory(b.data(), b.size(), "bo.pt"); }, {"bo.pt"});
  }
  {  // no data.pkl
    const std::string p2 = tmp_path("nopkl.pt");
    {
      ZipWriter z(p2);
      z.add("arc/version", "3\n", 2);
      z.finish();
    }
    auto b = read_all(p2);
    std::remove(p2.c_str());
    expect_error([&] { load_torch_pt_memory(b.data(), b.size(), "nopkl.pt"); }, {"nopkl.pt", "data.pkl"});
  }
  const std::string legacy =
      "\x80\x02\x8a\x0a"
      "abcdefgh";
  expect_error([&] { load_torch_pt_memory(legacy.data(), legacy.size(), "old.pt"); }, {"old.pt", "legacy"});
  const std::string junk(100, 'x');
  expect_error([&] { load_torch_pt_memory(junk.data(), junk.size(), "junk.pt"); }, {"junk.pt", "not a zip"});
  expect_error([&] { load_torch_pt(tmp_path("missing.pt")); }, {"missing.pt"});
}

TEST(TorchPt, WriterRejectsBadInput) {
  CkptTensor q = sample_tensors()[0];
  q.dtype = DType::Q4_0;
  expect_error([&] { save_torch_pt(tmp_path("q.pt"), *py_dict({{"q", py_tensor(q)}})); }, {"q4_0"});
  CkptTensor bad = sample_tensors()[0];
  bad.data.pop_back();
  expect_error([&] { save_torch_pt(tmp_path("b.pt"), *py_dict({{"w", py_tensor(bad)}})); }, {"enc.w"});
  PyRef cyc = py_list({});
  cyc->items.push_back(cyc);
  expect_error([&] { save_torch_pt(tmp_path("c.pt"), *cyc); }, {"cyclic"});
  PyRef deep = py_none();
  for (int k = 0; k < 600; ++k) deep = py_list({deep});
  expect_error([&] { save_torch_pt(tmp_path("d.pt"), *deep); }, {"deeply"});
  cyc->items.clear();
  FILE* f = std::fopen(tmp_path("q.pt").c_str(), "rb");
  EXPECT_EQ(f, nullptr) << "a failed save leaves no file";
  if (f) std::fclose(f);
}

TEST(TorchPt, Torch2Forms) {
  const auto st = std::vector<std::pair<std::string, std::string>>{{"data/0", floats(4)}};
  // _rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, (storage, 0, (2,), (1,), False,
  // OrderedDict(), {}), {}) -- a tensor with metadata, as newer torch writes subclasses.
  Pk p;
  p.global("torch._utils", "_rebuild_from_type_v2").op('(');
  p.global("torch._utils", "_rebuild_tensor_v2").global("torch", "Tensor").op('(');
  p.storage("FloatStorage", "0", 4).i(1).ints({2}).ints({1}).op(0x89);
  p.global("collections", "OrderedDict").op(')').op('R').op('}').op('t').op('}').op('t').op('R');
  PyRef r = load_pkl(p.done(), st);
  ASSERT_EQ(r->kind, PyObject::Kind::Tensor);
  EXPECT_EQ(r->tensor->to_f32(), (std::vector<float>{1, 2}));
  // The nested call may not recurse into _rebuild_from_type_v2 again.
  Pk q;
  q.global("torch._utils", "_rebuild_from_type_v2").op('(');
  q.global("torch._utils", "_rebuild_from_type_v2").global("torch", "Tensor").op(')').op('}');
  q.op('t').op('R');
  pkl_expect_error(q.done(), {"not callable"}, st);
}
