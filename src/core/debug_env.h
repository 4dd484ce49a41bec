// The one place the library reads environment variables: debug_env.cpp is the only file under
// src/ that reads the process environment. Every choice a user makes is a load parameter
// (include/chatterbox.h cbx_model_params, the CLI's flags); the environment holds debugging
// switches only, all named CBX_DEBUG_*, for comparing kernel paths on one machine:
//
//   CBX_DEBUG_FORCE_ISA=generic|avx2|avx512  kernel ISA (at most what the CPU has; core/cpu.h)
//   CBX_DEBUG_NO_AMX=0|1                     1: no AMX tiles (the bf16 GEMM falls to vdpbf16ps / f32)
//   CBX_DEBUG_VDPBF16=0|1                    vdpbf16ps bf16 GEMM off / on (default: AMD CPUs only)
//   CBX_DEBUG_NO_PREPACK=0|1                 1: no pre-packed bf16 weight panels (packed per call)
//   CBX_DEBUG_S3GEN_SHARED_ARENA=0|1         0: flow, CFM and HiFT each keep their own work arena
//   CBX_DEBUG_STREAM_PREFETCH=l1|l2          cache level of the decode's weight prefetches
//
// Unset or empty = the default. No old (pre-CBX_DEBUG_) name is read any more.
//
// The variables are read and checked once, at first use (thread-safe). A bad value (anything
// outside the list above) never throws where the value is used (kernel selection runs inside
// hot paths and static initialisers): that switch keeps its default there, and
// debug_env_error() holds one message naming the variable, its value and the allowed values.
// Loading a model (pipeline/synth_options.h validate(UserLoadOptions), used by the C API, the
// CLI and the server) fails with that message, every time it is tried; tools that load no
// model call check_debug_env().
#pragma once
#include <string>

namespace cbx {

struct DebugEnv {
  int force_isa = -1;              // CBX_DEBUG_FORCE_ISA: -1 unset, else int(Isa) (core/cpu.h)
  bool no_amx = false;             // CBX_DEBUG_NO_AMX
  int vdpbf16 = -1;                // CBX_DEBUG_VDPBF16: -1 unset (the CPU decides), 0 off, 1 on
  bool no_prepack = false;         // CBX_DEBUG_NO_PREPACK
  bool s3gen_shared_arena = true;  // CBX_DEBUG_S3GEN_SHARED_ARENA
  int stream_prefetch = -1;        // CBX_DEBUG_STREAM_PREFETCH: -1 unset, else int(PrefetchLevel)
};

// The switches, read at the first call. Never throws.
const DebugEnv& debug_env();
// The message for the first bad CBX_DEBUG_* value ("" when all are fine), e.g.
// "environment variable CBX_DEBUG_FORCE_ISA=avx9 is not one of generic, avx2, avx512 (a debugging switch; unset it)".
const std::string& debug_env_error();
// Throws cbx::Error(debug_env_error()) when it is not empty.
void check_debug_env();

// Not ours: the KAKASI library reads its dictionary path from KANWADICTPATH, then KANWADICT
// (text/kakasi.cpp checks that file before the library opens it). The first one set and
// non-empty, else "". Read at every call (cheap; the kakasi loader calls it once).
std::string kakasi_dictionary_env();

}  // namespace cbx
