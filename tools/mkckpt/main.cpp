// chatterbox-mkckpt: writes a synthetic Chatterbox checkpoint directory (random weights,
// upstream file names, formats, tensor names and dtypes; exact upstream shapes at --size full).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "core/log.h"
#include "mkckpt.h"

namespace {

const char* kUsage =
    "usage: chatterbox-mkckpt --variant turbo|nano|mtl --size full|tiny --seed N [--t3-version v2|v3]\n"
    "                         [--threads N] DIR\n"
    "\n"
    "Writes a synthetic Chatterbox checkpoint with random weights into DIR, in exactly the\n"
    "file formats of the upstream Hugging Face repos, so `chatterbox convert DIR` and every\n"
    "test run through the path real checkpoints take.\n"
    "\n"
    "  --variant turbo   t3_turbo_v1.safetensors, s3gen_meanflow.safetensors, ve.safetensors,\n"
    "                    conds.pt, vocab.json, merges.txt, added_tokens.json,\n"
    "                    special_tokens_map.json, tokenizer_config.json\n"
    "  --variant nano    Turbo's files with t3_nano_v1.safetensors (GPT-2 small T3: 12 layers x 768)\n"
    "  --variant mtl     t3_mtl23ls_v2.safetensors (v3 with --t3-version v3), s3gen.pt, ve.pt,\n"
    "                    conds.pt, grapheme_mtl_merged_expanded_v1.json, Cangjie5_TC.json\n"
    "  --size full       exact upstream shapes (several GB)\n"
    "  --size tiny       consistent shrink for fast tests (docs/synthetic-checkpoints.md)\n"
    "  --seed N          same seed -> byte-identical files\n"
    "  --threads N       generator threads (default: the CPUs this process may use; does not\n"
    "                    change the output)\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "chatterbox-mkckpt: %s\n\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

void ensure_dir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    cbx::fail("%s exists and is not a directory", dir.c_str());
  if (!std::filesystem::is_directory(dir, ec) && !std::filesystem::create_directories(dir, ec))
    cbx::fail("cannot create directory %s: %s", dir.c_str(), ec.message().c_str());
  if (access(dir.c_str(), W_OK) != 0) cbx::fail("directory %s is not writable: %s", dir.c_str(), std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  cbx::set_log_sink(cbx::log_to_stderr, nullptr);  // the library's warnings, on stderr
  mk::Options o;
  std::string variant, size, dir;
  bool have_seed = false;
  o.threads = cbx::available_cpus();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--variant") {
      variant = value();
    } else if (a == "--size") {
      size = value();
    } else if (a == "--seed") {
      const std::string s = value();
      char* end = nullptr;
      errno = 0;
      o.seed = std::strtoull(s.c_str(), &end, 0);
      if (s.empty() || *end || errno || s[0] == '-') usage_error("bad --seed '" + s + "' (a non-negative integer)");
      have_seed = true;
    } else if (a == "--t3-version") {
      const std::string v = value();
      if (v == "v2" || v == "2")
        o.t3_version = 2;
      else if (v == "v3" || v == "3")
        o.t3_version = 3;
      else
        usage_error("unknown --t3-version '" + v + "' (v2 or v3)");
    } else if (a == "--threads") {
      const std::string v = value();
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || errno || n < 1 || n > 1024)
        usage_error("--threads must be an integer in [1, 1024], got '" + v + "'");
      o.threads = int(n);
    } else if (!a.empty() && a[0] == '-') {
      usage_error("unknown option " + a);
    } else if (dir.empty()) {
      dir = a;
    } else {
      usage_error("more than one DIR given");
    }
  }
  if (variant == "turbo")
    o.variant = cbx::CkptVariant::Turbo;
  else if (variant == "nano")
    o.variant = cbx::CkptVariant::Nano;
  else if (variant == "mtl")
    o.variant = cbx::CkptVariant::Mtl;
  else
    usage_error(variant.empty() ? "--variant is required" : "unknown variant '" + variant + "' (turbo, nano or mtl)");
  if (size == "tiny")
    o.tiny = true;
  else if (size != "full")
    usage_error(size.empty() ? "--size is required" : "unknown size '" + size + "' (full or tiny)");
  if (!have_seed) usage_error("--seed is required");
  if (dir.empty()) usage_error("DIR is required");
  if (o.variant != cbx::CkptVariant::Mtl && o.t3_version != 2)
    usage_error("--t3-version applies to --variant mtl only");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  o.dir = dir;

  const auto t0 = std::chrono::steady_clock::now();
  try {
    ensure_dir(o.dir);
    std::fprintf(stderr, "chatterbox-mkckpt: %s %s seed %llu -> %s\n", variant.c_str(), size.c_str(),
                 (unsigned long long)o.seed, o.dir.c_str());
    if (o.variant != cbx::CkptVariant::Mtl)
      mk::write_gpt2_tokenizer(o);
    else
      mk::write_mtl_tokenizer(o);
    mk::write_conds(o);
    mk::write_weight_file(o, cbx::CkptFile::VE);
    mk::write_weight_file(o, cbx::CkptFile::S3Gen);
    mk::write_weight_file(o, cbx::CkptFile::T3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chatterbox-mkckpt: error: %s\n", e.what());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "chatterbox-mkckpt: done in %.1f s\n", s);
  return 0;
}
