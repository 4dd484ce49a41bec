// Russian: upstream add_russian_stress calls russian_text_stresser, removed from upstream's
// dependencies (commit c375f02). Without it upstream returns the text unchanged, and so do we.
#include "text/mtl_lang.h"

namespace cbx {

std::string ru_normalize(const std::string& text) { return text; }

}  // namespace cbx
