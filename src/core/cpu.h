// Instruction-set detection, done once. CBX_FORCE_ISA=generic|avx2|avx512 forces a
// path (at most what the CPU has), so every kernel can be exercised on one machine.
#pragma once

namespace cbx {

enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

Isa detected_isa();  // best the CPU (and OS) supports
// detected_isa(), or CBX_FORCE_ISA when set. A forced ISA the CPU lacks is clamped
// to detected_isa() with a warning on stderr.
Isa active_isa();
// True when CBX_FORCE_ISA asks for more than the CPU has (tests skip then).
bool forced_isa_unavailable();
const char* isa_name(Isa isa);
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_bf16();

}  // namespace cbx
