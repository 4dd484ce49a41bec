#include "core/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace cbx {
namespace {

// Temporary files a signal handler may have to remove: fixed slots (no allocation, no locks in the
// handler). A slot is claimed with a compare-exchange, its path written, then marked live.
constexpr int kSlots = 32;
struct CleanupSlot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 live
  char path[PATH_MAX];
};
CleanupSlot g_slots[kSlots];

int register_tmp(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(2);
      return i;
    }
  }
  return -1;  // more than kSlots outputs at once: still removed on errors, not on signals
}

void unregister_tmp(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0);
}

extern "C" void cleanup_on_signal(int sig) {
  for (CleanupSlot& s : g_slots)
    if (s.state.load() == 2) ::unlink(s.path);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
  ::raise(sig);
}

std::string errno_text(int e) { return std::strerror(e); }

std::string dir_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_not_input(const std::string& path, const std::vector<OutputInput>& inputs, const std::string& what) {
  for (const OutputInput& in : inputs) {
    if (in.path.empty() || in.path == "-") continue;
    if (same_file(path, in.path))
      fail("%s '%s' is the %s ('%s'): refusing to overwrite an input", what.c_str(), path.c_str(), in.role.c_str(),
           in.path.c_str());
  }
}

OutputFile::OutputFile(const std::string& path, const std::vector<OutputInput>& inputs, const std::string& what)
    : path_(path), target_(path), what_(what) {
  CBX_CHECK(!path.empty(), "%s: empty path", what.c_str());
  check_output_not_input(path, inputs, what);
  struct stat lst;
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    char resolved[PATH_MAX];
    if (!::realpath(path.c_str(), resolved))
      fail("%s '%s': a symbolic link whose target cannot be resolved: %s", what.c_str(), path.c_str(),
           errno_text(errno).c_str());
    target_ = resolved;
  }
  struct stat st;
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) fail("%s '%s': %s", what.c_str(), path.c_str(), errno_text(errno).c_str());
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // Written in place; checked now so a permission problem shows before the work.
    if (::access(target_.c_str(), W_OK) != 0)
      fail("%s '%s': not writable: %s", what.c_str(), path.c_str(), errno_text(errno).c_str());
    in_place_ = true;
    return;
  }
  if (exists && !S_ISREG(st.st_mode))
    fail("%s '%s' is %s: refusing to write there", what.c_str(), path.c_str(), kind_of(st.st_mode));
  if (exists && ::access(target_.c_str(), W_OK) != 0)
    fail("%s '%s': not writable: %s", what.c_str(), path.c_str(), errno_text(errno).c_str());

  std::string tmpl = dir_of(target_) + "/" + base_of(target_) + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  if (fd_ < 0)
    fail("%s '%s': cannot create a file in '%s': %s", what.c_str(), path.c_str(), dir_of(target_).c_str(),
         errno_text(errno).c_str());
  tmp_ = buf.data();
  slot_ = register_tmp(tmp_);
  // mkstemp makes 0600; give the file the mode a plain create would (or the replaced file's).
  mode_t mode = 0666;
  if (exists) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode &= ~mask;
  }
  ::fchmod(fd_, mode);
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::open_in_place() {
  fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) fail("%s '%s': cannot open: %s", what_.c_str(), path_.c_str(), errno_text(errno).c_str());
}

std::FILE* OutputFile::stream() {
  CBX_CHECK(!committed_, "%s '%s': written after commit", what_.c_str(), path_.c_str());
  if (f_) return f_;
  if (fd_ < 0 && in_place_) open_in_place();
  CBX_CHECK(fd_ >= 0, "%s '%s': written after discard", what_.c_str(), path_.c_str());
  f_ = ::fdopen(fd_, "wb");
  if (!f_) fail("%s '%s': %s", what_.c_str(), path_.c_str(), errno_text(errno).c_str());
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  return f_;
}

void OutputFile::write(const void* data, size_t n) {
  if (n == 0) return;
  std::FILE* f = stream();
  if (std::fwrite(data, 1, n, f) != n)
    fail("%s '%s': write failed: %s", what_.c_str(), path_.c_str(), errno_text(errno).c_str());
}

void OutputFile::commit() {
  CBX_CHECK(!committed_, "%s '%s': committed twice", what_.c_str(), path_.c_str());
  if (in_place_ && fd_ < 0 && !f_) open_in_place();  // nothing written: still "write" it (e.g. a FIFO reader sees EOF)
  int err = 0;
  if (f_) {
    if (std::fflush(f_) != 0) err = errno;
  }
  if (!err && !in_place_ && ::fsync(fd_) != 0) err = errno;
  const int close_rc = f_ ? std::fclose(f_) : ::close(fd_);
  if (!err && close_rc != 0) err = errno;
  f_ = nullptr;
  fd_ = -1;
  if (!err && !in_place_ && ::rename(tmp_.c_str(), target_.c_str()) != 0) err = errno;
  if (err) {
    discard();
    fail("%s '%s': cannot write it: %s", what_.c_str(), path_.c_str(), errno_text(err).c_str());
  }
  unregister_tmp(slot_);
  slot_ = -1;
  tmp_.clear();
  committed_ = true;
}

void OutputFile::discard() {
  if (f_)
    std::fclose(f_);
  else if (fd_ >= 0)
    ::close(fd_);
  f_ = nullptr;
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  unregister_tmp(slot_);
  slot_ = -1;
  tmp_.clear();
}

void install_output_cleanup_handlers() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = cleanup_on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction old;
    // A signal the parent set to be ignored (nohup, SIG_IGN SIGPIPE) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace cbx
