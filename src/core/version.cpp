#include "core/version.h"

#include "cbx_version_gen.h"  // generated in the build tree by cmake/git_version.cmake

namespace cbx {

const char* version_number() { return CBX_VERSION_NUMBER; }
const char* git_hash() { return CBX_GIT_HASH; }
const char* version_line() { return CBX_VERSION_NUMBER " (git " CBX_GIT_HASH ") " CBX_COMPILER " " CBX_BUILD_TYPE; }

}  // namespace cbx
