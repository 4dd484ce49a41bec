#include "serve_process.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace cbx::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kHost = "127.0.0.1";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void set_timeouts(httplib::Client& c, double timeout_s) {
  const auto us = [](double s) { return std::chrono::microseconds((long long)(s * 1e6)); };
  c.set_connection_timeout(us(std::min(timeout_s, 10.0)));
  c.set_read_timeout(us(timeout_s));
  c.set_write_timeout(us(std::min(timeout_s, 10.0)));
  c.set_keep_alive(false);
}

}  // namespace

ServerProcess::ServerProcess(const std::string& bin, const std::vector<std::string>& args, const std::string& log_path)
    : log_path_(log_path) {
  CBX_CHECK(::access(bin.c_str(), X_OK) == 0, "server binary %s: not an executable (--server-bin)", bin.c_str());
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CBX_CHECK(fd >= 0, "server log %s: cannot be created", log_path.c_str());
  std::vector<std::string> all{bin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fd);
    fail("fork: cannot start %s", bin.c_str());
  }
  if (pid_ == 0) {
    // The child: SIGTERM when the bench dies, whatever the reason; output to the log.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fd);
}

ServerProcess::~ServerProcess() { stop(); }

bool ServerProcess::exited() {
  if (pid_ <= 0 || status_ >= 0) return true;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == 0) return false;
  status_ = r < 0 ? 255 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return true;
}

int ServerProcess::stop(double wait_s) {
  if (exited()) return status_;
  ::kill(pid_, SIGTERM);
  const Clock::time_point t0 = Clock::now();
  while (!exited() && seconds_since(t0) < wait_s) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!exited()) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = 128 + SIGKILL;
  }
  return status_;
}

std::string ServerProcess::log_tail(size_t max_chars) const {
  const std::string s = read_file(log_path_);
  return s.size() <= max_chars ? s : "..." + s.substr(s.size() - max_chars);
}

int ServerProcess::wait_ready(double timeout_s) {
  const Clock::time_point t0 = Clock::now();
  const std::string needle = std::string("listening on http://") + kHost + ":";
  while (port_ == 0) {
    if (exited()) fail("the server exited (status %d) before listening; its log:\n%s", status_, log_tail().c_str());
    const std::string log = read_file(log_path_);
    if (const size_t at = log.find(needle); at != std::string::npos) {
      port_ = std::atoi(log.c_str() + at + needle.size());
      CBX_CHECK(port_ > 0 && port_ < 65536, "cannot read the port in the server's log:\n%s", log.c_str());
      break;
    }
    CBX_CHECK(seconds_since(t0) < timeout_s, "the server did not listen within %.0f s; its log:\n%s", timeout_s,
              log_tail().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  httplib::Client c(kHost, port_);
  set_timeouts(c, 5);
  for (;;) {
    if (exited()) fail("the server exited (status %d) while loading; its log:\n%s", status_, log_tail().c_str());
    const httplib::Result r = c.Get("/health");
    if (r && r->status == 200) return port_;
    CBX_CHECK(seconds_since(t0) < timeout_s, "GET /health was not 200 within %.0f s; the server's log:\n%s", timeout_s,
              log_tail().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

ProcessRss process_rss(pid_t pid) {
  ProcessRss r;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    const auto kb = [&](const char* key, double& out) {
      if (line.rfind(key, 0) == 0) out = std::atof(line.c_str() + std::strlen(key)) / 1024.0;
    };
    kb("VmRSS:", r.rss_mb);
    kb("VmHWM:", r.hwm_mb);
  }
  return r;
}

double prometheus_value(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line))
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ' ')
      return std::atof(line.c_str() + name.size() + 1);
  return std::nan("");
}

std::string http_get(int port, const std::string& path, double timeout_s) {
  httplib::Client c(kHost, port);
  set_timeouts(c, timeout_s);
  const httplib::Result r = c.Get(path.c_str());
  CBX_CHECK(r, "GET %s: no answer (%s)", path.c_str(), httplib::to_string(r.error()).c_str());
  CBX_CHECK(r->status == 200, "GET %s: status %d: %s", path.c_str(), r->status, r->body.c_str());
  return r->body;
}

SpeechResult post_speech(int port, const std::string& json_body, double timeout_s) {
  SpeechResult out;
  httplib::Client c(kHost, port);
  set_timeouts(c, timeout_s);
  std::string error_body;
  bool late = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/audio/speech";
  req.body = json_body;
  req.set_header("Content-Type", "application/json");
  const Clock::time_point t0 = Clock::now();
  req.response_handler = [&](const httplib::Response& res) {
    out.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    if (out.bytes == 0 && n > 0) out.ttfa_s = seconds_since(t0);
    out.bytes += n;
    late = seconds_since(t0) > timeout_s;
    return !late;  // false cuts the response off
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  out.total_s = seconds_since(t0);
  if (late) {
    out.error = "still receiving after " + std::to_string(timeout_s) + " s";
  } else if (!sent) {
    out.error = "no complete response: " + httplib::to_string(err);
  } else if (out.status != 200) {
    out.error = "status " + std::to_string(out.status) + ": " + error_body;
  } else if (out.bytes == 0) {
    out.error = "200 without audio";
  } else {
    out.ok = true;
  }
  return out;
}

}  // namespace cbx::bench
