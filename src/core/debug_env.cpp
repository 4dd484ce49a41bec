#include "core/debug_env.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"

namespace cbx {
namespace {

struct Parsed {
  DebugEnv env;
  std::string error;  // the first bad value's message
};

// Reads `name`; returns the index of its value in `allowed`, -1 when unset or empty. A value
// not in the list leaves the default (-1) and records the message (the first one only).
int choice(const char* name, const std::vector<const char*>& allowed, std::string& error) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  for (size_t i = 0; i < allowed.size(); ++i)
    if (std::string(v) == allowed[i]) return int(i);
  if (error.empty()) {
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + std::string(allowed[i]);
    error = std::string("environment variable ") + name + "=" + v + " is not one of " + list +
            " (a debugging switch; unset it for the default)";
  }
  return -1;
}

Parsed parse() {
  Parsed p;
  DebugEnv& e = p.env;
  std::string& err = p.error;
  static_assert(int(Isa::Generic) == 0 && int(Isa::Avx2) == 1 && int(Isa::Avx512) == 2);
  e.force_isa = choice("CBX_DEBUG_FORCE_ISA", {"generic", "avx2", "avx512"}, err);
  e.no_amx = choice("CBX_DEBUG_NO_AMX", {"0", "1"}, err) == 1;
  e.vdpbf16 = choice("CBX_DEBUG_VDPBF16", {"0", "1"}, err);
  e.no_prepack = choice("CBX_DEBUG_NO_PREPACK", {"0", "1"}, err) == 1;
  e.s3gen_shared_arena = choice("CBX_DEBUG_S3GEN_SHARED_ARENA", {"0", "1"}, err) != 0;
  static_assert(int(PrefetchLevel::L1) == 0 && int(PrefetchLevel::L2) == 1);
  e.stream_prefetch = choice("CBX_DEBUG_STREAM_PREFETCH", {"l1", "l2"}, err);
  return p;
}

const Parsed& parsed() {
  static const Parsed p = parse();  // thread-safe initialisation, once per process
  return p;
}

}  // namespace

const DebugEnv& debug_env() { return parsed().env; }
const std::string& debug_env_error() { return parsed().error; }

void check_debug_env() {
  if (!debug_env_error().empty()) throw Error(debug_env_error());
}

std::string kakasi_dictionary_env() {
  for (const char* name : {"KANWADICTPATH", "KANWADICT"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "";
}

}  // namespace cbx
