// The shared parameter validation (pipeline/synth_options.h): every range, the one message
// format, the strict CLI parsers, the conversions to the pipelines' params, the language
// rule; and the CPU count of core/cpu.h from fake cgroup files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "core/cpu.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/synth_options.h"
#include "pipeline/turbo_pipeline.h"

namespace {

using cbx::UserLoadOptions;
using cbx::UserSynthOptions;

// The message of the InvalidArgumentError fn throws ("" when it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const cbx::InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

std::string synth_error(void (*set)(UserSynthOptions&)) {
  UserSynthOptions o;
  set(o);
  return error_of([&] { cbx::validate(o); });
}

TEST(SynthOptions, EachBadValueNamesParameterFlagRangeAndValue) {
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.temperature = -1; }),
            "temperature (--temperature) must be in (0, 10], got -1");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.temperature = 0; }),
            "temperature (--temperature) must be in (0, 10], got 0");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.temperature = std::nan(""); }),
            "temperature (--temperature) must be in (0, 10], got nan");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.temperature = -std::numeric_limits<double>::infinity(); }),
            "temperature (--temperature) must be in (0, 10], got -inf");
  // Stored as a float: a positive double that rounds to a float 0 is no temperature.
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.temperature = 1e-50; }),
            "temperature (--temperature) must be in (0, 10], got 1e-50");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.top_p = -0.5; }), "top_p (--top-p) must be in (0, 1], got -0.5");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.top_p = 1.5; }), "top_p (--top-p) must be in (0, 1], got 1.5");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.top_k = -5; }), "top_k (--top-k) must be in [0, 100000], got -5");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.repetition_penalty = -2; }),
            "repetition_penalty (--repetition-penalty) must be in (0, 10], got -2");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.min_p = 1.25; }), "min_p (--min-p) must be in [0, 1], got 1.25");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.cfg_weight = -1; }),
            "cfg_weight (--cfg-weight) must be in [0, 100], got -1");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.exaggeration = -3; }),
            "exaggeration (--exaggeration) must be in [0, 100], got -3");
  EXPECT_EQ(synth_error([](UserSynthOptions& o) { o.max_chunk_tokens = 0; }),
            "max_chunk_tokens (--chunk-tokens) must be in [1, 100000], got 0");

  UserLoadOptions l;
  l.n_threads = 0;
  EXPECT_EQ(error_of([&] { cbx::validate(l); }), "n_threads (--threads) must be in [1, 1024], got 0");
  l.n_threads = 1000000000000;
  EXPECT_EQ(error_of([&] { cbx::validate(l); }), "n_threads (--threads) must be in [1, 1024], got 1000000000000");
  l.n_threads = 1024;
  l.max_new_tokens = 0;
  EXPECT_EQ(error_of([&] { cbx::validate(l); }), "max_new_tokens (--max-tokens) must be in [1, 100000], got 0");
}

TEST(SynthOptions, ValidValuesAndTheRangeEndsPass) {
  UserSynthOptions o;
  o.seed = std::numeric_limits<uint64_t>::max();
  o.temperature = 10;
  o.top_p = 1;
  o.top_k = 0;
  o.repetition_penalty = 1;
  o.min_p = 0;
  o.cfg_weight = 0;
  o.exaggeration = 100;
  o.max_chunk_tokens = 1;
  EXPECT_EQ(error_of([&] { cbx::validate(o); }), "");
  EXPECT_EQ(error_of([] { cbx::validate(UserSynthOptions{}); }), "");  // all defaults
  UserLoadOptions l;
  l.n_threads = 1;
  l.max_new_tokens = 1;
  EXPECT_EQ(error_of([&] { cbx::validate(l); }), "");
}

TEST(SynthOptions, ModelLimitInTheMessage) {
  const cbx::ParamSpec s = cbx::param::kMaxNewTokens.limited(6794, "this model's T3 positions");
  EXPECT_EQ(error_of([&] { cbx::check_param(s, 7000); }),
            "max_new_tokens (--max-tokens) must be in [1, 6794] (this model's T3 positions), got 7000");
  EXPECT_EQ(error_of([&] { cbx::check_param(s, 6794); }), "");
  // A model limit above the static one keeps the static range.
  EXPECT_EQ(cbx::param::kMaxNewTokens.limited(1e9, "x").range(), "[1, 100000]");
  EXPECT_EQ(error_of([&] { cbx::check_param(cbx::param::kTopK, 2.5); }),
            "top_k (--top-k) must be in [0, 100000], got 2.5");
  EXPECT_EQ(cbx::param_error(cbx::param::kTopP, 0.95 + 1), "top_p (--top-p) must be in (0, 1], got 1.95");
}

TEST(SynthOptions, ConversionsKeepTheInternalDefaults) {
  const cbx::TurboSynthParams d = cbx::to_turbo_params({});
  EXPECT_EQ(d.seed, 0u);
  EXPECT_LT(d.temperature, 0);
  EXPECT_LT(d.top_k, 0);
  EXPECT_LT(d.top_p, 0);
  EXPECT_LT(d.repetition_penalty, 0);
  EXPECT_EQ(d.max_chunk_tokens, 0);

  UserSynthOptions o;
  o.seed = 7;
  o.temperature = 0.5;
  o.top_k = 0;
  o.top_p = 0.9;
  o.repetition_penalty = 1.5;
  o.min_p = 0.1;
  o.cfg_weight = 0;
  o.exaggeration = 0.7;
  o.max_chunk_tokens = 33;
  o.language = "fr";
  const cbx::TurboSynthParams t = cbx::to_turbo_params(o);
  EXPECT_EQ(t.seed, 7u);
  EXPECT_EQ(t.temperature, 0.5f);
  EXPECT_EQ(t.top_k, 0);
  EXPECT_EQ(t.top_p, 0.9);
  EXPECT_EQ(t.repetition_penalty, 1.5f);
  EXPECT_EQ(t.max_chunk_tokens, 33);
  const cbx::MtlSynthParams m = cbx::to_mtl_params(o);
  EXPECT_EQ(m.language, "fr");
  EXPECT_EQ(m.seed, 7u);
  EXPECT_EQ(m.min_p, 0.1f);
  EXPECT_EQ(m.cfg_weight, 0.f);
  EXPECT_EQ(m.exaggeration, 0.7f);
  EXPECT_EQ(m.top_p, 0.9f);
  EXPECT_EQ(m.max_chunk_tokens, 33);
  const cbx::MtlSynthParams md = cbx::to_mtl_params({});
  EXPECT_LT(md.cfg_weight, 0);
  EXPECT_LT(md.exaggeration, 0);
  EXPECT_LT(md.min_p, 0);

  o.temperature = -1;  // the conversions validate
  EXPECT_NE(error_of([&] { cbx::to_turbo_params(o); }), "");
  EXPECT_NE(error_of([&] { cbx::to_mtl_params(o); }), "");

  const cbx::TurboLoadParams lt = cbx::to_turbo_load_params({});
  EXPECT_EQ(lt.n_threads, cbx::available_cpus());
  EXPECT_EQ(lt.max_new_tokens, -1);
  EXPECT_EQ(lt.kv_type, cbx::DType::F16);
  UserLoadOptions l;
  l.n_threads = 3;
  l.max_new_tokens = 50;
  l.kv_type = cbx::DType::F32;
  l.repack = false;
  const cbx::MtlLoadParams lm = cbx::to_mtl_load_params(l);
  EXPECT_EQ(lm.n_threads, 3);
  EXPECT_EQ(lm.max_new_tokens, 50);
  EXPECT_EQ(lm.kv_type, cbx::DType::F32);
  EXPECT_FALSE(lm.repack);
  l.kv_type = cbx::DType::Q8_0;
  EXPECT_EQ(error_of([&] { cbx::validate(l); }), "kv_type (--kv-type) must be f16 or f32, got q8_0");
}

TEST(SynthOptions, IgnoredOptionsPerVariant) {
  UserSynthOptions o;
  o.top_k = 5;
  o.min_p = 0.1;
  o.exaggeration = 1;
  EXPECT_EQ(cbx::ignored_options(cbx::Variant::Turbo, o), (std::vector<std::string>{"--min-p", "--exaggeration"}));
  EXPECT_EQ(cbx::ignored_options(cbx::Variant::Mtl, o), (std::vector<std::string>{"--top-k"}));
  EXPECT_TRUE(cbx::ignored_options(cbx::Variant::Nano, UserSynthOptions{}).empty());
}

TEST(SynthOptions, LanguageIsCaseInsensitiveEverywhere) {
  const std::vector<std::string> en = {"en"}, mtl = {"de", "en", "fr"};
  for (const char* l : {"en", "EN", "En", "eN"}) {
    EXPECT_EQ(cbx::resolve_language(cbx::Variant::Turbo, en, std::string(l)), "en") << l;
    EXPECT_EQ(cbx::resolve_language(cbx::Variant::Nano, en, std::string(l)), "en") << l;
    EXPECT_EQ(cbx::resolve_language(cbx::Variant::Mtl, mtl, std::string(l)), "en") << l;
  }
  EXPECT_EQ(cbx::resolve_language(cbx::Variant::Turbo, en, std::nullopt), "en");
  EXPECT_EQ(cbx::resolve_language(cbx::Variant::Turbo, en, std::string()), "en");
  EXPECT_EQ(error_of([&] { cbx::resolve_language(cbx::Variant::Turbo, en, std::string("fr")); }),
            "language (--lang): a turbo model speaks English only (en); 'fr' needs a Multilingual model");
  EXPECT_EQ(cbx::resolve_language(cbx::Variant::Mtl, mtl, std::string("FR")), "fr");
  EXPECT_NE(error_of([&] {
              cbx::resolve_language(cbx::Variant::Mtl, mtl, std::nullopt);
            }).find("language (--lang): a Multilingual model needs a language; supported:"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cbx::resolve_language(cbx::Variant::Mtl, mtl, std::string("xx")); }).find("'xx'"),
            std::string::npos);
}

TEST(SynthOptions, ParseU64AcceptsDigitsOnly) {
  EXPECT_EQ(cbx::parse_u64("--seed", "0"), 0u);
  EXPECT_EQ(cbx::parse_u64("--seed", "007"), 7u);
  EXPECT_EQ(cbx::parse_u64("--seed", "18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"abc", "-5", "", "1e3", " 5", "5 ", "+5", "18446744073709551616", "0x10"})
    EXPECT_EQ(error_of([&] { cbx::parse_u64("--seed", bad); }),
              std::string("--seed must be an integer in [0, 18446744073709551615], got '") + bad + "'")
        << bad;
}

TEST(SynthOptions, ParseIntRejectsFractionsExponentsAndJunk) {
  EXPECT_EQ(cbx::parse_int("--threads", "4"), 4);
  EXPECT_EQ(cbx::parse_int("--top-k", "-5"), -5);  // parsed; the validator refuses it
  EXPECT_EQ(cbx::parse_int("--threads", "1000000000000"), 1000000000000);
  for (const char* bad : {"1.7", "1e12", "5x", "", "-", "abc", " 4", "+4"})
    EXPECT_EQ(error_of([&] { cbx::parse_int("--threads", bad); }),
              std::string("--threads must be an integer, got '") + bad + "'")
        << bad;
  EXPECT_EQ(error_of([] { cbx::parse_int("--threads", "99999999999999999999"); }),
            "--threads must be an integer in [-9223372036854775808, 9223372036854775807], got "
            "'99999999999999999999'");
}

TEST(SynthOptions, ParseNumberRejectsNonFiniteAndJunk) {
  EXPECT_EQ(cbx::parse_number("--temperature", "0.8"), 0.8);
  EXPECT_EQ(cbx::parse_number("--temperature", "-1"), -1.0);
  EXPECT_EQ(cbx::parse_number("--temperature", "1e-3"), 1e-3);
  EXPECT_EQ(cbx::parse_number("--temperature", "2E+1"), 20.0);
  EXPECT_EQ(cbx::parse_number("--temperature", "5."), 5.0);
  for (const char* bad :
       {"nan", "NaN", "inf", "-inf", "infinity", "1e999", "0x10", "1.5x", "", " 1", "1 ", "+1", "--1", "1..2", "e5"})
    EXPECT_EQ(error_of([&] { cbx::parse_number("--temperature", bad); }),
              std::string("--temperature must be a finite decimal number, got '") + bad + "'")
        << bad;
  EXPECT_EQ(cbx::parse_kv_type("--kv-type", "f32"), cbx::DType::F32);
  EXPECT_EQ(error_of([] { cbx::parse_kv_type("--kv-type", "q8_0"); }), "--kv-type must be f16 or f32, got 'q8_0'");
}

TEST(SynthOptions, ThreadCountWarning) {
  EXPECT_FALSE(cbx::thread_count_warning(2, 2));
  EXPECT_FALSE(cbx::thread_count_warning(1, 4));
  const std::optional<std::string> w = cbx::thread_count_warning(64, 2);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("n_threads (--threads) 64 is more than the 2 CPUs this process may use"), std::string::npos);
  EXPECT_NE(cbx::thread_count_warning(2, 1)->find("the 1 CPU this"), std::string::npos);
  EXPECT_FALSE(cbx::thread_count_warning(cbx::available_cpus()));
}

// ---- core/cpu.h: the CPUs this process may use ----

TEST(AvailableCpus, CgroupFileParsers) {
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("200000 100000\n"), 2);
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("150000 100000"), 2);  // 1.5 CPUs: rounded up
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("5000 100000"), 1);    // at least one
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("400000"), 4);         // the default period
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max(""), std::nullopt);
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("junk 100000"), std::nullopt);
  EXPECT_EQ(cbx::parse_cgroup_v2_cpu_max("100000 0"), std::nullopt);
  EXPECT_EQ(cbx::parse_cgroup_v1_cpu_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(cbx::parse_cgroup_v1_cpu_quota("250000\n", "100000\n"), 3);
  EXPECT_EQ(cbx::parse_cgroup_v1_cpu_quota("50000", "50000"), 1);
  EXPECT_EQ(cbx::parse_cgroup_v1_cpu_quota("x", "100000"), std::nullopt);
}

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cbx-test-cgroup-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = std::filesystem::path(root_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root_;
};

TEST_F(CgroupTree, V2TakesTheTightestQuotaUpTheTree) {
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/a/b\n"), std::nullopt);  // no files: no limit
  write("a/b/cpu.max", "max 100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/a/b\n"), std::nullopt);
  write("a/cpu.max", "300000 100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/a/b\n"), 3);
  write("a/b/cpu.max", "150000 100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/a/b\n"), 2);
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/a/b/\n"), 2);
  // Another cgroup's quota does not count.
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/c\n"), std::nullopt);
}

TEST_F(CgroupTree, V2InsideAContainerReadsTheMountedRoot) {
  // /proc/self/cgroup names the host's path; the container mounts its own cgroup as the root.
  write("cpu.max", "100000 100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/docker/0123abcd\n"), 1);
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "0::/\n"), 1);
}

TEST_F(CgroupTree, V1CpuController) {
  const std::string self = "12:memory:/x\n4:cpu,cpuacct:/x\n1:name=systemd:/x\n";
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, self), std::nullopt);
  write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, self), std::nullopt);
  write("cpu,cpuacct/x/cpu.cfs_quota_us", "250000\n");
  write("cpu,cpuacct/x/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, self), 3);
  // The controllers' names are matched whole: "cpuset" is not "cpu".
  write("cpuset/cpu.cfs_quota_us", "100000\n");
  write("cpuset/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "5:cpuset:/\n"), std::nullopt);
  // A plain "cpu" directory.
  write("cpu/cpu.cfs_quota_us", "100000\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "3:cpu:/y\n"), 1);
  EXPECT_EQ(cbx::cgroup_cpu_limit(root_, "garbage\n\n0:\n"), std::nullopt);
}

TEST(AvailableCpus, SaneOnThisMachine) {
  const int n = cbx::available_cpus();
  EXPECT_GE(n, 1);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_LE(n, int(hw));
  }
  EXPECT_EQ(cbx::available_cpus(), n);
}

}  // namespace
