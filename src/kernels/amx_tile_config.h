// The one AMX tile configuration every AMX kernel here uses: tiles 0-7 as 16 rows x 64
// bytes, palette 1, loaded once per thread. One shared flag (an inline function's
// thread_local), so the GEMM and the attention kernels may run on one thread in any order.
// Include only from a file compiled for AVX-512 (the function carries target("amx-tile")).
#pragma once
#include <cstdint>

namespace cbx {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// GCC 12's _tile_loadconfig declares an 8-byte memory operand, so the compiler may drop the
// stores of rows / colsb before it (it did in the attention kernel); this asm names the whole
// 64-byte config.
__attribute__((target("amx-tile"))) inline void configure_amx_tiles() {
  thread_local bool done = false;
  if (done) return;
  AmxTileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  done = true;
}

}  // namespace cbx
