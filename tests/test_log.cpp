// The library's messages (src/core/log.h, cbx_log_set in include/chatterbox.h): nothing on
// stderr without a callback; with one, each message once, with its level and user data.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "chatterbox.h"
#include "core/error.h"
#include "core/log.h"
#include "text/hf_bpe.h"

namespace {

struct Received {
  std::vector<std::pair<cbx_log_level, std::string>> messages;
};

void record(cbx_log_level level, const char* message, void* user_data) {
  static_cast<Received*>(user_data)->messages.emplace_back(level, message);
}

// A BPE model that sets "dropout": the tokenizer ignores it with a warning (src/text/hf_bpe.cpp).
void make_bpe_with_dropout() {
  nlohmann::json model = {
      {"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", nlohmann::json::array()}, {"dropout", 0.1}};
  cbx::HfBpe bpe(model, "test.json");
}

class Log : public ::testing::Test {
 protected:
  void TearDown() override { cbx_log_set(nullptr, nullptr); }
};

TEST_F(Log, NothingOnStderrWithoutCallback) {
  cbx_log_set(nullptr, nullptr);
  testing::internal::CaptureStderr();
  make_bpe_with_dropout();
  cbx::log(cbx::LogLevel::Error, "an error nobody listens to");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST_F(Log, CallbackGetsEachWarningOnce) {
  Received r;
  cbx_log_set(record, &r);
  testing::internal::CaptureStderr();
  make_bpe_with_dropout();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].first, CBX_LOG_WARN);
  EXPECT_EQ(r.messages[0].second, "test.json: BPE dropout ignored at inference (as HF does for encode)");

  cbx_log_set(nullptr, nullptr);
  make_bpe_with_dropout();
  EXPECT_EQ(r.messages.size(), 1u) << "a cleared callback was still called";
}

TEST_F(Log, ReplacedCallbackAndLevels) {
  Received a, b;
  cbx_log_set(record, &a);
  cbx::log(cbx::LogLevel::Info, "first %d", 1);
  cbx_log_set(record, &b);
  cbx::log(cbx::LogLevel::Debug, "second\n");
  cbx::log(cbx::LogLevel::Error, "%s", "third");
  ASSERT_EQ(a.messages.size(), 1u);
  EXPECT_EQ(a.messages[0].first, CBX_LOG_INFO);
  EXPECT_EQ(a.messages[0].second, "first 1");
  ASSERT_EQ(b.messages.size(), 2u);
  EXPECT_EQ(b.messages[0].first, CBX_LOG_DEBUG);
  EXPECT_EQ(b.messages[0].second, "second") << "the trailing newline is the sink's business";
  EXPECT_EQ(b.messages[1].first, CBX_LOG_ERROR);
  EXPECT_EQ(b.messages[1].second, "third");
}

// Messages from several threads reach the callback one at a time and whole, also while the
// callback is being replaced; once the last callback is in place, every message reaches it.
std::atomic<int> g_inside{0};
std::atomic<int> g_overlaps{0};
void counting(cbx_log_level, const char* message, void* user_data) {
  if (g_inside.fetch_add(1) != 0) g_overlaps.fetch_add(1);
  auto* r = static_cast<Received*>(user_data);
  if (std::strncmp(message, "thread ", 7) == 0) r->messages.emplace_back(CBX_LOG_INFO, message);
  g_inside.fetch_sub(1);
}

TEST_F(Log, SerialisedAcrossThreads) {
  Received a, b;
  constexpr int kThreads = 4, kEach = 200;
  cbx_log_set(counting, &a);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kEach; ++i) cbx::log(cbx::LogLevel::Info, "thread %d message %d", t, i);
    });
  for (int i = 0; i < 50; ++i) cbx_log_set(counting, i % 2 ? &a : &b);
  for (auto& th : threads) th.join();
  EXPECT_EQ(g_overlaps.load(), 0);
  EXPECT_LE(a.messages.size() + b.messages.size(), size_t(kThreads * kEach));
  for (const auto* r : {&a, &b})
    for (const auto& m : r->messages) EXPECT_EQ(m.second.rfind("thread ", 0), 0u) << m.second;

  Received c;
  cbx_log_set(counting, &c);
  for (int i = 0; i < 10; ++i) cbx::log(cbx::LogLevel::Info, "thread main message %d", i);
  EXPECT_EQ(c.messages.size(), 10u);
}

TEST(LogDeathTest, FailedAssertionGoesToTheSinkThenAborts) {
  EXPECT_DEATH(
      {
        cbx::set_log_sink(cbx::log_to_stderr, nullptr);
        int two = 2;
        CBX_ASSERT(two == 3);
      },
      "test_log.cpp:[0-9]+: assertion failed: two == 3");
}

}  // namespace
