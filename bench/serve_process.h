// The pieces `chatterbox-bench serve` needs around a real `chatterbox serve`: the server as a child
// process (started, waited for, measured, stopped on every exit path) and small HTTP helpers.
// Every connection goes to 127.0.0.1.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace cbx::bench {

// `chatterbox serve` as a child process. Its stdout and stderr go to a log file; the child gets
// SIGTERM when this process dies (PR_SET_PDEATHSIG), and the destructor stops it (SIGTERM, then
// SIGKILL after a bounded wait), so no exit path leaves it running.
class ServerProcess {
 public:
  // Starts BIN with ARGS (argv[1..]); the server must be given --host 127.0.0.1 --port 0.
  ServerProcess(const std::string& bin, const std::vector<std::string>& args, const std::string& log_path);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Waits (at most timeout_s) for the port in the log's "listening on http://127.0.0.1:PORT"
  // line, then for GET /health to answer 200. Throws cbx::Error with the log's tail when the
  // server exits or the time runs out.
  int wait_ready(double timeout_s);
  // SIGTERM, up to wait_s for a clean exit, then SIGKILL. Returns the exit status (128 + signal
  // when killed by one); idempotent.
  int stop(double wait_s = 20);

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  // The last lines of the server's log (for error messages).
  std::string log_tail(size_t max_chars = 2000) const;

 private:
  bool exited();  // reaps the child when it has exited
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = -1;
  std::string log_path_;
};

// VmRSS and VmHWM of a process in MiB (/proc/PID/status); 0 when unreadable.
struct ProcessRss {
  double rss_mb = 0, hwm_mb = 0;
};
ProcessRss process_rss(pid_t pid);

// The value of the unlabelled sample NAME in a Prometheus text page; nan when absent.
double prometheus_value(const std::string& page, const std::string& name);

// GET PATH from 127.0.0.1:PORT; the body, or throws cbx::Error (no answer or status != 200).
std::string http_get(int port, const std::string& path, double timeout_s = 10);

// One POST /v1/audio/speech, its body read as it arrives.
struct SpeechResult {
  bool ok = false;     // 200, audio received, the response complete
  int status = 0;      // HTTP status (0: no response)
  size_t bytes = 0;    // audio bytes received
  double ttfa_s = -1;  // request sent -> first audio byte
  double total_s = 0;  // request sent -> response complete
  std::string error;   // why not ok
};
// timeout_s bounds the whole request (a response still arriving then is cut off and not ok).
SpeechResult post_speech(int port, const std::string& json_body, double timeout_s);

}  // namespace cbx::bench
