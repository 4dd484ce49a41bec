// chatterbox languages -m MODEL.gguf: the languages a model speaks, one a line, code first
// ("fr  French"), sorted by code. Multilingual: the GGUF's `languages` (upstream
// SUPPORTED_LANGUAGES); Turbo / Nano: en.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"
#include "text/kakasi.h"
#include "text/mtl_tokenizer.h"

namespace {

const char* kUsage =
    "usage: chatterbox languages -m MODEL.gguf\n"
    "  Prints the languages MODEL speaks, one a line: code, two spaces, name (e.g. \"fr  French\").\n"
    "  The code is what `chatterbox say --lang` takes.\n";

int run(int argc, char** argv) {
  std::string model;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if ((a == "-m" || a == "--model") && i + 1 < argc) {
      model = argv[++i];
    } else if (a[0] != '-' && model.empty()) {
      model = a;
    } else {
      cbx::fail("languages: unexpected argument '%s'\n%s", a.c_str(), kUsage);
    }
  }
  CBX_CHECK(!model.empty(), "languages: -m MODEL.gguf is required\n%s", kUsage);
  const cbx::ModelConfig cfg = cbx::read_config(*cbx::GgufFile::open(model));
  std::vector<std::string> codes = cfg.languages;
  if (codes.empty() && cfg.variant != cbx::Variant::Mtl) codes = {"en"};
  CBX_CHECK(!codes.empty(), "languages: %s lists no languages (GGUF key languages)", model.c_str());
  std::sort(codes.begin(), codes.end());
  for (const std::string& c : codes) {
    const char* name = cbx::language_name(c);
    std::printf("%s  %s%s\n", c.c_str(), name ? name : "(unknown)",
                c == "ja" ? (std::string(" (kanji readings: ") + cbx::ja_frontend_name() + ")").c_str() : "");
  }
  return 0;
}

cbx::cli::RegisterCommand reg("languages", "the languages a model speaks (codes for say --lang)", run);

}  // namespace
