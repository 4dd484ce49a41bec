// chatterbox system-info: what this CPU offers and which kernels will run.
#include <cstdio>
#include <cstring>
#include <thread>

#include "command.h"
#include "core/cpu.h"
#include "core/version.h"
#include "ops/matmul.h"
#include "text/kakasi.h"

namespace {
int cmd_system_info(int argc, char** argv) {
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf(
        "usage: chatterbox system-info\nPrints the version line, then the detected and active kernel ISA and the bf16 "
        "GEMM in use\n(amx, vdpbf16ps or none) and the int8 one (vpdpbusd or generic: the default CFM precision "
        "is\nint8 only with vpdpbusd) ( CBX_DEBUG_NO_AMX, CBX_DEBUG_VDPBF16 and CBX_DEBUG_FORCE_ISA change it)\nand "
        "the cache level the decode's weight streams prefetch into (l1 or l2;\nCBX_DEBUG_STREAM_PREFETCH changes it; "
        "core/debug_env.h).\navailable_cpus: the CPUs this process may use (CPU affinity, cgroup quota), the\ndefault "
        "thread count.\n");
    return 0;
  }
  std::printf("chatterbox.cpp %s\n", cbx::version_line());
  std::printf(
      "detected_isa=%s active_isa=%s avx512_vnni=%d avx512_bf16=%d bf16_gemm=%s int8_gemm=%s hw_threads=%u "
      "available_cpus=%d stream_prefetch=%s\n",
      cbx::isa_name(cbx::detected_isa()), cbx::isa_name(cbx::active_isa()), cbx::cpu_has_avx512_vnni(),
      cbx::cpu_has_avx512_bf16(), cbx::gemm_bf16_kind(), cbx::gemm_int8_kind(), std::thread::hardware_concurrency(),
      cbx::available_cpus(), cbx::stream_prefetch_level() == cbx::PrefetchLevel::L1 ? "l1" : "l2");
  std::printf("ja_frontend=%s\n", cbx::ja_frontend_description().c_str());
  return 0;
}
cbx::cli::RegisterCommand reg("system-info", "print CPU features and the kernel ISA in use", cmd_system_info);
}  // namespace
