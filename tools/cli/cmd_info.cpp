// chatterbox info MODEL.gguf [--check] [--tensors]: variant, hyper-parameters, tensor bytes
// per dtype and component, tokenizer summary; --check validates the tensor layout and scans
// every weight for NaN / Inf (core/gguf_check.h), exit status 1 if either finds a problem.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "command.h"
#include "core/gguf.h"
#include "core/gguf_check.h"
#include "core/thread_pool.h"
#include "models/model_config.h"

namespace {

std::string value_str(const cbx::GgufValue& v, size_t max_items = 8) {
  using T = cbx::GgufType;
  char buf[64];
  switch (v.type) {
    case T::STRING: {
      const std::string& s = v.as_string();
      std::string q(1, '"');
      if (s.size() <= 60) return q + s + '"';
      return q + s.substr(0, 57) + "...\" (" + std::to_string(s.size()) + " bytes)";
    }
    case T::BOOL:
      return v.as_bool() ? "true" : "false";
    case T::F32:
    case T::F64:
      std::snprintf(buf, sizeof buf, "%g", v.as_float());
      return buf;
    case T::ARRAY: {
      const cbx::GgufArray& a = v.as_array();
      std::string r = "[";
      for (size_t i = 0; i < a.items.size() && i < max_items; ++i) r += (i ? ", " : "") + value_str(a.items[i], 0);
      if (a.items.size() > max_items) r += ", ... (" + std::to_string(a.items.size()) + " items)";
      return r + "]";
    }
    default:
      return std::to_string(v.as_int());
  }
}

int cmd_info(int argc, char** argv) {
  std::string path;
  bool check = false, list = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: chatterbox info MODEL.gguf [--check] [--tensors]\n"
          "  --check    verify every tensor against the layout the metadata implies, and scan every\n"
          "             weight for NaN / Inf values: prints each offending tensor (dtype, NaN and Inf\n"
          "             counts, first element; for q8_0 / q4_0 / q4_k the blocks whose f16 scales are NaN / Inf)\n"
          "             and a summary. Exit status 0 when both pass, 1 when either finds a problem.\n"
          "             convert and quantize refuse to write NaN / Inf weights; loading does not scan.\n"
          "  --tensors  list every tensor\n");
      return 0;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--tensors") {
      list = true;
    } else if (path.empty()) {
      path = a;
    } else {
      std::fprintf(stderr, "chatterbox info: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: chatterbox info MODEL.gguf [--check] [--tensors]\n");
    return 2;
  }
  auto f = cbx::GgufFile::open(path);
  cbx::ModelConfig cfg = cbx::read_config(*f);
  auto str = [&](const char* k) { return f->has(k) ? value_str(f->get(k)) : std::string("-"); };
  std::printf("file:        %s (%.1f MB, GGUF v%u)\n", path.c_str(), f->size() / 1e6, f->version());
  std::printf("model:       %s, variant %s, T3 %s (%s)\n", str("general.name").c_str(), cbx::variant_name(cfg.variant),
              cfg.t3.arch.c_str(), str("chatterbox.convert.t3_checkpoint").c_str());
  std::printf("type:        %s\n", str("chatterbox.convert.type").c_str());

  std::printf("\nhyper-parameters:\n");
  for (const std::string& k : f->keys()) {
    if (k.rfind("chatterbox.", 0) != 0 || k.rfind("chatterbox.tokenizer.", 0) == 0 ||
        k.rfind("chatterbox.convert.", 0) == 0)
      continue;
    std::printf("  %-44s %s\n", k.c_str() + 11, value_str(f->get(k)).c_str());
  }

  std::map<cbx::DType, std::pair<size_t, uint64_t>> by_dtype;
  std::map<std::string, std::pair<size_t, uint64_t>> by_comp;
  uint64_t total = 0;
  for (const auto& t : f->tensors()) {
    by_dtype[t.dtype].first++, by_dtype[t.dtype].second += t.nbytes;
    std::string comp = t.name.substr(0, t.name.find('.'));
    by_comp[comp].first++, by_comp[comp].second += t.nbytes;
    total += t.nbytes;
  }
  std::printf("\ntensors:     %zu, %.1f MB\n", f->tensors().size(), total / 1e6);
  for (const auto& [dt, cb] : by_dtype)
    std::printf("  %-10s %5zu tensors %10.1f MB\n", cbx::dtype_name(dt), cb.first, cb.second / 1e6);
  std::printf("components:\n");
  for (const auto& [c, cb] : by_comp)
    std::printf("  %-10s %5zu tensors %10.1f MB\n", c.c_str(), cb.first, cb.second / 1e6);

  std::printf("\ntokenizer:   %s\n", str("tokenizer.ggml.model").c_str());
  auto count = [&](const char* k) -> long long {
    const cbx::GgufValue* v = f->find(k);
    return v && v->type == cbx::GgufType::ARRAY ? (long long)v->as_array().items.size() : -1;
  };
  std::printf("  tokens %lld, merges %lld, added %lld %s\n", count("tokenizer.ggml.tokens"),
              count("tokenizer.ggml.merges"), count("chatterbox.tokenizer.added_tokens"),
              str("chatterbox.tokenizer.added_tokens").c_str());
  if (f->has("chatterbox.tokenizer.model_max_length"))
    std::printf("  model_max_length %s\n", str("chatterbox.tokenizer.model_max_length").c_str());
  if (f->has("chatterbox.tokenizer.cangjie"))
    std::printf("  cangjie entries %lld, HF json %s (%zu bytes)\n", count("chatterbox.tokenizer.cangjie"),
                str("chatterbox.tokenizer.hf_json_file").c_str(),
                f->get("chatterbox.tokenizer.hf_json").as_string().size());

  if (list) {
    std::printf("\n");
    for (const auto& t : f->tensors()) {
      std::string s = "[";
      for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
      std::printf("  %-60s %-5s %-20s %10zu\n", t.name.c_str(), cbx::dtype_name(t.dtype), (s + "]").c_str(), t.nbytes);
    }
  }
  if (check) {
    std::vector<std::string> problems = cbx::check_model_tensors(*f, cfg);
    for (const auto& p : problems) std::printf("check: %s\n", p.c_str());
    cbx::ThreadPool pool(int(std::clamp(std::thread::hardware_concurrency(), 1u, 64u)));
    const std::vector<cbx::NonFiniteTensor> bad = cbx::find_non_finite(*f, &pool);
    long long nan = 0, inf = 0;
    for (const auto& t : bad) {
      std::printf("check: %s\n", cbx::describe_non_finite(t).c_str());
      nan += t.count.nan, inf += t.count.inf;
    }
    if (!problems.empty() || !bad.empty()) {
      std::printf("check: FAILED: %zu layout problems, %zu tensors with non-finite values (%lld NaN, %lld Inf)\n",
                  problems.size(), bad.size(), nan, inf);
      return 1;
    }
    std::printf("\ncheck: OK, all %zu tensors match the %s layout and hold no NaN / Inf\n", f->tensors().size(),
                cbx::variant_name(cfg.variant));
  }
  return 0;
}

cbx::cli::RegisterCommand reg("info", "print a chatterbox GGUF's variant, hyper-parameters and tensors", cmd_info);

}  // namespace
