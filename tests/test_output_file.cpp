// OutputFile (core/output_file.h): temp + rename for regular files and new paths, in place for
// device nodes and FIFOs, inputs never replaced, temporary files removed on errors and signals.
// Device nodes are made in the test's own directory (mknod; a FIFO where that is not allowed).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/output_file.h"

namespace fs = std::filesystem;

namespace {

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cbx-output-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void put(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }
  // Files in the directory other than the given names (left-over temporaries).
  int extra_files(std::initializer_list<std::string> keep) const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      bool kept = false;
      for (const std::string& k : keep) kept = kept || e.path().filename() == k;
      n += !kept;
    }
    return n;
  }
  std::string dir_;
};

TEST_F(OutputFileTest, NewPathIsWrittenOnCommitOnly) {
  {
    cbx::OutputFile o(p("new.bin"));
    o.write("abc", 3);
    EXPECT_FALSE(fs::exists(p("new.bin")));  // still the temporary file
    EXPECT_EQ(extra_files({}), 1);
    o.commit();
  }
  EXPECT_EQ(slurp(p("new.bin")), "abc");
  EXPECT_EQ(extra_files({"new.bin"}), 0);
}

TEST_F(OutputFileTest, ReplacesRegularFileKeepingItsMode) {
  put(p("old.bin"), "old contents");
  ::chmod(p("old.bin").c_str(), 0640);
  cbx::OutputFile o(p("old.bin"));
  o.write("new", 3);
  o.commit();
  EXPECT_EQ(slurp(p("old.bin")), "new");
  struct stat st;
  ASSERT_EQ(::stat(p("old.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST_F(OutputFileTest, UncommittedLeavesTargetAndNoTemporary) {
  put(p("keep.bin"), "keep");
  {
    cbx::OutputFile o(p("keep.bin"));
    o.write("partial", 7);
  }  // destroyed without commit (an error path)
  EXPECT_EQ(slurp(p("keep.bin")), "keep");
  EXPECT_EQ(extra_files({"keep.bin"}), 0);
}

TEST_F(OutputFileTest, RefusesInputsByAnyPath) {
  put(p("model.gguf"), "weights");
  ASSERT_EQ(::link(p("model.gguf").c_str(), p("hard.gguf").c_str()), 0);
  ASSERT_EQ(::symlink(p("model.gguf").c_str(), p("soft.gguf").c_str()), 0);
  for (const char* name : {"model.gguf", "hard.gguf", "soft.gguf"}) {
    try {
      cbx::OutputFile o(p(name), {{"model", p("model.gguf")}});
      FAIL() << name << " accepted";
    } catch (const cbx::Error& e) {
      EXPECT_NE(std::string(e.what()).find("is the model"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(slurp(p("model.gguf")), "weights");
  EXPECT_EQ(extra_files({"model.gguf", "hard.gguf", "soft.gguf"}), 0);
  // An input that does not exist is no conflict.
  cbx::OutputFile ok(p("out.bin"), {{"model", p("missing.gguf")}});
}

TEST_F(OutputFileTest, SymlinkTargetIsWrittenAndLinkKept) {
  put(p("target.bin"), "x");
  ASSERT_EQ(::symlink("target.bin", p("link.bin").c_str()), 0);
  cbx::OutputFile o(p("link.bin"));
  o.write("via link", 8);
  o.commit();
  EXPECT_TRUE(fs::is_symlink(p("link.bin")));
  EXPECT_EQ(slurp(p("target.bin")), "via link");
}

TEST_F(OutputFileTest, RefusesDirectoriesAndMissingParents) {
  fs::create_directory(p("sub"));
  EXPECT_THROW(cbx::OutputFile o(p("sub")), cbx::Error);
  try {
    cbx::OutputFile o(p("no/such/dir/out.wav"));
    FAIL() << "missing directory accepted";
  } catch (const cbx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create a file in"), std::string::npos) << e.what();
  }
}

TEST_F(OutputFileTest, DeviceNodeIsWrittenInPlaceNotReplaced) {
  // A node of our own: /dev/null's numbers, in the test's directory.
  const std::string node = p("null");
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    // No mknod here (unprivileged): a FIFO stands in, drained by a reader thread.
    ASSERT_EQ(::mkfifo(node.c_str(), 0666), 0);
    std::thread reader([&] {
      std::ifstream in(node, std::ios::binary);
      std::string s((std::istreambuf_iterator<char>(in)), {});
      EXPECT_EQ(s, "audio");
    });
    {
      cbx::OutputFile o(node);
      EXPECT_TRUE(o.in_place());
      o.write("audio", 5);
      o.commit();
    }
    reader.join();
    struct stat st;
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
  } else {
    {
      cbx::OutputFile o(node);
      EXPECT_TRUE(o.in_place());
      o.write("audio", 5);
      o.commit();
    }
    struct stat st;
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced";
  }
  EXPECT_EQ(extra_files({"null"}), 0);
}

TEST_F(OutputFileTest, FifoWrittenInPlace) {
  const std::string fifo = p("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(in), {});
  });
  {
    cbx::OutputFile o(fifo);
    o.write("through the pipe", 16);
    o.commit();
  }
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(OutputFileTest, SignalRemovesTemporaryFile) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: prepare an output, tell the parent, then get SIGTERM
    ::close(fds[0]);
    cbx::install_output_cleanup_handlers();
    cbx::OutputFile o(p("killed.wav"));
    o.write("half", 4);
    const char ready = 'r';
    if (::write(fds[1], &ready, 1) != 1) ::_exit(3);
    ::raise(SIGTERM);
    ::_exit(4);  // not reached: the handler re-raises with the default action
  }
  ::close(fds[1]);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(extra_files({}), 0) << "the temporary file survived SIGTERM";
}

}  // namespace
