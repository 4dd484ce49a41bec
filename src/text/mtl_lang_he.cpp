// Hebrew: upstream add_hebrew_diacritics calls dicta_onnx (a neural diacritizer, not among
// upstream's declared dependencies). Without it upstream returns the text unchanged, and so do we.
#include "text/mtl_lang.h"

namespace cbx {

std::string he_normalize(const std::string& text) { return text; }

}  // namespace cbx
