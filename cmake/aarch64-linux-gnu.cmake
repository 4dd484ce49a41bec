# Cross-compiling for 64-bit Arm Linux with Debian's toolchain (g++-aarch64-linux-gnu) against
# the arm64 multiarch -dev packages (dpkg --add-architecture arm64; scripts/setup.sh --cross-aarch64).
# Test programs run under qemu-user: ctest and gtest_discover_tests go through
# CMAKE_CROSSCOMPILING_EMULATOR. Used by scripts/cross_aarch64.sh:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CBX_CROSS_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${CBX_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${CBX_CROSS_TRIPLE}-g++)

# Headers and libraries of the target: the cross toolchain's sysroot (/usr/aarch64-linux-gnu)
# plus Debian's multiarch paths (/usr/include, /usr/lib/aarch64-linux-gnu), which the cross
# compiler searches by itself. Programs (pkg-config, python) come from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/${CBX_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_LIBRARY_ARCHITECTURE ${CBX_CROSS_TRIPLE})
# find_package / find_library: the sysroot and /usr (multiarch lib dir via CMAKE_LIBRARY_ARCHITECTURE).
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config: the arm64 .pc files only (pkgconf's per-triple wrapper sets the search path).
find_program(CBX_CROSS_PKG_CONFIG ${CBX_CROSS_TRIPLE}-pkg-config)
if(CBX_CROSS_PKG_CONFIG)
  set(PKG_CONFIG_EXECUTABLE ${CBX_CROSS_PKG_CONFIG} CACHE FILEPATH "pkg-config for ${CBX_CROSS_TRIPLE}")
else()
  set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${CBX_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
endif()

# qemu-user runs the programs with Debian's multiarch arm64 runtime: /lib/ld-linux-aarch64.so.1
# and /usr/lib/aarch64-linux-gnu (libc6:arm64, libstdc++6:arm64 and the libraries above), which
# are one release. Not -L /usr/aarch64-linux-gnu: that takes the cross toolchain's ld.so while
# the libraries from the multiarch directories bring the multiarch libc.so.6, and with the two
# glibc builds mixed the test programs hung in their first pthread_create.
find_program(CBX_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(CBX_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CBX_QEMU_AARCH64})
endif()
