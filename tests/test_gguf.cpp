// GGUF reader/writer: round trips of every metadata type and tensor type, alignment,
// lazy tensors, and a table of malformed files that must throw cbx::Error (never crash).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"

using namespace cbx;

namespace {

std::string tmp_path(const std::string& name) {
  return testing::TempDir() + "cbx_test_gguf_" + std::to_string(getpid()) + "_" + name;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// Little-endian byte builder for hand-made (and malformed) files, written from the spec
// independently of GgufWriter.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& v(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t x) { return v(x); }
  Bytes& u32(uint32_t x) { return v(x); }
  Bytes& u64(uint64_t x) { return v(x); }
  Bytes& raw(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(const std::string& k, uint32_t x) { return str(k).u32(4).u32(x); }
  Bytes& tinfo(const std::string& name, std::vector<uint64_t> dims_inner_first, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(dims_inner_first.size()));
    for (uint64_t d : dims_inner_first) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t>& bytes, const std::string& name = "t.gguf") {
  return GgufFile::from_memory(bytes.data(), bytes.size(), name);
}

// Parses a copy sized exactly to the bytes (so a sanitizer build catches any over-read).
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& name = "bad.gguf") {
  std::vector<uint8_t> exact(bytes);
  try {
    GgufFile::from_memory(exact.data(), exact.size(), name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

GgufValue U(GgufType t, uint64_t x) { return GgufValue{t, x}; }
GgufValue I(GgufType t, int64_t x) { return GgufValue{t, x}; }
GgufValue F(GgufType t, double x) { return GgufValue{t, x}; }
GgufValue S(const std::string& s) { return GgufValue{GgufType::STRING, s}; }
GgufValue B(bool x) { return GgufValue{GgufType::BOOL, x}; }
GgufValue A(GgufType et, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->type = et;
  a->items = std::move(items);
  return GgufValue{GgufType::ARRAY, a};
}

std::vector<std::pair<std::string, GgufValue>> all_metadata() {
  return {
      {"t.u8", U(GgufType::U8, 255)},
      {"t.i8", I(GgufType::I8, -128)},
      {"t.u16", U(GgufType::U16, 65535)},
      {"t.i16", I(GgufType::I16, -32768)},
      {"t.u32", U(GgufType::U32, 4000000000u)},
      {"t.i32", I(GgufType::I32, -2000000000)},
      {"t.f32", F(GgufType::F32, -1.5)},
      {"t.bool_t", B(true)},
      {"t.bool_f", B(false)},
      {"t.string", S("h\xc3\xa9llo, w\0rld")},
      {"t.empty_string", S("")},
      {"t.u64", U(GgufType::U64, std::numeric_limits<uint64_t>::max())},
      {"t.i64", I(GgufType::I64, std::numeric_limits<int64_t>::min())},
      {"t.f64", F(GgufType::F64, 3.141592653589793)},
      {"t.f32_inf", F(GgufType::F32, INFINITY)},
      {"t.f64_nan", F(GgufType::F64, NAN)},
      {"t.arr_u8", A(GgufType::U8, {U(GgufType::U8, 0), U(GgufType::U8, 7)})},
      {"t.arr_i16", A(GgufType::I16, {I(GgufType::I16, -3)})},
      {"t.arr_f64", A(GgufType::F64, {F(GgufType::F64, 0.25), F(GgufType::F64, -1e300)})},
      {"t.arr_bool", A(GgufType::BOOL, {B(true), B(false), B(true)})},
      {"t.arr_str", A(GgufType::STRING, {S("a"), S(""), S("ccc")})},
      {"t.arr_empty", A(GgufType::I64, {})},
      {"t.arr_nested",
       A(GgufType::ARRAY, {A(GgufType::STRING, {S("x"), S("yy")}), A(GgufType::U32, {U(GgufType::U32, 1)}),
                           A(GgufType::ARRAY, {A(GgufType::F32, {F(GgufType::F32, 2)})})})},
  };
}

}  // namespace

TEST(Gguf, MetadataRoundTripEveryType) {
  GgufWriter w;
  auto md = all_metadata();
  for (auto& [k, v] : md) w.set_value(k, v);
  w.set_u32("c.u32", 7);
  w.set_i32("c.i32", -7);
  w.set_u64("c.u64", 1ull << 40);
  w.set_f32("c.f32", 0.1f);
  w.set_bool("c.bool", true);
  w.set_string("c.str", "tok");
  w.set_i32_array("c.i32s", {1, -2, 3});
  w.set_f32_array("c.f32s", {0.5f, -0.25f});
  w.set_string_array("c.strs", {"<s>", "</s>"});
  std::vector<uint8_t> bytes = w.to_bytes();
  auto g = parse(bytes);
  EXPECT_EQ(g->version(), 3u);
  ASSERT_EQ(g->keys().size(), md.size() + 9);
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(g->keys()[i], md[i].first);  // insertion order
    EXPECT_TRUE(same_value(g->get(md[i].first), md[i].second)) << md[i].first;
  }
  EXPECT_EQ(g->get("t.string").as_string(), std::string("h\xc3\xa9llo, w\0rld"));
  EXPECT_EQ(g->get("t.u64").type, GgufType::U64);
  EXPECT_THROW(g->get("t.u64").as_int(), Error);  // does not fit int64
  EXPECT_EQ(g->get("t.i64").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(g->get("c.u32").as_int(), 7);
  EXPECT_EQ(g->get("c.i32").as_int(), -7);
  EXPECT_EQ(g->get("c.u64").as_int(), int64_t(1) << 40);
  EXPECT_EQ(float(g->get("c.f32").as_float()), 0.1f);
  EXPECT_TRUE(g->get("c.bool").as_bool());
  EXPECT_EQ(g->get("c.str").as_string(), "tok");
  EXPECT_EQ(g->get("c.i32s").as_int_array(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g->get("c.f32s").as_float_array(), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(g->get("c.i32s").as_float_array(), (std::vector<float>{1.f, -2.f, 3.f}));
  EXPECT_EQ(g->get("c.strs").as_string_array(), (std::vector<std::string>{"<s>", "</s>"}));
  const GgufArray& nested = g->get("t.arr_nested").as_array();
  ASSERT_EQ(nested.items.size(), 3u);
  EXPECT_EQ(nested.items[0].as_string_array(), (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(nested.items[2].as_array().items[0].as_float_array(), (std::vector<float>{2.f}));
  EXPECT_TRUE(std::isnan(g->get("t.f64_nan").as_float()));
  EXPECT_EQ(g->get("t.f32_inf").as_float(), INFINITY);
  // Accessors reject the wrong type.
  EXPECT_THROW(g->get("c.str").as_int(), Error);
  EXPECT_THROW(g->get("c.u32").as_string(), Error);
  EXPECT_THROW(g->get("c.u32").as_bool(), Error);
  EXPECT_THROW(g->get("c.bool").as_float(), Error);
  EXPECT_THROW(g->get("c.strs").as_int_array(), Error);
  EXPECT_THROW(g->get("c.i32s").as_string_array(), Error);
  EXPECT_THROW(g->get("c.u32").as_array(), Error);
  EXPECT_FALSE(g->has("nope"));
  EXPECT_EQ(g->find("nope"), nullptr);
  try {
    g->get("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing metadata key 'nope'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("t.gguf"), std::string::npos);
  }
}

TEST(Gguf, WriterMatchesSpecLayout) {
  // The writer's bytes for a tiny file equal a layout built by hand from the spec.
  GgufWriter w;
  w.set_u32("a.b", 5);
  float x[2] = {1.f, 2.f};
  w.add_tensor("w", DType::F32, {1, 2}, x, sizeof(x));
  Bytes e;
  e.header(1, 1).kv_u32("a.b", 5).tinfo("w", {2, 1}, 0, 0).pad(32);
  e.v(1.f).v(2.f).pad(32);
  EXPECT_EQ(w.to_bytes(), e.b);
}

TEST(Gguf, TensorRoundTripAllTypesViaFile) {
  std::mt19937 rng(1);
  struct Case {
    const char* name;
    DType dt;
    std::vector<int64_t> shape;
  };
  std::vector<Case> cases = {
      {"f32", DType::F32, {3, 5}},
      {"f16", DType::F16, {2, 3, 7}},
      {"bf16", DType::BF16, {1, 2, 3, 4}},
      {"q8_0", DType::Q8_0, {4, 64}},
      {"q4_0", DType::Q4_0, {3, 96}},
      {"i32", DType::I32, {11}},
      {"blk.0.attn_q.weight", DType::F32, {1}},
  };
  std::vector<std::vector<uint8_t>> data;
  GgufWriter w;
  w.set_string("general.architecture", "chatterbox");
  for (const Case& c : cases) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < c.shape.size(); ++i) rows *= c.shape[i];
    std::vector<uint8_t> d(size_t(rows) * dtype_row_bytes(c.dt, c.shape.back()));
    for (auto& b : d) b = uint8_t(rng());
    w.add_tensor(c.name, c.dt, c.shape, d.data(), d.size());
    data.push_back(std::move(d));
  }
  std::string path = tmp_path("types.gguf");
  w.write(path);
  EXPECT_FALSE(file_exists(path + ".tmp." + std::to_string(getpid())));
  for (int via_file = 0; via_file < 2; ++via_file) {
    std::vector<uint8_t> bytes = w.to_bytes();
    auto g = via_file ? GgufFile::open(path) : parse(bytes);
    EXPECT_EQ(g->size(), bytes.size());
    ASSERT_EQ(g->tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const GgufTensorInfo& ti = g->tensors()[i];
      EXPECT_EQ(ti.name, c.name);
      EXPECT_EQ(ti.dtype, c.dt);
      ASSERT_EQ(ti.ndim, int(c.shape.size()));
      for (int d = 0; d < ti.ndim; ++d) EXPECT_EQ(ti.shape[d], c.shape[d]) << c.name;
      EXPECT_EQ(ti.nbytes, data[i].size());
      EXPECT_EQ(ti.offset % 32, 0u);
      Tensor t = g->tensor(c.name);
      EXPECT_EQ(t.dtype, c.dt);
      EXPECT_EQ(t.ndim, int(c.shape.size()));
      for (int d = 0; d < t.ndim; ++d) EXPECT_EQ(t.shape[d], c.shape[d]) << c.name;
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(t.nbytes(), data[i].size());
      EXPECT_EQ(std::memcmp(t.data, data[i].data(), data[i].size()), 0) << c.name;
      if (via_file) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u);  // mmap is page aligned
      } else {
        EXPECT_EQ(static_cast<const uint8_t*>(t.data), bytes.data() + g->data_offset() + ti.offset);
      }
    }
    EXPECT_EQ(g->find_tensor("nope"), nullptr);
    try {
      g->tensor("nope");
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("missing tensor 'nope'"), std::string::npos);
    }
  }
  std::remove(path.c_str());
}

TEST(Gguf, CustomAlignment) {
  for (size_t a : {1, 8, 64, 4096}) {
    GgufWriter w;
    w.set_string("k", "v");
    w.set_alignment(a);
    uint8_t d1[3 * 2] = {1, 2, 3, 4, 5, 6};
    uint8_t d2[34] = {9};
    w.add_tensor("a", DType::F16, {3}, d1, sizeof(d1));
    w.add_tensor("b", DType::Q8_0, {32}, d2, sizeof(d2));
    w.add_tensor("c", DType::F16, {1, 1}, d1, 2);
    std::string path = tmp_path("align.gguf");
    w.write(path);
    auto g = GgufFile::open(path);
    EXPECT_EQ(g->alignment(), a);
    EXPECT_EQ(g->data_offset() % a, 0u);
    EXPECT_EQ(g->size() % a, 0u);  // the last tensor is padded too
    EXPECT_EQ(g->has("general.alignment"), a != 32);
    if (a != 32) {
      EXPECT_EQ(g->get("general.alignment").as_int(), int64_t(a));
    }
    for (const GgufTensorInfo& ti : g->tensors()) {
      EXPECT_EQ(ti.offset % a, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(g->tensor(ti).data) % a, 0u);
    }
    EXPECT_EQ(std::memcmp(g->tensor("a").data, d1, 6), 0);
    EXPECT_EQ(std::memcmp(g->tensor("b").data, d2, 34), 0);
    EXPECT_EQ(std::memcmp(g->tensor("c").data, d1, 2), 0);
    std::remove(path.c_str());
  }
  // general.alignment set as metadata is honoured, keeps its position, and must be valid.
  GgufWriter w;
  w.set_string("first", "x");
  w.set_u32("general.alignment", 16);
  w.set_alignment(128);
  auto g = parse(w.to_bytes());
  EXPECT_EQ(g->alignment(), 128u);
  EXPECT_EQ(g->keys(), (std::vector<std::string>{"first", "general.alignment"}));
  EXPECT_THROW(w.set_alignment(0), Error);
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set_u32("general.alignment", 3), Error);
  EXPECT_THROW(w.set_u64("general.alignment", 64), Error);
}

namespace {
void fill_ramp(void* ctx, void* dst, size_t bytes) {
  ++*static_cast<int*>(ctx);
  for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(dst)[i] = uint8_t(i);
}
}  // namespace

TEST(Gguf, LazyTensorsProducedAtWriteTime) {
  int calls = 0, fn_calls = 0;
  GgufWriter w;
  w.add_tensor_lazy("ramp", DType::I32, {2, 10}, fill_ramp, &calls);
  w.add_tensor_lazy("fn", DType::F32, {4}, [&](void* dst, size_t bytes) {
    ++fn_calls;
    ASSERT_EQ(bytes, 16u);
    float v[4] = {1, 2, 3, 4};
    std::memcpy(dst, v, 16);
  });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(w.tensor_count(), 2u);
  std::string path = tmp_path("lazy.gguf");
  w.write(path);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(fn_calls, 1);
  auto g = GgufFile::open(path);
  Tensor r = g->tensor("ramp");
  for (int i = 0; i < 80; ++i) EXPECT_EQ(static_cast<const uint8_t*>(r.data)[i], uint8_t(i));
  EXPECT_EQ(g->tensor("fn").ptr<float>()[3], 4.f);
  std::remove(path.c_str());

  // A producer that throws aborts the write: no file, no temporary left behind.
  GgufWriter bad;
  bad.add_tensor_lazy("x", DType::F32, {4}, [](void*, size_t) { fail("producer failed"); });
  std::string bad_path = tmp_path("bad_lazy.gguf");
  EXPECT_THROW(bad.write(bad_path), Error);
  EXPECT_FALSE(file_exists(bad_path));
  EXPECT_FALSE(file_exists(bad_path + ".tmp." + std::to_string(getpid())));
}

TEST(Gguf, WriterRejectsBadInput) {
  GgufWriter w;
  float x[4] = {};
  w.set_u32("k", 1);
  EXPECT_THROW(w.set_u32("k", 2), Error);  // duplicate key
  EXPECT_THROW(w.set_u32("", 2), Error);
  EXPECT_THROW(w.set_value("v", U(GgufType::U8, 256)), Error);
  EXPECT_THROW(w.set_value("v", I(GgufType::I16, 40000)), Error);
  EXPECT_THROW(w.set_value("v", U(GgufType::I32, 1)), Error);  // wrong variant alternative
  EXPECT_THROW(w.set_value("v", F(GgufType::F32, 1e300)), Error);
  EXPECT_THROW(w.set_value("v", A(GgufType::U8, {I(GgufType::I8, 1)})), Error);  // mixed items
  EXPECT_THROW(w.set_value("v", GgufValue{GgufType(13), uint64_t(0)}), Error);
  GgufValue deep = A(GgufType::U8, {});
  for (int i = 0; i < kGgufMaxArrayDepth; ++i) deep = A(GgufType::ARRAY, {deep});
  EXPECT_THROW(w.set_value("v", deep), Error);
  w.add_tensor("t", DType::F32, {4}, x, 16);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {4}, x, 16), Error);  // duplicate name
  EXPECT_THROW(w.add_tensor("u", DType::F32, {4}, x, 12), Error);  // wrong size
  EXPECT_THROW(w.add_tensor("u", DType::F32, {}, x, 4), Error);    // 0-D
  EXPECT_THROW(w.add_tensor("u", DType::F32, {1, 1, 1, 1, 1}, x, 4), Error);
  EXPECT_THROW(w.add_tensor("u", DType::F32, {0, 4}, x, 0), Error);
  EXPECT_THROW(w.add_tensor("u", DType::Q8_0, {16}, x, 16), Error);  // not whole blocks
  EXPECT_THROW(w.add_tensor("u", DType(3), {4}, x, 16), Error);      // unknown type
  EXPECT_THROW(w.add_tensor("", DType::F32, {4}, x, 16), Error);
  EXPECT_THROW(w.add_tensor("u", DType::F32, {int64_t(1) << 62, 8}, x, 16), Error);  // overflow
  EXPECT_EQ(w.tensor_count(), 1u);  // failed adds leave the writer unchanged
  auto g = parse(w.to_bytes());
  EXPECT_EQ(g->keys().size(), 1u);
  EXPECT_EQ(g->tensors().size(), 1u);
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), Error);
}

TEST(Gguf, AcceptsVersion2AndEmptyFiles) {
  Bytes b;
  b.header(1, 1, 2).kv_u32("n", 3).tinfo("w", {4}, 26, 0).pad(32);
  b.v<int32_t>(1).v<int32_t>(2).v<int32_t>(3).v<int32_t>(-4);
  auto g = parse(b.b);
  EXPECT_EQ(g->version(), 2u);
  EXPECT_EQ(g->tensor("w").ptr<int32_t>()[3], -4);
  // No tensors and no padding after the metadata is fine.
  Bytes e;
  e.header(0, 0);
  EXPECT_EQ(parse(e.b)->tensors().size(), 0u);
  EXPECT_EQ(parse(GgufWriter().to_bytes())->keys().size(), 0u);
}

TEST(Gguf, OpenErrorsNameTheFile) {
  auto err = [](const std::string& p) -> std::string {
    try {
      GgufFile::open(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string missing = tmp_path("missing.gguf");
  EXPECT_NE(err(missing).find(missing + ": cannot open"), std::string::npos);
  EXPECT_NE(err(testing::TempDir()).find("not a regular file"), std::string::npos);
  std::string empty = tmp_path("empty.gguf");
  std::ofstream(empty).close();
  EXPECT_NE(err(empty).find("empty"), std::string::npos);
  std::string junk = tmp_path("junk.gguf");
  std::ofstream(junk) << "PK\x03\x04 this is a zip";
  EXPECT_NE(err(junk).find(junk + ": bad magic"), std::string::npos);
  std::remove(empty.c_str());
  std::remove(junk.c_str());
}

namespace {

// A small valid file whose last tensor ends exactly at the end of the file (so every
// truncation cuts tensor data or structure).
std::vector<uint8_t> small_valid_file() {
  GgufWriter w;
  w.set_string("general.architecture", "t3");
  w.set_value("arr", A(GgufType::ARRAY, {A(GgufType::STRING, {S("ab")}), A(GgufType::I8, {I(GgufType::I8, -1)})}));
  w.set_bool("b", true);
  w.set_f32("f", 2.5f);
  uint8_t q[34] = {1, 2, 3};
  w.add_tensor("q", DType::Q8_0, {1, 32}, q, sizeof(q));
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  w.add_tensor("x", DType::F32, {2, 4}, x, sizeof(x));
  return w.to_bytes();
}

}  // namespace

TEST(Gguf, EveryTruncationThrows) {
  std::vector<uint8_t> full = small_valid_file();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + ptrdiff_t(n));
    std::string msg = parse_error(cut);
    EXPECT_FALSE(msg.empty()) << "truncation at " << n << " parsed";
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
  }
}

TEST(Gguf, CorruptedBytesNeverCrash) {
  // Every single-byte corruption either parses or throws cbx::Error.
  std::vector<uint8_t> full = small_valid_file();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t x : {uint8_t(0x00), uint8_t(0x01), uint8_t(0x7f), uint8_t(0x80), uint8_t(0xff)}) {
      std::vector<uint8_t> c(full);
      c[i] = x;
      try {
        auto g = parse(c);
        for (const GgufTensorInfo& ti : g->tensors()) {
          Tensor t = g->tensor(ti);
          volatile uint8_t last = static_cast<const uint8_t*>(t.data)[t.nbytes() - 1];
          (void)last;
        }
      } catch (const Error&) {
      }
    }
  }
}

TEST(Gguf, MalformedFilesTable) {
  const uint64_t kHuge = uint64_t(1) << 60;
  auto valid_tail = [](Bytes& b) { b.pad(32).zeros(64); };
  struct Case {
    const char* what;
    Bytes bytes;
    const char* word;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, Bytes b, const char* word) { cases.push_back({what, std::move(b), word}); };

  add("bad magic", Bytes().raw("GGUX").u32(3).u64(0).u64(0), "bad magic");
  add("too short for magic", Bytes().raw("GG"), "truncated");
  add("version 1", Bytes().raw("GGUF").u32(1).u32(0).u32(0), "version 1");
  add("version 4", Bytes().header(0, 0, 4), "version 4");
  add("version 0", Bytes().header(0, 0, 0), "version");
  add("big-endian", Bytes().header(0, 0, 0x03000000), "big-endian");
  add("huge kv count", Bytes().header(0, kHuge).zeros(64), "kv count");
  add("huge tensor count", Bytes().header(kHuge, 0).zeros(64), "tensor count");
  add("max counts", Bytes().header(UINT64_MAX, UINT64_MAX).zeros(64), "count");
  add("empty key", Bytes().header(0, 1).str("").u32(0).u8(1).zeros(8), "empty");
  add("huge key length", Bytes().header(0, 1).u64(UINT64_MAX).zeros(32), "past end of file");
  add("unknown value type", Bytes().header(0, 1).str("k").u32(13).zeros(16), "unknown value type 13");
  add("huge string length", Bytes().header(0, 1).str("k").u32(8).u64(kHuge).zeros(16), "string value length");
  add("bool 2", Bytes().header(0, 1).str("k").u32(7).u8(2), "bool");
  add("unknown array type", Bytes().header(0, 1).str("k").u32(9).u32(99).u64(1).zeros(16),
      "unknown array element type 99");
  add("huge array length", Bytes().header(0, 1).str("k").u32(9).u32(0).u64(kHuge).zeros(16), "array length");
  add("array of arrays length", Bytes().header(0, 1).str("k").u32(9).u32(9).u64(3).zeros(30), "array length");
  {
    Bytes b;
    b.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 40; ++i) b.u32(9).u64(1);
    b.zeros(16);
    add("nesting too deep", b, "nested");
  }
  add("duplicate key", Bytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2), "duplicate metadata key 'k'");
  add("alignment 48", Bytes().header(0, 1).kv_u32("general.alignment", 48), "power of two");
  add("alignment 0", Bytes().header(0, 1).kv_u32("general.alignment", 0), "power of two");
  add("alignment 2^31", Bytes().header(0, 1).kv_u32("general.alignment", 1u << 31), "power of two");
  add("alignment u64", Bytes().header(0, 1).str("general.alignment").u32(10).u64(32), "u32");
  auto one_tensor = [&](const char* what, const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                        uint64_t off, const char* word) {
    Bytes b;
    b.header(1, 0).tinfo(name, std::move(dims), type, off);
    valid_tail(b);
    add(what, b, word);
  };
  one_tensor("control", "ok", {4}, 0, 0, nullptr);
  one_tensor("n_dims 0", "w", {}, 0, 0, "dimensions");
  one_tensor("n_dims 5", "w", {1, 1, 1, 1, 1}, 0, 0, "dimensions");
  one_tensor("dim 0", "w", {4, 0}, 0, 0, "dimension 1 is 0");
  one_tensor("dim 2^63", "w", {uint64_t(1) << 63}, 0, 0, "dimension");
  one_tensor("dims overflow", "w", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0, "overflow");
  one_tensor("bytes overflow", "w", {uint64_t(1) << 62, 1}, 0, 0, "overflow");
  one_tensor("type id 99", "w", {4}, 99, 0, "type id 99");
  one_tensor("type id 3 (q4_1)", "w", {32}, 3, 0, "type id 3");
  one_tensor("q8_0 partial block", "w", {31}, 8, 0, "block size");
  one_tensor("misaligned offset", "w", {4}, 0, 4, "not aligned");
  one_tensor("offset past end", "blk.0.attn_q.weight", {4}, 0, 64, "past end of file");
  one_tensor("huge offset", "w", {4}, 0, uint64_t(1) << 40, "past end of file");
  one_tensor("offset overflow", "w", {4}, 0, ~uint64_t(31), "overflow");
  one_tensor("too big", "w", {64, 64}, 0, 0, "past end of file");
  one_tensor("empty name", "", {4}, 0, 0, "empty name");
  {
    Bytes b;
    b.header(2, 0).tinfo("w", {4}, 0, 0).tinfo("w", {4}, 0, 32);
    valid_tail(b);
    add("duplicate tensor", b, "duplicate tensor name 'w'");
  }
  {
    Bytes b;
    b.header(1, 0).u64(kHuge).zeros(64);
    add("huge tensor name", b, "tensor name length");
  }
  {
    // Data section starts at the alignment after the infos, not right after them.
    Bytes b;
    b.header(1, 1).kv_u32("general.alignment", 256).tinfo("w", {4}, 0, 0);
    b.pad(32).zeros(16);
    add("data start uses alignment", b, "past end of file");
  }

  for (const Case& c : cases) {
    std::string msg = parse_error(c.bytes.b);
    if (!c.word) {
      EXPECT_EQ(msg, "") << c.what;
      continue;
    }
    EXPECT_NE(msg, "") << c.what << ": parsed";
    EXPECT_NE(msg.find(c.word), std::string::npos) << c.what << ": '" << msg << "' lacks '" << c.word << "'";
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << c.what << ": " << msg;
  }
  // The message names the tensor, the byte range and the file size.
  Bytes b;
  b.header(1, 0).tinfo("blk.0.attn_q.weight", {4, 2}, 0, 0).pad(32).zeros(16);
  EXPECT_EQ(parse_error(b.b, "model.gguf"),
            "model.gguf: tensor 'blk.0.attn_q.weight' data [96, 128) past end of file (112 bytes)");
}

TEST(Gguf, ReadsFilesFromIndependentWriter) {
  // scripts/fuzz_seed_gguf.sh builds GGUFs with Python's struct module from the spec.
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  std::string dir = tmp_path("seeds");
  std::string cmd = std::string("bash '") + CBX_SOURCE_DIR + "/scripts/fuzz_seed_gguf.sh' '" + dir + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto g = GgufFile::open(dir + "/all_types.gguf");
  EXPECT_EQ(g->get("general.architecture").as_string(), "chatterbox");
  EXPECT_EQ(g->get("i16").as_int(), -700);
  EXPECT_EQ(g->get("u64").as_int(), int64_t(1) << 40);
  EXPECT_EQ(g->get("f32").as_float(), 0.5);
  EXPECT_TRUE(g->get("bool").as_bool());
  EXPECT_EQ(g->get("tokens").as_string_array(), (std::vector<std::string>{"<s>", "</s>", "a"}));
  EXPECT_EQ(g->get("nested").as_array().items[1].as_float_array(), (std::vector<float>{1.5f}));
  Tensor w = g->tensor("blk.0.w");
  EXPECT_EQ(w.shape_str(), "[2, 4]");
  EXPECT_EQ(w.ptr<float>()[7], 7.f);
  EXPECT_EQ(g->tensor("q4").shape_str(), "[1, 32]");
  EXPECT_EQ(g->tensor("bf16").dtype, DType::BF16);
  EXPECT_EQ(g->tensor("i32").ptr<int32_t>()[1], -2);
  auto a = GgufFile::open(dir + "/aligned_64_v2.gguf");
  EXPECT_EQ(a->version(), 2u);
  EXPECT_EQ(a->alignment(), 64u);
  EXPECT_EQ(a->tensor("b").shape_str(), "[1, 1, 1, 4]");
  EXPECT_EQ(GgufFile::open(dir + "/empty.gguf")->keys().size(), 0u);
  EXPECT_EQ(GgufFile::open(dir + "/metadata_only.gguf")->get("k").as_array().items.size(), 2u);
  std::system(("rm -rf '" + dir + "'").c_str());
}
