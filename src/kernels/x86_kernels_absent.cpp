// Builds without the x86 kernels (CBX_X86_KERNELS=0, core/x86_kernels.h: aarch64, or CMake
// -DCBX_X86_KERNELS=OFF): the AVX-512 entry points that ops/ references unconditionally give
// their documented "none" answer. They are only called when the AVX-512 ISA is active, which
// such a build never selects (detected_isa() is Isa::Generic).
#include "core/x86_kernels.h"

#if !CBX_X86_KERNELS

#include "kernels/attention_amx.h"
#include "kernels/matmul.h"
#include "kernels/matmul_int8.h"

namespace cbx {

const Bf16Gemm* matmul_bf16_gemm_avx512(const MatmulKernels&) { return nullptr; }
const GemmKernel* matmul_int8_gemm_avx512() { return nullptr; }

const AttentionAmxKernels* attention_amx_kernels() { return nullptr; }
const AttentionAmxKernels* attention_vdpbf16_kernels() { return nullptr; }

}  // namespace cbx

#endif  // !CBX_X86_KERNELS
