#include "text/mtl_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "text/hf_tokenizer.h"
#include "text/mtl_lang.h"
#include "text/unicode_text.h"
#include "text/utf8.h"

namespace cbx {

namespace {

struct LangName {
  const char* code;
  const char* name;
};
// mtl_tts.py SUPPORTED_LANGUAGES, sorted by code.
constexpr LangName kLanguages[] = {
    {"ar", "Arabic"},    {"da", "Danish"},   {"de", "German"},     {"el", "Greek"},   {"en", "English"},
    {"es", "Spanish"},   {"fi", "Finnish"},  {"fr", "French"},     {"he", "Hebrew"},  {"hi", "Hindi"},
    {"it", "Italian"},   {"ja", "Japanese"}, {"ko", "Korean"},     {"ms", "Malay"},   {"nl", "Dutch"},
    {"no", "Norwegian"}, {"pl", "Polish"},   {"pt", "Portuguese"}, {"ru", "Russian"}, {"sv", "Swedish"},
    {"sw", "Swahili"},   {"tr", "Turkish"},  {"zh", "Chinese"},
};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  CBX_CHECK(f.good(), "%s: cannot open '%s'", what, path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  CBX_CHECK(!f.bad(), "%s: cannot read '%s'", what, path.c_str());
  return ss.str();
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const char* language_name(const std::string& code) {
  for (const LangName& l : kLanguages)
    if (code == l.code) return l.name;
  return nullptr;
}

const std::vector<std::string>& mtl_language_codes() {
  static const std::vector<std::string> codes = [] {
    std::vector<std::string> v;
    for (const LangName& l : kLanguages) v.emplace_back(l.code);
    return v;
  }();
  return codes;
}

struct MtlTokenizer::Impl {
  HfTokenizer hf;
  CangjieTable cangjie;
  std::vector<std::string> langs;  // supported codes whose "[xx]" tag is a token
  std::string langs_list;          // "ar, da, ..." for errors
};

MtlTokenizer::MtlTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MtlTokenizer::~MtlTokenizer() = default;
MtlTokenizer::MtlTokenizer(MtlTokenizer&&) noexcept = default;
MtlTokenizer& MtlTokenizer::operator=(MtlTokenizer&&) noexcept = default;

MtlTokenizer MtlTokenizer::from_json(const std::string& hf_json, const std::vector<std::string>& cangjie) {
  return from_json_named(hf_json, cangjie, "tokenizer JSON", "Cangjie table");
}

MtlTokenizer MtlTokenizer::from_json_named(const std::string& hf_json, const std::vector<std::string>& cangjie,
                                           const std::string& json_what, const std::string& cj_what) {
  auto m =
      std::make_unique<Impl>(Impl{HfTokenizer::from_json(hf_json, json_what), CangjieTable(cangjie, cj_what), {}, {}});
  // Upstream asserts that [START] and [STOP] are in the vocab (T3's SOT/EOT).
  CBX_CHECK(m->hf.token_to_id("[START]") >= 0 && m->hf.token_to_id("[STOP]") >= 0,
            "%s: the vocab has no [START] / [STOP] token", json_what.c_str());
  for (const LangName& l : kLanguages) {
    if (m->hf.token_to_id(std::string("[") + l.code + "]") < 0) continue;
    if (!m->langs.empty()) m->langs_list += ", ";
    m->langs_list += l.code;
    m->langs.emplace_back(l.code);
  }
  CBX_CHECK(!m->langs.empty(), "%s: no language tag ([en], [fr], ...) is a token: not a Multilingual tokenizer",
            json_what.c_str());
  return MtlTokenizer(std::move(m));
}

MtlTokenizer MtlTokenizer::from_files(const std::string& json_path, const std::string& cangjie_path) {
  const std::string text = read_file(json_path, "MTL tokenizer");
  std::vector<std::string> entries;
  if (!cangjie_path.empty()) {
    nlohmann::json cj;
    try {
      cj = nlohmann::json::parse(read_file(cangjie_path, "Cangjie table"));
    } catch (const nlohmann::json::exception& e) {
      fail("%s: not valid JSON (%s)", cangjie_path.c_str(), e.what());
    }
    CBX_CHECK(cj.is_array(), "%s: expected a JSON list of \"char\\tcode\" strings", cangjie_path.c_str());
    entries.reserve(cj.size());
    for (size_t i = 0; i < cj.size(); ++i) {
      CBX_CHECK(cj[i].is_string(), "%s: entry %zu is not a string", cangjie_path.c_str(), i);
      entries.push_back(cj[i].get<std::string>());
    }
  }
  return from_json_named(text, entries, json_path, cangjie_path);
}

MtlTokenizer MtlTokenizer::from_gguf(const GgufFile& f) {
  const GgufValue* j = f.find("chatterbox.tokenizer.hf_json");
  CBX_CHECK(j != nullptr, "%s: no chatterbox.tokenizer.hf_json (not a Multilingual model?)", f.path().c_str());
  std::vector<std::string> entries;
  if (const GgufValue* cj = f.find("chatterbox.tokenizer.cangjie")) entries = cj->as_string_array();
  return from_json_named(j->as_string(), entries, f.path() + ": chatterbox.tokenizer.hf_json",
                         f.path() + ": chatterbox.tokenizer.cangjie");
}

std::vector<std::string> MtlTokenizer::languages() const { return impl_->langs; }

std::string MtlTokenizer::prepare(const std::string& text, const std::string& lang_in) const {
  const std::string lang = ascii_lower(lang_in);
  CBX_CHECK(std::find(impl_->langs.begin(), impl_->langs.end(), lang) != impl_->langs.end(),
            "text: unsupported language '%s'; supported languages: %s", lang_in.c_str(), impl_->langs_list.c_str());
  utf8_check(text);
  std::string t = unicode_normalize(py_lower(text), UnicodeForm::NFKD);
  if (lang == "zh")
    t = zh_cangjie(zh_segment(t), impl_->cangjie);
  else if (lang == "ja")
    t = ja_normalize(t);
  else if (lang == "he")
    t = he_normalize(t);
  else if (lang == "ko")
    t = ko_normalize(t);
  else if (lang == "ru")
    t = ru_normalize(t);
  std::string out = "[" + lang + "]";
  out.reserve(t.size() + t.size() / 2 + 8);
  for (char c : t) {
    if (c == ' ')
      out += "[SPACE]";
    else
      out.push_back(c);
  }
  return out;
}

std::vector<int32_t> MtlTokenizer::encode_prepared(const std::string& s) const { return impl_->hf.encode(s); }

std::vector<int32_t> MtlTokenizer::encode(const std::string& text, const std::string& lang) const {
  return impl_->hf.encode(prepare(text, lang));
}

size_t MtlTokenizer::vocab_size() const { return impl_->hf.vocab_size(); }
int32_t MtlTokenizer::token_to_id(const std::string& tok) const { return impl_->hf.token_to_id(tok); }
bool MtlTokenizer::has_cangjie() const { return !impl_->cangjie.empty(); }

}  // namespace cbx
