// chatterbox convert DIR -o model.gguf [--type f32|f16|q8_0|q4_k|q4_0] [--s3gen-type T] [--t3 FILE] [-q]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "command.h"
#include "convert/convert.h"
#include "convert/quant_policy.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: chatterbox convert DIR -o MODEL.gguf [--type f32|f16|q8_0|q4_k|q4_0] [--s3gen-type T]\n"
               "       [--t3 FILE] [-q]\n"
               "Converts an upstream Chatterbox checkpoint directory (Turbo, Nano or Multilingual,\n"
               "as downloaded from Hugging Face) into one self-contained GGUF file.\n"
               "  -o, --out F       the GGUF to write\n"
               "  -t, --type T      dtype of the T3 matrices (default f32); S3Gen stays f16 (f32 with\n"
               "                    --type f32); see docs/quantization.md\n"
               "  --s3gen-type T    dtype of the S3Gen matrices instead (q8_0 / q4_0: smaller, less precise)\n"
               "  --t3 FILE         T3 checkpoint to use (e.g. t3_mtl23ls_v3.safetensors; default: detected)\n"
               "  -q, --quiet       no progress line (shown on stderr when it is a terminal; CBX_PROGRESS=1\n"
               "                    forces it on)\n");
}

int cmd_convert(int argc, char** argv) {
  cbx::ConvertOptions opt;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "chatterbox convert: error: %s needs a value\n", a.c_str());
        usage(stderr);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-o" || a == "--out") {
      opt.out = value();
    } else if (a == "--type" || a == "-t") {
      opt.type = cbx::parse_target_type(value());
    } else if (a == "--s3gen-type") {
      opt.s3gen_type = cbx::parse_target_type(value(), "--s3gen-type");
    } else if (a == "--t3") {
      opt.t3_file = value();
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "chatterbox convert: error: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    } else if (opt.dir.empty()) {
      opt.dir = a;
    } else {
      std::fprintf(stderr, "chatterbox convert: error: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (opt.dir.empty() || opt.out.empty()) {
    usage(stderr);
    return 2;
  }
  cbx::cli::ProgressLine line("convert", cbx::cli::progress_wanted(quiet));
  if (line.on()) opt.on_progress = [&](const cbx::ProgressEvent& e) { line.update(e.stage, e.done, e.total, e.item); };
  opt.on_warning = [&](const std::string& w) {
    line.finish();
    cbx::cli::warn("convert", "%s", w.c_str());
  };
  cbx::ConvertStats st = cbx::convert_checkpoint(opt);
  line.finish();
  std::printf("converted Chatterbox %s: %zu tensors, %.1f MB of tensor data in %.1f s -> %s\n",
              cbx::variant_name(st.variant), st.n_tensors, st.tensor_bytes / 1e6, st.seconds, opt.out.c_str());
  for (const auto& [dt, bytes] : st.bytes_per_dtype)
    std::printf("  %-5s %5zu tensors %10.1f MB\n", cbx::dtype_name(dt), st.tensors_per_dtype[dt], bytes / 1e6);
  return 0;
}

cbx::cli::RegisterCommand reg("convert", "convert an upstream checkpoint directory to one GGUF", cmd_convert);

}  // namespace
