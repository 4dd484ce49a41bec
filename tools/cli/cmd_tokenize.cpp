// chatterbox tokenize -m MODEL.gguf [--lang CODE] [--raw] [--prepared] [--] TEXT: the text front-end
// alone, for comparing with upstream: Multilingual, MTLTokenizer.encode(punc_norm(TEXT), CODE)
// (docs/multilingual.md); Turbo / Nano, the GPT-2 tokenizer(punc_norm(TEXT)).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "core/gguf.h"
#include "models/model_config.h"
#include "pipeline/synth_options.h"
#include "text/gpt2_tokenizer.h"
#include "text/mtl_tokenizer.h"
#include "text/punc_norm.h"

namespace {

const char* kUsage =
    "usage: chatterbox tokenize -m MODEL.gguf [--lang CODE] [--raw] [--prepared] [--] TEXT\n"
    "  Prints the text token ids of MODEL for TEXT on one line, space-separated, without SOT/EOT:\n"
    "    Multilingual:  upstream's MTLTokenizer.encode(punc_norm(TEXT), CODE); --lang is required\n"
    "    Turbo / Nano:  upstream's GPT-2 tokenizer(punc_norm(TEXT)) (Turbo's punc_norm; the 19 tags such as\n"
    "                   [laugh] are single ids; no truncation); --lang may be omitted or en\n"
    "  --raw       skip punc_norm (upstream's tokenizer alone)\n"
    "  --prepared  first print the string handed to the BPE (Multilingual: lower-cased, NFKD, language\n"
    "              step, [CODE], [SPACE]; Turbo / Nano: the text after punc_norm)\n";

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
  const cbx::ModelConfig cfg = cbx::read_config(*f);
  auto print_ids = [](const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  };
  if (cfg.variant != cbx::Variant::Mtl) {
    std::optional<std::string> l;
    if (!lang.empty()) l = lang;
    cbx::resolve_language(cfg.variant, cfg.languages, l);  // "en" (any case) or absent, else an error
    const cbx::Gpt2Tokenizer tok = cbx::Gpt2Tokenizer::from_gguf(*f);
    const std::string input = raw ? text : cbx::punc_norm(text, cbx::PuncNormFlavor::Turbo);
    if (prepared) std::printf("%s\n", input.c_str());
    print_ids(tok.encode(input));
    return 0;
  }
  const cbx::MtlTokenizer tok = cbx::MtlTokenizer::from_gguf(*f);
  if (lang.empty()) {
    std::string list;
    for (const std::string& c : tok.languages()) list += (list.empty() ? "" : ", ") + c;
    cbx::fail("tokenize: --lang is required; supported languages: %s", list.c_str());
  }
  const std::string input = raw ? text : cbx::punc_norm(text, cbx::PuncNormFlavor::Multilingual);
  if (prepared) std::printf("%s\n", tok.prepare(input, lang).c_str());
  print_ids(tok.encode(input, lang));
  return 0;
}

cbx::cli::RegisterCommand reg("tokenize", "text -> token ids (the text front-end alone; Turbo, Nano, Multilingual)",
                              run);

}  // namespace
