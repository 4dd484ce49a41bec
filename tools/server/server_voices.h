// Saved voices of `chatterbox serve`: NAME.voice files in --voices DIR (`chatterbox voice create`
// writes the same files), loaded on first use and kept in memory; uploads are cloned on the
// model's engine thread (VoiceJob) and written atomically (cbx_voice_save goes through
// core/output_file.h: a temporary file renamed over NAME.voice).
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "chatterbox.h"
#include "server_engine.h"

namespace cbx::server {

// OpenAI's voice names; they mean the model's built-in voice unless a saved voice has the name.
const std::vector<std::string>& openai_voice_names();

struct VoiceInfo {
  std::string name;
  std::string variant;  // "turbo", "nano", "mtl"; "" when the file cannot be read
};

class VoiceStore {
 public:
  explicit VoiceStore(std::string dir);  // "" = no saved voices (uploads refused)
  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }

  // "" when `name` may name a voice, else why not (no path separators, no "..", 1 to 64 of
  // [A-Za-z0-9_.-], not starting with '.').
  static std::string name_problem(const std::string& name);
  std::string path(const std::string& name) const { return dir_ + "/" + name + ".voice"; }

  bool exists(const std::string& name) const;
  std::vector<VoiceInfo> list();
  // The saved voice `name`, loaded once (reloaded when its file changes); null with `error` set
  // when it is absent or unreadable.
  std::shared_ptr<cbx_voice> get(const std::string& name, std::string& error);
  // Upload bookkeeping: reserve() fails when the name exists or is being uploaded.
  bool reserve(const std::string& name);
  void release(const std::string& name);
  // Deletes NAME.voice; false when it does not exist.
  bool remove(const std::string& name, std::string& error);

 private:
  struct Cached {
    std::shared_ptr<cbx_voice> voice;
    long long mtime_ns = 0;
    long long size = 0;
  };
  std::string dir_;
  std::mutex mu_;
  std::map<std::string, Cached> cache_;
  std::set<std::string> pending_;
};

// One voice upload: cloned with the model (cbx_voice_create_from_memory) and saved as `path`.
class VoiceJob : public Task {
 public:
  std::string audio;     // the uploaded file's bytes
  std::string filename;  // for messages
  std::string path;      // where NAME.voice goes

  void run(cbx_model* model, const std::atomic<bool>& stop_all) override;
  void drop(const std::string& why) override;
  // Waits for the result: CBX_OK, or the status and message of the failure.
  cbx_status wait(std::string& message, std::string& variant);

 private:
  void finish(cbx_status s, std::string message, std::string variant);
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  cbx_status status_ = CBX_OK;
  std::string message_, variant_;
};

}  // namespace cbx::server
