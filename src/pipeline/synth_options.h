// The parameters a user sets, checked once for every front end: the CLI (`chatterbox say`)
// and the C API (include/chatterbox.h) build a UserSynthOptions / UserLoadOptions (the CLI
// with the strict parse_* functions below), validate it here and convert it to the pipelines'
// TurboSynthParams / MtlSynthParams / *LoadParams. A bad value gets the same message on both:
//   "NAME (FLAG) must be in RANGE, got VALUE"
//   e.g. "temperature (--temperature) must be in (0, 10], got -1"
// NAME is the C API field, FLAG the CLI option. NaN and +-Inf are never valid.
//
// Omission (nullopt) means the model's default (GGUF sampler.* metadata, or the pipeline's
// constants); there is no in-band "default" value. Some limits depend on the model (the
// text / speech positions of T3): the pipelines check those with check_param and the model's
// bound (ParamSpec::limited), in the same format.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model_config.h"
#include "ops/matmul.h"                // GemmPrecision
#include "pipeline/pipeline_common.h"  // InvalidArgumentError

namespace cbx {

// The pipelines' own parameter structs (pipeline/turbo_pipeline.h, pipeline/mtl_pipeline.h).
struct TurboSynthParams;
struct MtlSynthParams;
struct TurboLoadParams;
struct MtlLoadParams;

// One parameter: its name, flag and allowed range [lo, hi] (an open end excludes the bound).
struct ParamSpec {
  const char* name;  // the C API field ("temperature")
  const char* flag;  // the CLI option ("--temperature")
  double lo, hi;
  bool lo_open, hi_open;
  bool integer;
  const char* note = nullptr;  // why hi is what it is, when a model set it

  // This parameter with hi lowered to a model's limit (kept when the limit is larger).
  ParamSpec limited(double model_hi, const char* why) const;
  bool contains(double v) const;  // false for NaN / Inf
  std::string range() const;      // "(0, 10]", "[1, 1024]"
};

// The parameters. top_k 0 disables top-k. Upper bounds: far beyond any useful setting, there to
// catch typos and garbage; max_chunk_tokens / max_new_tokens are further limited by the model.
namespace param {
// clang-format off
//                           name                  flag                    lo  hi      lo_open hi_open integer
constexpr ParamSpec kTemperature      {"temperature",        "--temperature",        0,  10,     true,  false, false};
constexpr ParamSpec kTopP             {"top_p",              "--top-p",              0,  1,      true,  false, false};
constexpr ParamSpec kTopK             {"top_k",              "--top-k",              0,  100000, false, false, true};
constexpr ParamSpec kRepetitionPenalty{"repetition_penalty", "--repetition-penalty", 0,  10,     true,  false, false};
constexpr ParamSpec kMinP             {"min_p",              "--min-p",              0,  1,      false, false, false};
constexpr ParamSpec kCfgWeight        {"cfg_weight",         "--cfg-weight",         0,  100,    false, false, false};
constexpr ParamSpec kExaggeration     {"exaggeration",       "--exaggeration",       0,  100,    false, false, false};
constexpr ParamSpec kMaxChunkTokens   {"max_chunk_tokens",   "--chunk-tokens",       1,  100000, false, false, true};
constexpr ParamSpec kMaxNewTokens     {"max_new_tokens",     "--max-tokens",         1,  100000, false, false, true};
constexpr ParamSpec kThreads          {"n_threads",          "--threads",            1,  1024,   false, false, true};
// Voice building (cbx_voice_params, `chatterbox voice create`): seconds of the reference decoded.
constexpr ParamSpec kVoiceMaxSeconds  {"max_seconds",        "--max-seconds",        10, 600,    false, false, false};
// clang-format on
}  // namespace param

// The one message for a value outside p's range: "NAME (FLAG) must be in RANGE[ (NOTE)], got VALUE"
// (VALUE: an integer for integer parameters, else the shortest decimal that reads back as it;
// "nan", "inf", "-inf").
std::string param_error(const ParamSpec& p, double value);
// Throws InvalidArgumentError(param_error(p, value)) unless p contains value (integer
// parameters: also a whole number).
void check_param(const ParamSpec& p, double value);

// Per call. nullopt: the model's default.
struct UserSynthOptions {
  std::optional<uint64_t> seed;  // default 0; any value
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int64_t> top_k;                           // Turbo only
  std::optional<double> min_p, cfg_weight, exaggeration;  // Multilingual only
  std::optional<int64_t> max_chunk_tokens;
  std::optional<std::string> language;  // checked against the model by resolve_language
};

// At load.
struct UserLoadOptions {
  std::optional<int64_t> n_threads;             // default: available_cpus()
  std::optional<int64_t> max_new_tokens;        // default: the model's (1000); model limit checked at load
  std::optional<DType> kv_type;                 // F16 (default) or F32
  bool repack = true;                           // TurboLoadParams::repack
  std::optional<GemmPrecision> gemm_precision;  // TurboLoadParams::gemm; default Auto
  std::optional<GemmPrecision> cfm_precision;   // TurboLoadParams::cfm_precision; default Auto
};

// Throw InvalidArgumentError (param_error) for the first value out of range, in field order.
// validate(UserLoadOptions) also throws InvalidArgumentError(debug_env_error()) for a bad
// CBX_DEBUG_* environment variable (core/debug_env.h): every model load reports it.
void validate(const UserSynthOptions& o);
void validate(const UserLoadOptions& o);

// Validated conversions (they call validate). Fields the variant does not use are dropped
// (ignored_options lists them); the pipelines' internal "negative = default" stands for nullopt.
TurboSynthParams to_turbo_params(const UserSynthOptions& o);  // language: use resolve_language first
MtlSynthParams to_mtl_params(const UserSynthOptions& o);      // language copied; the pipeline checks it
TurboLoadParams to_turbo_load_params(const UserLoadOptions& o);
MtlLoadParams to_mtl_load_params(const UserLoadOptions& o);

// The flags of options set in o that a model of `variant` ignores (Turbo / Nano: --min-p,
// --cfg-weight, --exaggeration, as upstream; Multilingual: --top-k), for a warning.
std::vector<std::string> ignored_options(Variant variant, const UserSynthOptions& o);

// The language code a model speaks for `language`, case-insensitive. Turbo / Nano: "en" for
// nullopt, "" or any case of "en", else InvalidArgumentError ("... English only ...").
// Multilingual: check_mtl_language(supported, language) (required; one of `supported`), returned
// lower-cased.
std::string resolve_language(Variant variant, const std::vector<std::string>& supported,
                             const std::optional<std::string>& language);

// Strict CLI parsers; each throws InvalidArgumentError naming the flag and the text:
//   parse_u64:    decimal digits only, <= 2^64 - 1 ("abc", "-5", "", "1e3", " 5" fail)
//   parse_int:    optional '-' then digits, within int64 ("1.7", "1e12", "5x" fail)
//   parse_number: a finite decimal number ("nan", "inf", "1e999", "0x10", "1.5x", "" fail)
uint64_t parse_u64(const std::string& flag, const std::string& text);
int64_t parse_int(const std::string& flag, const std::string& text);
double parse_number(const std::string& flag, const std::string& text);
// --kv-type: "f16" or "f32".
DType parse_kv_type(const std::string& flag, const std::string& text);
// --gemm-precision: "auto", "f32" or "bf16".
GemmPrecision parse_gemm_precision_flag(const std::string& flag, const std::string& text);
// --cfm-precision: "auto", "f32", "bf16" or "int8".
GemmPrecision parse_cfm_precision_flag(const std::string& flag, const std::string& text);

// A warning for n_threads above the CPUs this process may use (nullopt when it fits):
// every pool barrier then waits for a descheduled thread, many times slower. The CLI prints
// it; the C API cannot print and does not warn.
std::optional<std::string> thread_count_warning(int64_t n_threads, int available);
std::optional<std::string> thread_count_warning(int64_t n_threads);  // available = available_cpus()

}  // namespace cbx
