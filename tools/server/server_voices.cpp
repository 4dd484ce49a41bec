#include "server_voices.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cbx::server {

const std::vector<std::string>& openai_voice_names() {
  static const std::vector<std::string> names = {"alloy", "ash",  "ballad",  "coral", "echo",  "fable", "nova",
                                                 "onyx",  "sage", "shimmer", "verse", "marin", "cedar"};
  return names;
}

VoiceStore::VoiceStore(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string VoiceStore::name_problem(const std::string& name) {
  if (name.empty() || name.size() > 64) return "a voice name has 1 to 64 characters";
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
    return "a voice name must not contain path separators";
  if (name.find("..") != std::string::npos) return "a voice name must not contain '..'";
  if (name[0] == '.') return "a voice name must not start with '.'";
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.'))
      return "a voice name may hold only letters, digits, '_', '-' and '.'";
  return "";
}

bool VoiceStore::exists(const std::string& name) const {
  if (!enabled() || !name_problem(name).empty()) return false;
  struct stat st;
  return ::stat(path(name).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<VoiceInfo> VoiceStore::list() {
  std::vector<VoiceInfo> out;
  if (!enabled()) return out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string f = e->d_name;
    const std::string ext = ".voice";
    if (f.size() <= ext.size() || f.compare(f.size() - ext.size(), ext.size(), ext) != 0) continue;
    std::string name = f.substr(0, f.size() - ext.size());
    if (name_problem(name).empty()) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::string err;
    std::shared_ptr<cbx_voice> v = get(n, err);
    out.push_back({n, v ? cbx_voice_variant(v.get()) : ""});
  }
  return out;
}

std::shared_ptr<cbx_voice> VoiceStore::get(const std::string& name, std::string& error) {
  if (!enabled()) {
    error = "no saved voices: the server was started without --voices";
    return nullptr;
  }
  if (const std::string p = name_problem(name); !p.empty()) {
    error = p;
    return nullptr;
  }
  const std::string file = path(name);
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "no saved voice '" + name + "'";
    return nullptr;
  }
  const long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(name);
  if (it != cache_.end() && it->second.mtime_ns == mtime && it->second.size == (long long)st.st_size)
    return it->second.voice;
  cbx_voice* v = nullptr;
  if (cbx_voice_load(file.c_str(), &v) != CBX_OK) {
    error = std::string("saved voice '") + name + "' cannot be read: " + cbx_last_error();
    return nullptr;
  }
  std::shared_ptr<cbx_voice> sp(v, cbx_voice_free);
  cache_[name] = {sp, mtime, (long long)st.st_size};
  return sp;
}

bool VoiceStore::reserve(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.count(name) || exists(name)) return false;
  pending_.insert(name);
  return true;
}

void VoiceStore::release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(name);
}

bool VoiceStore::remove(const std::string& name, std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.erase(name);
  if (::unlink(path(name).c_str()) != 0) {
    error = errno == ENOENT ? "no saved voice '" + name + "'"
                            : "cannot delete voice '" + name + "': " + std::strerror(errno);
    return false;
  }
  return true;
}

// ---- VoiceJob ----

void VoiceJob::finish(cbx_status s, std::string message, std::string variant) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = s;
    message_ = std::move(message);
    variant_ = std::move(variant);
  }
  cv_.notify_all();
}

void VoiceJob::drop(const std::string& why) { finish(CBX_ERR_ABORTED, why, ""); }

void VoiceJob::run(cbx_model* model, const std::atomic<bool>&) {
  cbx_voice* v = nullptr;
  cbx_status s = cbx_voice_create_from_memory(model, audio.data(), audio.size(), filename.c_str(), nullptr, &v);
  if (s != CBX_OK) return finish(s, cbx_last_error(), "");
  std::unique_ptr<cbx_voice, void (*)(cbx_voice*)> owned(v, cbx_voice_free);
  s = cbx_voice_save(v, path.c_str());
  if (s != CBX_OK) return finish(s, cbx_last_error(), "");
  finish(CBX_OK, "", cbx_voice_variant(v));
}

cbx_status VoiceJob::wait(std::string& message, std::string& variant) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  message = message_;
  variant = variant_;
  return status_;
}

}  // namespace cbx::server
