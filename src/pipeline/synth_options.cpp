#include "pipeline/synth_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/cpu.h"
#include "core/debug_env.h"
#include "pipeline/mtl_pipeline.h"
#include "pipeline/turbo_pipeline.h"

namespace cbx {

namespace {

// The shortest decimal that reads back as v; whole numbers below 1e15 without an exponent.
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string param_message(const ParamSpec& p, const std::string& value_text) {
  std::string msg = std::string(p.name) + " (" + p.flag + ") must be in " + p.range();
  if (p.note) msg += std::string(" (") + p.note + ")";
  return msg + ", got " + value_text;
}

[[noreturn]] void throw_param(const ParamSpec& p, const std::string& value_text) {
  throw InvalidArgumentError(param_message(p, value_text));
}

std::string lower_ascii(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

[[noreturn]] void throw_parse(const std::string& flag, const std::string& what, const std::string& text) {
  throw InvalidArgumentError(flag + " must be " + what + ", got '" + text + "'");
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

ParamSpec ParamSpec::limited(double model_hi, const char* why) const {
  ParamSpec s = *this;
  if (model_hi < s.hi) {
    s.hi = model_hi;
    s.hi_open = false;
    s.note = why;
  }
  return s;
}

bool ParamSpec::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return !integer || v == std::floor(v);
}

std::string ParamSpec::range() const {
  return std::string(lo_open ? "(" : "[") + format_double(lo) + ", " + format_double(hi) + (hi_open ? ")" : "]");
}

std::string param_error(const ParamSpec& p, double value) { return param_message(p, format_double(value)); }

void check_param(const ParamSpec& p, double value) {
  // Every non-integer parameter is stored as a float: 1e-50 must not become a temperature of 0.
  if (!p.contains(value) || (!p.integer && !p.contains(double(float(value))))) throw_param(p, format_double(value));
}

namespace {

void check_int(const ParamSpec& p, int64_t value) {
  if (!p.contains(double(value))) throw_param(p, std::to_string(value));
}

}  // namespace

void validate(const UserSynthOptions& o) {
  if (o.temperature) check_param(param::kTemperature, *o.temperature);
  if (o.top_p) check_param(param::kTopP, *o.top_p);
  if (o.repetition_penalty) check_param(param::kRepetitionPenalty, *o.repetition_penalty);
  if (o.top_k) check_int(param::kTopK, *o.top_k);
  if (o.min_p) check_param(param::kMinP, *o.min_p);
  if (o.cfg_weight) check_param(param::kCfgWeight, *o.cfg_weight);
  if (o.exaggeration) check_param(param::kExaggeration, *o.exaggeration);
  if (o.max_chunk_tokens) check_int(param::kMaxChunkTokens, *o.max_chunk_tokens);
}

void validate(const UserLoadOptions& o) {
  if (o.n_threads) check_int(param::kThreads, *o.n_threads);
  if (o.max_new_tokens) check_int(param::kMaxNewTokens, *o.max_new_tokens);
  if (o.kv_type && *o.kv_type != DType::F16 && *o.kv_type != DType::F32)
    throw InvalidArgumentError(std::string("kv_type (--kv-type) must be f16 or f32, got ") + dtype_name(*o.kv_type));
  if (o.gemm_precision && *o.gemm_precision != GemmPrecision::Auto && *o.gemm_precision != GemmPrecision::F32 &&
      *o.gemm_precision != GemmPrecision::BF16)
    throw InvalidArgumentError("gemm_precision (--gemm-precision) must be auto, f32 or bf16, got " +
                               std::to_string(int(*o.gemm_precision)));
  if (o.cfm_precision && *o.cfm_precision != GemmPrecision::Auto && *o.cfm_precision != GemmPrecision::F32 &&
      *o.cfm_precision != GemmPrecision::BF16 && *o.cfm_precision != GemmPrecision::Int8)
    throw InvalidArgumentError("cfm_precision (--cfm-precision) must be auto, f32, bf16 or int8, got " +
                               std::to_string(int(*o.cfm_precision)));
  if (!debug_env_error().empty()) throw InvalidArgumentError(debug_env_error());
}

TurboSynthParams to_turbo_params(const UserSynthOptions& o) {
  validate(o);
  TurboSynthParams p;
  p.seed = o.seed.value_or(0);
  if (o.temperature) p.temperature = float(*o.temperature);
  if (o.top_k) p.top_k = int32_t(*o.top_k);
  if (o.top_p) p.top_p = *o.top_p;
  if (o.repetition_penalty) p.repetition_penalty = float(*o.repetition_penalty);
  if (o.max_chunk_tokens) p.max_chunk_tokens = *o.max_chunk_tokens;
  return p;
}

MtlSynthParams to_mtl_params(const UserSynthOptions& o) {
  validate(o);
  MtlSynthParams p;
  p.language = o.language.value_or("");
  p.seed = o.seed.value_or(0);
  if (o.temperature) p.temperature = float(*o.temperature);
  if (o.top_p) p.top_p = float(*o.top_p);
  if (o.repetition_penalty) p.repetition_penalty = float(*o.repetition_penalty);
  if (o.min_p) p.min_p = float(*o.min_p);
  if (o.cfg_weight) p.cfg_weight = float(*o.cfg_weight);
  if (o.exaggeration) p.exaggeration = float(*o.exaggeration);
  if (o.max_chunk_tokens) p.max_chunk_tokens = *o.max_chunk_tokens;
  return p;
}

TurboLoadParams to_turbo_load_params(const UserLoadOptions& o) {
  validate(o);
  TurboLoadParams p;
  p.n_threads = int(o.n_threads.value_or(available_cpus()));
  p.max_new_tokens = o.max_new_tokens.value_or(-1);
  p.kv_type = o.kv_type.value_or(DType::F16);
  p.repack = o.repack;
  p.gemm = o.gemm_precision.value_or(GemmPrecision::Auto);
  p.cfm_precision = o.cfm_precision.value_or(GemmPrecision::Auto);
  return p;
}

MtlLoadParams to_mtl_load_params(const UserLoadOptions& o) {
  const TurboLoadParams t = to_turbo_load_params(o);
  MtlLoadParams p;
  p.n_threads = t.n_threads;
  p.max_new_tokens = t.max_new_tokens;
  p.kv_type = t.kv_type;
  p.repack = t.repack;
  p.gemm = t.gemm;
  p.cfm_precision = t.cfm_precision;
  return p;
}

std::vector<std::string> ignored_options(Variant variant, const UserSynthOptions& o) {
  std::vector<std::string> flags;
  if (variant == Variant::Mtl) {
    if (o.top_k) flags.push_back(param::kTopK.flag);
  } else {
    if (o.min_p) flags.push_back(param::kMinP.flag);
    if (o.cfg_weight) flags.push_back(param::kCfgWeight.flag);
    if (o.exaggeration) flags.push_back(param::kExaggeration.flag);
  }
  return flags;
}

std::string resolve_language(Variant variant, const std::vector<std::string>& supported,
                             const std::optional<std::string>& language) {
  if (variant == Variant::Mtl) return check_mtl_language(supported, language.value_or(""));
  if (!language || language->empty() || lower_ascii(*language) == "en") return "en";
  throw InvalidArgumentError(std::string("language (--lang): a ") + variant_name(variant) +
                             " model speaks English only (en); '" + *language + "' needs a Multilingual model");
}

uint64_t parse_u64(const std::string& flag, const std::string& text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  if (!all_digits(text) || std::from_chars(text.data(), end, v).ec != std::errc())
    throw_parse(flag, "an integer in [0, " + std::to_string(std::numeric_limits<uint64_t>::max()) + "]", text);
  return v;
}

int64_t parse_int(const std::string& flag, const std::string& text) {
  const bool neg = !text.empty() && text[0] == '-';
  if (!all_digits(neg ? text.substr(1) : text)) throw_parse(flag, "an integer", text);
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end)
    throw_parse(flag,
                "an integer in [" + std::to_string(std::numeric_limits<int64_t>::min()) + ", " +
                    std::to_string(std::numeric_limits<int64_t>::max()) + "]",
                text);
  return v;
}

double parse_number(const std::string& flag, const std::string& text) {
  // Digits, '.', an exponent and a leading '-' only: no "inf" / "nan", no hex, no spaces.
  const bool chars_ok = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+';
  });
  double v = 0;
  const char* end = text.data() + text.size();
  if (!chars_ok) throw_parse(flag, "a finite decimal number", text);
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) throw_parse(flag, "a finite decimal number", text);
  return v;
}

DType parse_kv_type(const std::string& flag, const std::string& text) {
  if (text == "f16") return DType::F16;
  if (text == "f32") return DType::F32;
  throw_parse(flag, "f16 or f32", text);
}

GemmPrecision parse_gemm_precision_flag(const std::string& flag, const std::string& text) {
  if (text == "auto") return GemmPrecision::Auto;
  if (text == "f32") return GemmPrecision::F32;
  if (text == "bf16") return GemmPrecision::BF16;
  throw_parse(flag, "auto, f32 or bf16", text);
}

GemmPrecision parse_cfm_precision_flag(const std::string& flag, const std::string& text) {
  if (text == "int8") return GemmPrecision::Int8;
  if (text == "auto" || text == "f32" || text == "bf16") return parse_gemm_precision_flag(flag, text);
  throw_parse(flag, "auto, f32, bf16 or int8", text);
}

std::optional<std::string> thread_count_warning(int64_t n_threads, int available) {
  if (n_threads <= available) return std::nullopt;
  return "n_threads (--threads) " + std::to_string(n_threads) + " is more than the " + std::to_string(available) +
         " CPU" + (available == 1 ? "" : "s") +
         " this process may use (CPU affinity / cgroup quota): the threads will wait for each "
         "other and "
         "synthesis can be many times slower";
}

std::optional<std::string> thread_count_warning(int64_t n_threads) {
  return thread_count_warning(n_threads, available_cpus());
}

}  // namespace cbx
