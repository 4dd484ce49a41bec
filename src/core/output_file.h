// Safe output files: every file a command or the C API writes goes through OutputFile.
//
//  - An output that is one of the inputs (same device and inode: the same path, a hard link or a
//    symbolic link to it) is refused before any work starts.
//  - A regular file or a new path is written to a temporary file beside it (NAME.tmp-XXXXXX,
//    created when the OutputFile is made, so an unwritable place fails before the expensive work)
//    and renamed over NAME on commit(): a reader never sees half a file, and a failed or killed
//    run leaves the old file as it was.
//  - A character device (e.g. /dev/null) or a FIFO is written in place (opened on first write,
//    since opening a FIFO waits for its reader) and never replaced by a regular file. Block
//    devices, sockets and directories are refused.
//  - A symbolic link is followed: its target is written, the link stays.
//  - The temporary file is removed when the OutputFile is destroyed without commit() (errors,
//    exceptions) and, where the program installed install_output_cleanup_handlers(), on SIGINT,
//    SIGTERM, SIGHUP and SIGPIPE. The library installs no signal handlers itself.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace cbx {

// An input an output must not replace: {role, path}, e.g. {"model", "turbo.gguf"}. The role names
// it in the error. Paths that do not exist are ignored.
struct OutputInput {
  std::string role;
  std::string path;
};

class OutputFile {
 public:
  // Checks `path` against `inputs` and prepares it (see above). `what` names the output in errors
  // ("output", "prompt cache", ...). Throws cbx::Error naming the path and the reason.
  OutputFile(const std::string& path, const std::vector<OutputInput>& inputs = {}, const std::string& what = "output");
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends bytes. Throws naming the path on an I/O error.
  void write(const void* data, size_t n);
  void write(const std::vector<uint8_t>& bytes) { write(bytes.data(), bytes.size()); }
  // The stdio stream (opened on first use) for writers that want one; buffered.
  std::FILE* stream();
  // Flushes and, for a temporary file, syncs it and renames it over the target. Throws on failure
  // (the temporary file is then removed and the target left as it was).
  void commit();
  // Drops what was written (removes the temporary file); the target stays as it was.
  void discard();

  const std::string& path() const { return path_; }      // as given
  const std::string& target() const { return target_; }  // symbolic links resolved
  bool in_place() const { return in_place_; }            // device node / FIFO: written directly
  bool committed() const { return committed_; }

 private:
  void open_in_place();

  std::string path_, target_, tmp_, what_;
  bool in_place_ = false, committed_ = false;
  int fd_ = -1;
  std::FILE* f_ = nullptr;
  int slot_ = -1;  // cleanup registry slot of tmp_
};

// Throws when `path` exists and is the same file as one of `inputs` (same device and inode).
void check_output_not_input(const std::string& path, const std::vector<OutputInput>& inputs,
                            const std::string& what = "output");
// True when a and b name the same existing file.
bool same_file(const std::string& a, const std::string& b);

// Installs SIGINT / SIGTERM / SIGHUP / SIGPIPE handlers that remove every OutputFile temporary file
// still open, then die of the signal as before (default action). For programs (the CLI, the
// server); idempotent.
void install_output_cleanup_handlers();

}  // namespace cbx
