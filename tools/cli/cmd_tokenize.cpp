// chatterbox tokenize -m MODEL.gguf --lang CODE [--raw] [--prepared] [--] TEXT: the Multilingual
// text front-end alone, for comparing with upstream's MTLTokenizer (docs/multilingual.md).
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "text/mtl_tokenizer.h"
#include "text/punc_norm.h"

namespace {

const char* kUsage =
    "usage: chatterbox tokenize -m MODEL.gguf --lang CODE [--raw] [--prepared] [--] TEXT\n"
    "  Prints the text token ids of a Multilingual model for TEXT on one line, space-separated: upstream's\n"
    "  MTLTokenizer.encode(punc_norm(TEXT), CODE), without SOT/EOT.\n"
    "  --raw       skip punc_norm (upstream's tokenizer alone)\n"
    "  --prepared  first print the string handed to the BPE (lower-cased, NFKD, language step, [CODE], [SPACE])\n";

int run(int argc, char** argv) {
  std::string model, lang, text;
  bool raw = false, prepared = false, have_text = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto take = [&](std::string& dst) {
      CBX_CHECK(i + 1 < argc, "tokenize: %s needs a value\n%s", a.c_str(), kUsage);
      dst = argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      take(model);
    } else if (a == "--lang" || a == "-l") {
      take(lang);
    } else if (a == "--raw") {
      raw = true;
    } else if (a == "--prepared") {
      prepared = true;
    } else if (a == "--" || a.empty() || a[0] != '-') {
      if (a == "--") CBX_CHECK(++i < argc, "tokenize: TEXT expected after --\n%s", kUsage);
      CBX_CHECK(!have_text && i + 1 == argc, "tokenize: give TEXT once, as the last argument (quote it)\n%s", kUsage);
      text = argv[i];
      have_text = true;
    } else {
      cbx::fail("tokenize: unexpected argument '%s'\n%s", a.c_str(), kUsage);
    }
  }
  CBX_CHECK(!model.empty(), "tokenize: -m MODEL.gguf is required\n%s", kUsage);
  CBX_CHECK(have_text, "tokenize: TEXT is required\n%s", kUsage);
  const auto f = cbx::GgufFile::open(model);
  const cbx::MtlTokenizer tok = cbx::MtlTokenizer::from_gguf(*f);
  if (lang.empty()) {
    std::string list;
    for (const std::string& c : tok.languages()) list += (list.empty() ? "" : ", ") + c;
    cbx::fail("tokenize: --lang is required; supported languages: %s", list.c_str());
  }
  const std::string input = raw ? text : cbx::punc_norm(text, cbx::PuncNormFlavor::Multilingual);
  if (prepared) std::printf("%s\n", tok.prepare(input, lang).c_str());
  const std::vector<int32_t> ids = tok.encode(input, lang);
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

cbx::cli::RegisterCommand reg("tokenize", "Multilingual text -> token ids (the text front-end alone)", run);

}  // namespace
