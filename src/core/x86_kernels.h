// CBX_X86_KERNELS: 1 when the AVX2 / AVX-512 / AMX kernel files (src/kernels/*_avx2.cpp,
// *_avx512.cpp) are compiled in, which is on x86-64 unless CMake's -DCBX_X86_KERNELS=OFF
// defines it 0 (CMakeLists.txt leaves those files out then). Without them detected_isa()
// (core/cpu.h) is Isa::Generic on every CPU and only the generic kernels run.
#pragma once

#ifndef CBX_X86_KERNELS
#if defined(__x86_64__)
#define CBX_X86_KERNELS 1
#else
#define CBX_X86_KERNELS 0
#endif
#endif
