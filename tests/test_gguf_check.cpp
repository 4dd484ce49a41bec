// Non-finite weight scan (core/gguf_check.h): counts and first index per dtype (f32, f16,
// bf16, f64 elements; q8_0 / q4_0 block scales), chunked and pooled scans agreeing with the
// plain one, the load-refusal message, convert / quantize refusing to write NaN / Inf weights,
// and `chatterbox info --check` on a tiny model with NaN / Inf planted in f32, f16, q8_0 and
// q4_0 tensors (exit status, names, counts, first elements).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

#include "convert/convert.h"
#include "convert/quantize.h"
#include "convert/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_check.h"
#include "core/thread_pool.h"
#include "gguf_test_util.h"

using namespace cbx;
namespace fs = std::filesystem;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/cbx-test-gguf-check-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Finite values of every kind an exponent test could mistake: zeros, denormals, the largest
// finite value of each type.
std::vector<float> clean_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 7) * 0.25f - 0.75f;
  if (n > 4) v[1] = -0.0f, v[2] = 1e-42f, v[3] = 60000.0f, v[4] = -65504.0f;
  return v;
}

std::vector<uint8_t> encode(DType dt, const std::vector<float>& v) {
  std::vector<uint8_t> out(dtype_row_bytes(dt, int64_t(v.size())));
  if (dt == DType::F32)
    std::memcpy(out.data(), v.data(), out.size());
  else
    type_traits(dt).from_float(v.data(), out.data(), int64_t(v.size()));
  return out;
}

// Sets the f16 scale of block b of a q8_0 / q4_0 encoding.
void set_scale(DType dt, std::vector<uint8_t>& enc, int64_t b, float d) {
  const uint16_t h = f32_to_f16(d);
  std::memcpy(enc.data() + size_t(b) * type_traits(dt).block_bytes, &h, 2);
}

TEST(NonFinite, PlainTypesCountElements) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<float> v = clean_values(1000);
    if (dt == DType::BF16) v[3] = 1e30f, v[4] = -3e38f;  // finite in bf16, not in f16
    EXPECT_FALSE(count_non_finite(dt, encode(dt, v).data(), 1000).any());
    v[17] = kNaN, v[18] = -kNaN, v[500] = kInf, v[999] = -kInf, v[998] = kNaN;
    const NonFiniteCount c = count_non_finite(dt, encode(dt, v).data(), 1000);
    EXPECT_EQ(c.nan, 3);
    EXPECT_EQ(c.inf, 2);
    EXPECT_EQ(c.first, 17);
    EXPECT_FALSE(non_finite_counts_blocks(dt));
  }
  // f16: a finite f32 beyond the f16 range encodes as Inf.
  std::vector<float> v = clean_values(64);
  v[40] = 1e6f;
  const NonFiniteCount c = count_non_finite(DType::F16, encode(DType::F16, v).data(), 64);
  EXPECT_EQ(c.nan, 0);
  EXPECT_EQ(c.inf, 1);
  EXPECT_EQ(c.first, 40);

  std::vector<double> d(100, 1.5);
  d[1] = std::numeric_limits<double>::max();
  EXPECT_FALSE(count_non_finite(DType::F64, d.data(), 100).any());
  d[60] = std::nan(""), d[61] = -HUGE_VAL;
  const NonFiniteCount cd = count_non_finite(DType::F64, d.data(), 100);
  EXPECT_EQ(cd.nan, 1);
  EXPECT_EQ(cd.inf, 1);
  EXPECT_EQ(cd.first, 60);

  // Integer tensors are never counted, whatever their bits.
  std::vector<int32_t> ints(64, 0x7fc00000);
  EXPECT_FALSE(count_non_finite(DType::I32, ints.data(), 64).any());
}

TEST(NonFinite, QuantizedTypesCountBlockScales) {
  for (DType dt : {DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_TRUE(non_finite_counts_blocks(dt));
    std::vector<uint8_t> enc = encode(dt, clean_values(32 * 40));
    // Quant bytes that look like NaN / Inf halves (0xff, 0x7c) are not scales: still clean.
    for (int64_t b = 0; b < 40; ++b) std::memset(enc.data() + b * type_traits(dt).block_bytes + 2, 0xff, 2);
    EXPECT_FALSE(count_non_finite(dt, enc.data(), 32 * 40).any());
    set_scale(dt, enc, 5, kInf);
    set_scale(dt, enc, 6, kNaN);
    set_scale(dt, enc, 39, -kInf);
    const NonFiniteCount c = count_non_finite(dt, enc.data(), 32 * 40);
    EXPECT_EQ(c.nan, 1);
    EXPECT_EQ(c.inf, 2);
    EXPECT_EQ(c.first, 5 * 32);
  }
  EXPECT_NE(gguf_test::error_of([] { count_non_finite(DType::Q4_0, nullptr, 33); }).find("q4_0"), std::string::npos);
}

// K-quants: both f16 scales of a 256-weight super-block (d at byte 0, dmin at byte 2) are
// scanned; a block counts once even with both non-finite; quant and scale bytes that look
// like NaN halves are not scales.
TEST(NonFinite, KQuantTypesCountBothScales) {
  for (DType dt : {DType::Q4_K, DType::Q5_K}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_TRUE(non_finite_counts_blocks(dt));
    const size_t bb = type_traits(dt).block_bytes;
    std::vector<uint8_t> enc = encode(dt, clean_values(256 * 12));
    for (int64_t b = 0; b < 12; ++b) std::memset(enc.data() + b * bb + 4, 0xff, 8);
    EXPECT_FALSE(count_non_finite(dt, enc.data(), 256 * 12).any());
    auto put = [&](int64_t b, size_t off, uint16_t h) { std::memcpy(enc.data() + b * bb + off, &h, 2); };
    put(3, 2, 0x7e00);  // dmin NaN
    put(7, 0, 0x7c00);  // d Inf
    put(9, 0, 0xfc00);  // d -Inf and dmin NaN: one block, counted by d
    put(9, 2, 0x7e00);
    const NonFiniteCount c = count_non_finite(dt, enc.data(), 256 * 12);
    EXPECT_EQ(c.nan, 1);
    EXPECT_EQ(c.inf, 2);
    EXPECT_EQ(c.first, 3 * 256);
  }
}

// A GGUF whose tensors span several scan chunks (256 KiB), with non-finite values in the last
// chunk of one, the first of another, and none in a third; read back from memory.
struct ScanFixture {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> f;
  ScanFixture() {
    GgufWriter w;
    std::vector<float> big = clean_values(300000);  // 1.2 MB of f32: 5 chunks
    big[299999] = kNaN, big[299000] = kNaN, big[150000] = kInf;
    w.add_tensor("a.big", DType::F32, {3000, 100}, big.data(), big.size() * 4);
    std::vector<float> clean = clean_values(4096);
    w.add_tensor("b.clean", DType::F32, {4096}, clean.data(), clean.size() * 4);
    std::vector<int32_t> ids(64, -1);
    w.add_tensor("c.ids", DType::I32, {64}, ids.data(), ids.size() * 4);
    std::vector<uint8_t> q = encode(DType::Q4_0, clean_values(32 * 20000));  // 360 KB: 2 chunks
    set_scale(DType::Q4_0, q, 0, kNaN);
    set_scale(DType::Q4_0, q, 19999, kNaN);
    w.add_tensor("d.q4", DType::Q4_0, {20000, 32}, q.data(), q.size());
    std::vector<float> h = clean_values(256);
    h[255] = -kInf;
    std::vector<uint8_t> he = encode(DType::F16, h);
    w.add_tensor("e.f16", DType::F16, {2, 128}, he.data(), he.size());
    bytes = w.to_bytes();
    f = GgufFile::from_memory(bytes.data(), bytes.size(), "mem.gguf");
  }
};

void expect_fixture_result(const std::vector<NonFiniteTensor>& r) {
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].name, "a.big");
  EXPECT_EQ(r[0].dtype, DType::F32);
  EXPECT_EQ(r[0].count.nan, 2);
  EXPECT_EQ(r[0].count.inf, 1);
  EXPECT_EQ(r[0].count.first, 150000);
  EXPECT_EQ(r[1].name, "d.q4");
  EXPECT_EQ(r[1].count.nan, 2);
  EXPECT_EQ(r[1].count.inf, 0);
  EXPECT_EQ(r[1].count.first, 0);
  EXPECT_EQ(r[2].name, "e.f16");
  EXPECT_EQ(r[2].count.inf, 1);
  EXPECT_EQ(r[2].count.first, 255);
}

TEST(NonFinite, FileScanPlainAndPooled) {
  ScanFixture fx;
  expect_fixture_result(find_non_finite(*fx.f));
  for (int nt : {2, 3}) {
    ThreadPool pool(nt);
    expect_fixture_result(find_non_finite(*fx.f, &pool));
  }
  EXPECT_EQ(describe_non_finite(find_non_finite(*fx.f)[1]),
            "tensor 'd.q4' (q4_0) has 2 NaN and 0 Inf block scales, the first at element 0");

  const std::string msg = gguf_test::error_of([&] { check_finite_weights(*fx.f); });
  EXPECT_NE(msg.find("mem.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'a.big' (f32) has 2 NaN and 1 Inf values, the first at element 150000"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("2 more tensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chatterbox info --check mem.gguf"), std::string::npos) << msg;

  const std::string m2 = gguf_test::error_of([&] {
    std::vector<float> v = clean_values(64);
    v[9] = kInf;
    check_finite_tensor("x.w", DType::F32, v.data(), 64, "convert", "in the checkpoint");
  });
  EXPECT_EQ(m2, "convert: tensor 'x.w' (f32) has 0 NaN and 1 Inf values, the first at element 9 in the checkpoint");

  // A clean file passes.
  GgufWriter w;
  std::vector<float> clean = clean_values(100000);
  w.add_tensor("ok", DType::F32, {100000}, clean.data(), clean.size() * 4);
  std::vector<uint8_t> b = w.to_bytes();
  auto ok = GgufFile::from_memory(b.data(), b.size());
  EXPECT_TRUE(find_non_finite(*ok).empty());
  EXPECT_NO_THROW(check_finite_weights(*ok));
}

// ---- tiny models: convert / quantize refuse, info --check reports ----

std::string bin(const char* name) { return std::string(CBX_BINARY_DIR) + "/bin/" + name; }

bool make_tiny(const std::string& dir) {
  if (!fs::exists(bin("chatterbox-mkckpt"))) return false;
  const std::string cmd =
      bin("chatterbox-mkckpt") + " --variant turbo --size tiny --seed 7 --threads 1 " + dir + " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Copies GGUF `in` to `out` with poke(name, dtype, bytes) applied to every tensor's bytes.
void rewrite_gguf(const std::string& in, const std::string& out,
                  const std::function<void(const std::string&, DType, std::vector<uint8_t>&)>& poke) {
  auto f = GgufFile::open(in);
  GgufWriter w;
  for (const std::string& k : f->keys())
    if (k != "general.alignment") w.set_value(k, f->get(k));
  for (const GgufTensorInfo& ti : f->tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(f->tensor(ti).data);
    std::vector<uint8_t> b(p, p + ti.nbytes);
    poke(ti.name, ti.dtype, b);
    w.add_tensor(ti.name, ti.dtype, std::vector<int64_t>(ti.shape, ti.shape + ti.ndim), b.data(), b.size());
  }
  w.write(out);
}

// Runs cmd; its stdout in *out, its exit status returned.
int run(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out->clear();
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(NonFiniteModel, ConvertQuantizeRefuseInfoCheckReports) {
  TempDir tmp;
  const std::string dir = tmp.path + "/ckpt";
  if (!make_tiny(dir)) GTEST_SKIP() << "chatterbox-mkckpt not built";
  ConvertOptions o;
  o.dir = dir;
  o.type = DType::Q4_0;
  o.out = tmp.path + "/clean.gguf";
  convert_checkpoint(o);

  // Plant NaN / Inf in an f32, an f16, the q8_0 and a q4_0 tensor, picked from the file.
  std::map<DType, std::string> pick;
  {
    auto f = GgufFile::open(o.out);
    for (const GgufTensorInfo& ti : f->tensors())
      if (!pick.count(ti.dtype) && ti.nbytes >= 4 * type_traits(ti.dtype).block_bytes) pick[ti.dtype] = ti.name;
  }
  for (DType dt : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0})
    ASSERT_TRUE(pick.count(dt)) << "the tiny q4_0 model has no " << dtype_name(dt) << " tensor";
  const std::string bad = tmp.path + "/bad.gguf";
  rewrite_gguf(o.out, bad, [&](const std::string& name, DType dt, std::vector<uint8_t>& b) {
    if (name != pick[dt]) return;
    if (dt == DType::F32) {
      std::memcpy(b.data() + 4 * 2, &kNaN, 4);
      std::memcpy(b.data() + 4 * 3, &kInf, 4);
    } else if (dt == DType::F16) {
      const uint16_t inf = f32_to_f16(-kInf);
      std::memcpy(b.data() + 2 * 1, &inf, 2);
    } else {
      set_scale(dt, b, 3, dt == DType::Q8_0 ? kInf : kNaN);
    }
  });

  std::string out;
  const std::string cli = bin("chatterbox");
  if (!fs::exists(cli)) GTEST_SKIP() << "chatterbox not built";
  EXPECT_EQ(run(cli + " info " + o.out + " --check", &out), 0) << out;
  EXPECT_NE(out.find("hold no NaN / Inf"), std::string::npos) << out;
  EXPECT_EQ(run(cli + " info " + bad + " --check", &out), 1) << out;
  for (const std::string& want :
       {"tensor '" + pick[DType::F32] + "' (f32) has 1 NaN and 1 Inf values, the first at element 2",
        "tensor '" + pick[DType::F16] + "' (f16) has 0 NaN and 1 Inf values, the first at element 1",
        "tensor '" + pick[DType::Q8_0] + "' (q8_0) has 0 NaN and 1 Inf block scales, the first at element 96",
        "tensor '" + pick[DType::Q4_0] + "' (q4_0) has 1 NaN and 0 Inf block scales, the first at element 96",
        std::string("check: FAILED: 0 layout problems, 4 tensors with non-finite values (2 NaN, 3 Inf)")})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  // Without --check, info does not scan.
  EXPECT_EQ(run(cli + " info " + bad, &out), 0) << out;

  // quantize refuses to copy them, and leaves no output behind.
  const std::string q = tmp.path + "/q.gguf";
  std::string msg = gguf_test::error_of([&] { quantize_gguf(bad, q, DType::Q4_0); });
  EXPECT_NE(msg.find("quantize: tensor '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("refusing to write a model with NaN / Inf weights"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(q));

  // convert refuses a checkpoint with a NaN (named by GGUF tensor, file and checkpoint name),
  // and an f32 value beyond the f16 range when converting to f16.
  auto poke = [&](const std::string& file, const std::string& tensor, float value) {
    auto st = SafetensorsFile::open(dir + "/" + file);
    std::vector<CkptTensor> ts;
    for (const auto& n : st->names()) ts.push_back(st->read(n));
    st.reset();
    std::vector<const CkptTensor*> ptrs;
    for (auto& t : ts) {
      if (t.name == tensor) {
        ASSERT_EQ(t.dtype, DType::F32);
        std::memcpy(t.data.data() + 4, &value, 4);
      }
      ptrs.push_back(&t);
    }
    write_safetensors(dir + "/" + file, ptrs);
  };
  fs::copy_file(dir + "/ve.safetensors", tmp.path + "/ve.bak");
  poke("ve.safetensors", "proj.bias", kNaN);
  o.out = tmp.path + "/c.gguf";
  msg = gguf_test::error_of([&] { convert_checkpoint(o); });
  EXPECT_NE(msg.find("convert: tensor 've.proj.bias' (f32) has 1 NaN and 0 Inf values, the first at element 1 "
                     "in the checkpoint (ve.safetensors 'proj.bias')"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(o.out));
  fs::remove(dir + "/ve.safetensors");
  fs::copy_file(tmp.path + "/ve.bak", dir + "/ve.safetensors");

  // 1e6 is a finite f32: an f32 model takes it, an f16 model cannot (t3.tfmr.wpe.weight is f16 there).
  poke("t3_turbo_v1.safetensors", "tfmr.wpe.weight", 1e6f);
  o.type = DType::F32;
  EXPECT_NO_THROW(convert_checkpoint(o));
  o.type = DType::F16;
  o.out = tmp.path + "/c16.gguf";
  msg = gguf_test::error_of([&] { convert_checkpoint(o); });
  EXPECT_NE(msg.find("convert: tensor 't3.tfmr.wpe.weight' (f16) has 0 NaN and 1 Inf values, the first at element 1 "
                     "after encoding as f16 (values beyond its range)"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(o.out));
}

}  // namespace
