// The build's version: the project version (CMakeLists.txt project(VERSION)), the git commit it
// was built from ("unknown" outside a git checkout, "-dirty" with local changes), the compiler
// and the build type. Shown by `chatterbox --version` / `system-info` and cbx_version().
#pragma once

namespace cbx {

const char* version_number();  // "0.1.0"
const char* git_hash();        // "6f62432", "6f62432-dirty" or "unknown"
// "0.1.0 (git 6f62432) GNU 13.2.0 Release"
const char* version_line();

}  // namespace cbx
