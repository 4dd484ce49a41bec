// chatterbox quantize IN.gguf OUT.gguf --type q8_0|q4_k|q4_0|f16 [--s3gen-type T] [-q]
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "convert/quant_policy.h"
#include "convert/quantize.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: chatterbox quantize IN.gguf OUT.gguf --type q8_0|q4_k|q4_0|f16 [--s3gen-type T] [-q]\n"
               "Re-encodes an F32 (or F16) chatterbox GGUF with the dtype policy of `convert`.\n"
               "  -t, --type T      dtype of the T3 matrices: q8_0, q4_k, q4_0 or f16; S3Gen stays f16\n"
               "                    (see docs/quantization.md)\n"
               "  --s3gen-type T    dtype of the S3Gen matrices instead (q8_0 / q4_0: smaller, less precise)\n"
               "  -q, --quiet       no progress line (shown on stderr when it is a terminal; CBX_PROGRESS=1\n"
               "                    forces it on)\n");
}

int cmd_quantize(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string type, s3gen_type;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--type" || a == "-t") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "chatterbox quantize: error: %s needs a value\n", a.c_str());
        usage(stderr);
        return 2;
      }
      type = argv[++i];
    } else if (a == "--s3gen-type") {
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      s3gen_type = argv[++i];
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "chatterbox quantize: error: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2 || type.empty()) {
    usage(stderr);
    return 2;
  }
  cbx::QuantTypes types(cbx::parse_target_type(type));
  if (!s3gen_type.empty()) types.s3gen = cbx::parse_target_type(s3gen_type, "--s3gen-type");
  cbx::cli::ProgressLine line("quantize", cbx::cli::progress_wanted(quiet));
  cbx::ProgressFn progress;
  if (line.on()) progress = [&](const cbx::ProgressEvent& e) { line.update(e.stage, e.done, e.total, e.item); };
  cbx::QuantizeStats st = cbx::quantize_gguf(pos[0], pos[1], types, progress);
  line.finish();
  std::printf("quantized %zu tensors: %.1f MB -> %.1f MB in %.1f s -> %s\n", st.n_tensors, st.bytes_in / 1e6,
              st.bytes_out / 1e6, st.seconds, pos[1].c_str());
  for (const auto& [dt, bytes] : st.bytes_per_dtype)
    std::printf("  %-5s %10.1f MB\n", cbx::dtype_name(dt), bytes / 1e6);
  return 0;
}

cbx::cli::RegisterCommand reg("quantize", "re-encode a chatterbox GGUF as f16 / q8_0 / q4_0", cmd_quantize);

}  // namespace
