#include "text/kakasi.h"

#include <dlfcn.h>
#include <unicode/ucnv.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/debug_env.h"
#include "core/error.h"
#include "core/log.h"
#include "text/utf8.h"

namespace cbx {
namespace {

// libkakasi.h (KAKASI 2.3): the three entry points we use.
using GetoptFn = int (*)(int, char**);
using DoFn = char* (*)(char*);
using FreeFn = int (*)(char*);

constexpr const char* kLibName = "libkakasi.so.2";
constexpr const char* kDefaultDict = "/usr/share/kakasi/kanwadict";  // kakasi-dic, compiled into the library

struct Kakasi {
  bool ok = false;
  std::string why;   // when !ok
  std::string dict;  // the kanji dictionary in use
  DoFn do_fn = nullptr;
  FreeFn free_fn = nullptr;
  UConverter* euc = nullptr;  // EUC-JP <-> UTF-16, KAKASI's encoding
};

std::mutex g_mutex;  // guards g_kakasi's use: KAKASI's state is global
std::once_flag g_once;
Kakasi g_kakasi;
std::once_flag g_warn_once;

// The dictionary KAKASI will open: the library reads KANWADICTPATH, then KANWADICT, then its
// compiled-in default. It exits the process when the file cannot be opened, so we check first.
std::string dictionary_path() {
  const std::string env = kakasi_dictionary_env();
  return env.empty() ? kDefaultDict : env;
}

void load(Kakasi& k) {
  k.dict = dictionary_path();
  if (access(k.dict.c_str(), R_OK) != 0) {
    k.why = "dictionary " + k.dict + ": " + std::strerror(errno) + " (install kakasi-dic)";
    return;
  }
  void* h = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    k.why = std::string(kLibName) + ": " + (e ? e : "cannot be loaded") + " (install libkakasi2)";
    return;
  }
  auto getopt = reinterpret_cast<GetoptFn>(dlsym(h, "kakasi_getopt_argv"));
  k.do_fn = reinterpret_cast<DoFn>(dlsym(h, "kakasi_do"));
  k.free_fn = reinterpret_cast<FreeFn>(dlsym(h, "kakasi_free"));
  if (!getopt || !k.do_fn || !k.free_fn) {
    k.why = std::string(kLibName) + " lacks kakasi_getopt_argv / kakasi_do / kakasi_free";
    return;
  }
  UErrorCode st = U_ZERO_ERROR;
  k.euc = ucnv_open("EUC-JP", &st);
  if (U_FAILURE(st) || !k.euc) {
    k.why = std::string("ICU has no EUC-JP converter: ") + u_errorName(st);
    return;
  }
  ucnv_setFromUCallBack(k.euc, UCNV_FROM_U_CALLBACK_STOP, nullptr, nullptr, nullptr, &st);
  ucnv_setToUCallBack(k.euc, UCNV_TO_U_CALLBACK_STOP, nullptr, nullptr, nullptr, &st);
  // -JH: kanji -> hiragana; kana, ASCII and symbols are left alone. -f: furigana mode, each
  // word read from the dictionary is written as "word[reading]", which gives the segments.
  // Input and output are EUC-JP (the library's default).
  char a0[] = "kakasi", a1[] = "-JH", a2[] = "-f";
  char* argv[] = {a0, a1, a2, nullptr};
  if (getopt(3, argv) != 0) {
    k.why = std::string(kLibName) + ": kakasi_getopt_argv(-JH -f) failed";
    return;
  }
  k.ok = true;
}

const Kakasi& kakasi() {
  std::call_once(g_once, [] { load(g_kakasi); });
  return g_kakasi;
}

bool is_kana(char32_t c) {
  return (c >= 0x3041 && c <= 0x309F) || (c >= 0x30A0 && c <= 0x30FF && c != 0x30F5 && c != 0x30F6);
}
// Characters KAKASI reads through its kanji dictionary: ideographs, the marks 々 and 〆, and
// the small ヵ ヶ counters (〇 it leaves alone).
bool is_kanji_like(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0xF900 && c <= 0xFAFF) || c == 0x3005 ||
         c == 0x3006 || c == 0x30F5 || c == 0x30F6;
}

// The EUC-JP bytes of c when it is a two-byte JIS X 0208 character (the only kind KAKASI's
// dictionary holds and reads reliably), else empty.
std::string euc_jis0208(UConverter* cnv, char32_t c) {
  UChar u[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(u, n, c);
  char buf[8];
  UErrorCode st = U_ZERO_ERROR;
  ucnv_resetFromUnicode(cnv);
  const int32_t len = ucnv_fromUChars(cnv, buf, sizeof buf, u, n, &st);
  if (U_FAILURE(st) || len != 2 || (unsigned char)buf[0] < 0xA1 || (unsigned char)buf[1] < 0xA1) return {};
  return std::string(buf, 2);
}

std::string euc_to_utf8(UConverter* cnv, const char* s, size_t n) {
  std::vector<UChar> u(n + 1);
  UErrorCode st = U_ZERO_ERROR;
  ucnv_resetToUnicode(cnv);
  const int32_t len = ucnv_toUChars(cnv, u.data(), int32_t(u.size()), s, int32_t(n), &st);
  CBX_CHECK(U_SUCCESS(st), "ja: KAKASI returned bytes that are not EUC-JP (%s)", u_errorName(st));
  std::string out;
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U16_NEXT(u.data(), i, len, c);
    utf8_append(out, char32_t(c));
  }
  return out;
}

// Splits KAKASI's furigana output for one run ("お母さん[かあさん]です") into segments. The run
// held only kana and kanji, so '[' and ']' are KAKASI's. The text before a '[' is the part
// KAKASI passed through, then the word it read, which starts at its first kanji-like character.
void parse_furigana(const std::string& s, std::vector<JaSegment>& out) {
  std::string pending;
  auto flush_plain = [&](std::string t) {
    if (t.empty()) return;
    if (!out.empty() && !out.back().converted)
      out.back().orig += t;
    else
      out.push_back({std::move(t), "", false});
  };
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '[') {
      const size_t close = s.find(']', i + 1);
      CBX_CHECK(close != std::string::npos, "ja: unbalanced KAKASI furigana output '%s'", s.c_str());
      size_t start = pending.size();
      for (size_t j = 0; j < pending.size();) {
        char32_t c = 0;
        const size_t n = utf8_next(pending, j, &c);
        CBX_ASSERT(n > 0);
        if (is_kanji_like(c)) {
          start = j;
          break;
        }
        j += n;
      }
      if (start == pending.size()) start = 0;  // no kanji found: the whole piece was read
      flush_plain(pending.substr(0, start));
      out.push_back({pending.substr(start), s.substr(i + 1, close - i - 1), true});
      pending.clear();
      i = close + 1;
    } else {
      pending.push_back(s[i++]);
    }
  }
  flush_plain(pending);
}

void warn_unavailable(const Kakasi& k) {
  std::call_once(g_warn_once, [&] {
    log(LogLevel::Warn,
        "chatterbox: warning: ja: KAKASI unavailable (%s); kanji pass through unchanged, as upstream "
        "does without pykakasi",
        k.why.c_str());
  });
}

}  // namespace

bool kakasi_available() { return kakasi().ok; }

const char* ja_frontend_name() { return kakasi().ok ? "KAKASI" : "pass-through"; }

std::string ja_frontend_description() {
  const Kakasi& k = kakasi();
  if (k.ok) return std::string("KAKASI (") + kLibName + ", dictionary " + k.dict + ")";
  return "pass-through (KAKASI unavailable: " + k.why + ")";
}

std::vector<JaSegment> kakasi_segments(const std::string& text) {
  std::vector<JaSegment> out;
  if (text.empty()) return out;
  const Kakasi& k = kakasi();
  if (!k.ok) {
    warn_unavailable(k);
    out.push_back({text, "", false});
    return out;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string plain, run_euc, run_utf8;
  bool run_has_kanji = false;
  auto add_plain = [&](const std::string& t) {
    if (t.empty()) return;
    if (!out.empty() && !out.back().converted)
      out.back().orig += t;
    else
      out.push_back({t, "", false});
  };
  auto end_run = [&] {
    if (run_has_kanji) {
      char* r = k.do_fn(run_euc.data());
      CBX_CHECK(r, "ja: KAKASI failed on '%s'", run_utf8.c_str());
      std::unique_ptr<char, FreeFn> hold(r, k.free_fn);
      parse_furigana(euc_to_utf8(k.euc, r, std::strlen(r)), out);
    } else {
      add_plain(run_utf8);
    }
    run_euc.clear(), run_utf8.clear();
    run_has_kanji = false;
  };
  for (size_t i = 0; i < text.size();) {
    char32_t c = 0;
    const size_t n = utf8_next(text, i, &c);
    CBX_CHECK(n > 0, "ja: invalid UTF-8 at byte %zu", i);
    const std::string ch = text.substr(i, n);
    i += n;
    const bool kanji = is_kanji_like(c);
    std::string euc = (kanji || is_kana(c)) ? euc_jis0208(k.euc, c) : std::string();
    if (euc.empty()) {  // outside KAKASI's reach: pass through
      end_run();
      add_plain(ch);
      continue;
    }
    run_euc += euc, run_utf8 += ch;
    run_has_kanji |= kanji;
  }
  end_run();
  return out;
}

}  // namespace cbx
