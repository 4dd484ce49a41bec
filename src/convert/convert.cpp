// Checkpoint directory -> GGUF: variant detection, hyper-parameter inference, checks
// against the tensor table, dtype policy and streaming write (docs/gguf-format.md).
#include "convert/convert.h"

#include <sys/stat.h>

#include <chrono>

#include "convert/convert_internal.h"
#include "convert/quant_policy.h"
#include "core/error.h"
#include "core/gguf_check.h"
#include "core/output_file.h"

namespace cbx {

namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

const char* variant_title(Variant v) {
  switch (v) {
    case Variant::Turbo:
      return "Turbo";
    case Variant::Nano:
      return "Nano";
    case Variant::Mtl:
      return "Multilingual";
  }
  return "?";
}

// First candidate present in dir, or "" (optional) / an error naming the files.
std::string pick(const std::string& dir, std::initializer_list<const char*> names, Variant v, const char* what,
                 bool required = true) {
  for (const char* n : names)
    if (is_file(dir + "/" + n)) return dir + "/" + n;
  if (!required) return "";
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
  fail("%s: missing %s (%s of the Chatterbox %s checkpoint)", dir.c_str(), list.c_str(), what, variant_title(v));
}

}  // namespace

CheckpointFiles detect_checkpoint(const std::string& dir_in, const std::string& t3_file) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  CBX_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "%s: not a directory", dir.c_str());
  CheckpointFiles f;
  f.dir = dir;
  if (!t3_file.empty()) {
    std::string name = base_name(t3_file);
    f.t3 = t3_file.find('/') == std::string::npos ? dir + "/" + t3_file : t3_file;
    CBX_CHECK(is_file(f.t3), "%s: no such T3 checkpoint", f.t3.c_str());
    if (name.find("turbo") != std::string::npos)
      f.variant = Variant::Turbo;
    else if (name.find("nano") != std::string::npos)
      f.variant = Variant::Nano;
    else if (name.find("mtl") != std::string::npos)
      f.variant = Variant::Mtl;
    else
      fail("%s: cannot tell the variant from the name (expected t3_turbo_*, t3_nano_* or t3_mtl*)", name.c_str());
  } else {
    std::vector<std::pair<Variant, std::string>> found;
    for (auto [v, n] :
         {std::pair{Variant::Turbo, "t3_turbo_v1.safetensors"}, std::pair{Variant::Nano, "t3_nano_v1.safetensors"},
          std::pair{Variant::Mtl, "t3_mtl23ls_v2.safetensors"}, std::pair{Variant::Mtl, "t3_mtl23ls_v3.safetensors"}})
      if (is_file(dir + "/" + n)) found.push_back({v, dir + "/" + n});
    CBX_CHECK(!found.empty(),
              "%s: unknown checkpoint: no T3 weights found (expected t3_turbo_v1.safetensors for Turbo, "
              "t3_nano_v1.safetensors for Nano, or t3_mtl23ls_v2/_v3.safetensors for Multilingual)",
              dir.c_str());
    for (const auto& [v, p] : found)
      CBX_CHECK(v == found[0].first, "%s: T3 checkpoints of two variants (%s, %s): choose one with --t3 FILE",
                dir.c_str(), base_name(found[0].second).c_str(), base_name(p).c_str());
    f.variant = found[0].first;
    f.t3 = found[0].second;  // Multilingual: v2 first, upstream's default
    if (found.size() > 1)
      f.note = base_name(found[0].second) + " and " + base_name(found[1].second) + " present; using " +
               base_name(found[0].second) + " (upstream default; --t3 picks another)";
  }
  const Variant v = f.variant;
  f.conds = pick(dir, {"conds.pt"}, v, "built-in voice");
  if (v == Variant::Mtl) {
    f.s3gen = pick(dir, {"s3gen.pt", "s3gen.safetensors"}, v, "S3Gen weights");
    f.ve = pick(dir, {"ve.pt", "ve.safetensors"}, v, "voice encoder weights");
    f.mtl_tokenizer = pick(dir, {"grapheme_mtl_merged_expanded_v1.json", "mtl_tokenizer.json", "tokenizer.json"}, v,
                           "text tokenizer");
    f.cangjie = pick(dir, {"Cangjie5_TC.json"}, v, "Chinese Cangjie table");
  } else {
    f.s3gen = pick(dir, {"s3gen_meanflow.safetensors"}, v, "S3Gen mean-flow weights");
    f.ve = pick(dir, {"ve.safetensors", "ve.pt"}, v, "voice encoder weights");
    f.vocab = pick(dir, {"vocab.json"}, v, "GPT-2 tokenizer vocabulary");
    f.merges = pick(dir, {"merges.txt"}, v, "GPT-2 tokenizer merges");
    f.added_tokens = pick(dir, {"added_tokens.json"}, v, "tokenizer added tokens");
    f.tokenizer_config = pick(dir, {"tokenizer_config.json"}, v, "", false);
    f.special_tokens_map = pick(dir, {"special_tokens_map.json"}, v, "", false);
  }
  return f;
}

namespace {

struct Prepared {
  CheckpointFiles files;
  ModelConfig config;
  std::unique_ptr<SourceFile> t3, s3gen, ve;
  VoiceTensors voice;
};

void report(const ProgressFn& fn, const char* stage, int64_t done, int64_t total, const std::string& item) {
  if (!fn) return;
  ProgressEvent e;
  e.stage = stage;
  e.done = done;
  e.total = total;
  e.item = item;
  fn(e);
}

Prepared prepare(const CheckpointFiles& files, const ProgressFn& progress, const WarningFn& warn) {
  Prepared p;
  p.files = files;
  p.config = default_config(files.variant);
  auto open = [&](const std::string& path) {
    report(progress, "reading", 0, 0, base_name(path));
    return SourceFile::open(path);
  };
  p.t3 = open(files.t3);
  p.s3gen = open(files.s3gen);
  p.ve = open(files.ve);
  infer_t3(*p.t3, files.variant, p.config.t3);
  infer_ve(*p.ve, p.config.ve);
  infer_s3gen(*p.s3gen, p.config);
  report(progress, "reading", 0, 0, base_name(files.conds));
  p.voice = read_voice(files.conds, p.config, warn);
  return p;
}

}  // namespace

ModelConfig infer_checkpoint_config(const CheckpointFiles& files) {
  return prepare(files, {}, [](const std::string&) {}).config;
}

static std::vector<OutputInput> checkpoint_inputs(const CheckpointFiles& f) {
  std::vector<OutputInput> in;
  for (const std::string* p : {&f.t3, &f.s3gen, &f.ve, &f.conds, &f.vocab, &f.merges, &f.added_tokens,
                               &f.tokenizer_config, &f.special_tokens_map, &f.mtl_tokenizer, &f.cangjie})
    if (!p->empty()) in.push_back({"checkpoint file", *p});
  return in;
}

ConvertStats convert_checkpoint(const ConvertOptions& opt) {
  auto t_start = std::chrono::steady_clock::now();
  CBX_CHECK(!opt.out.empty(), "convert: no output path (-o model.gguf)");
  const DType target = opt.type;
  const QuantTypes types(target, opt.s3gen_type);
  parse_target_type(dtype_name(target));  // validates the target
  parse_target_type(dtype_name(types.s3gen_type()), "--s3gen-type");
  CheckpointFiles files = detect_checkpoint(opt.dir, opt.t3_file);
  // Made before the (long) conversion: an output that is one of the checkpoint's files, or that
  // cannot be written, fails now; a killed run leaves no partial file.
  OutputFile out(opt.out, checkpoint_inputs(files));
  ConvertStats stats;
  const WarningFn warn = [&](const std::string& w) {
    stats.warnings.push_back(w);
    if (opt.on_warning) opt.on_warning(w);
  };
  if (!files.note.empty()) warn(files.note);
  Prepared p = prepare(files, opt.on_progress, warn);
  const ModelConfig& cfg = p.config;

  std::map<std::string, Recipe> recipes;
  collect_recipes(*p.t3, t3_prefixes(), t3_dropped(), t3_needs_transpose, recipes);
  collect_recipes(*p.s3gen, s3gen_prefixes(), s3gen_dropped(), nullptr, recipes);
  collect_recipes(*p.ve, ve_prefixes(), {}, nullptr, recipes);

  auto source_of = [&](const std::string& g) -> std::pair<SourceFile*, const PrefixMap*> {
    if (g.rfind("t3.", 0) == 0) return {p.t3.get(), &t3_prefixes()};
    if (g.rfind("ve.", 0) == 0) return {p.ve.get(), &ve_prefixes()};
    return {p.s3gen.get(), &s3gen_prefixes()};
  };

  GgufWriter w;
  std::string name = std::string("Chatterbox ") + variant_title(cfg.variant);
  w.set_string("general.architecture", "chatterbox");
  w.set_string("general.name", name);
  w.set_u32("general.file_type", gguf_file_type(target));
  w.set_u32("general.quantization_version", 2);
  write_config(cfg, w);
  write_tokenizer(files, cfg, w, warn);
  w.set_string(kConvertTypeKey, type_traits(target).name);
  w.set_string(kConvertS3genTypeKey, type_traits(types.s3gen_type()).name);
  w.set_string("chatterbox.convert.t3_checkpoint", base_name(files.t3));
  std::vector<std::string> sources;
  for (const std::string* s : {&files.t3, &files.s3gen, &files.ve, &files.conds, &files.vocab, &files.merges,
                               &files.added_tokens, &files.tokenizer_config, &files.mtl_tokenizer, &files.cangjie})
    if (!s->empty()) sources.push_back(base_name(*s));
  w.set_string_array("chatterbox.convert.source_files", sources);

  // Use counts so .pt tensors are freed as soon as their last recipe ran.
  auto uses = std::make_shared<std::map<std::pair<SourceFile*, std::string>, int>>();
  // Tensors are encoded one by one inside w.write, in the order added; count them for progress.
  auto done = std::make_shared<int64_t>(0);
  int64_t n_lazy = 0;

  stats.variant = cfg.variant;
  const std::vector<TensorSpec> specs = model_tensor_specs(cfg);
  std::set<std::string> matched;
  for (const TensorSpec& spec : specs) {
    const DType dt = policy_dtype(spec.name, spec.shape, spec.role, spec.is_int, types);
    const int64_t numel = [&] {
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      return n;
    }();
    const size_t bytes = dtype_row_bytes(dt, numel);
    stats.n_tensors++;
    stats.tensor_bytes += bytes;
    stats.bytes_per_dtype[dt] += bytes;
    stats.tensors_per_dtype[dt]++;

    if (spec.name.rfind("voice.", 0) == 0) {
      const VoiceTensors& v = p.voice;
      const std::string& n = spec.name;
      if (spec.is_int) {
        const std::vector<int32_t>& d = n == "voice.cond_prompt_tokens" ? v.cond_prompt_tokens : v.prompt_token;
        CBX_ASSERT(int64_t(d.size()) == numel);
        w.add_tensor(n, dt, spec.shape, d.data(), d.size() * 4);
      } else {
        const std::vector<float>& d = n == "voice.speaker_emb"   ? v.speaker_emb
                                      : n == "voice.emotion_adv" ? v.emotion_adv
                                      : n == "voice.prompt_feat" ? v.prompt_feat
                                                                 : v.embedding;
        CBX_ASSERT(int64_t(d.size()) == numel && dt == DType::F32);
        check_finite_tensor(n, dt, d.data(), numel, "convert",
                            "in " + base_name(files.conds) + "; refusing to write a model with NaN / Inf weights");
        w.add_tensor(n, dt, spec.shape, d.data(), d.size() * 4);
      }
      continue;
    }
    auto it = recipes.find(spec.name);
    if (it == recipes.end()) {
      auto [src, pm] = source_of(spec.name);
      fail("%s: missing tensor '%s' (Chatterbox %s layout; GGUF name '%s')", src->file().c_str(),
           upstream_name(spec.name, *pm).c_str(), variant_title(cfg.variant), spec.name.c_str());
    }
    const Recipe& r = it->second;
    CBX_CHECK(
        r.shape == spec.shape, "%s: tensor '%s' has shape %s, expected %s from the inferred config",
        r.src->file().c_str(), r.inputs.back().c_str(),
        shape_to_string(r.xf == Xform::Transpose ? std::vector<int64_t>{r.shape[1], r.shape[0]} : r.shape).c_str(),
        shape_to_string(r.xf == Xform::Transpose ? std::vector<int64_t>{spec.shape[1], spec.shape[0]} : spec.shape)
            .c_str());
    for (const std::string& in : r.inputs) {
      if (in.empty()) continue;
      DType sd = r.src->dtype(in);
      CBX_CHECK(sd == DType::F32 || sd == DType::F16 || sd == DType::BF16 || sd == DType::F64,
                "%s: tensor '%s' has dtype %s, expected a float type", r.src->file().c_str(), in.c_str(),
                dtype_name(sd));
      (*uses)[{r.src, in}]++;
    }
    matched.insert(spec.name);
    const Recipe* rp = &r;
    const std::string gname = spec.name;
    ++n_lazy;
    const int64_t* total = &n_lazy;  // final by the time w.write runs the lambdas
    const ProgressFn& on_progress = opt.on_progress;
    w.add_tensor_lazy(
        spec.name, dt, spec.shape, [rp, dt, numel, gname, uses, done, total, &on_progress](void* dst, size_t nbytes) {
          std::vector<float> data = run_recipe(*rp);
          CBX_CHECK(int64_t(data.size()) == numel, "convert: '%s' produced %zu values, expected %lld", gname.c_str(),
                    data.size(), (long long)numel);
          CBX_CHECK(nbytes == dtype_row_bytes(dt, numel), "convert: '%s' size mismatch", gname.c_str());
          // NaN / Inf weights silently corrupt the audio, and loading does not scan for them (too dear
          // next to the load, core/gguf_check.h): refuse them here, in the checkpoint and after
          // encoding (an f32 value beyond the f16 range becomes Inf).
          check_finite_tensor(gname, DType::F32, data.data(), numel, "convert",
                              "in the checkpoint (" + rp->src->file() + " '" + rp->inputs.back() +
                                  "'); refusing to write a model with NaN / Inf weights");
          encode_f32(data.data(), numel, dt, dst);
          if (dt != DType::F32)
            check_finite_tensor(gname, dt, dst, numel, "convert",
                                std::string("after encoding as ") + dtype_name(dt) +
                                    " (values beyond its range); refusing to write a model with NaN / Inf weights");
          for (const std::string& in : rp->inputs)
            if (!in.empty() && --(*uses)[{rp->src, in}] == 0) rp->src->release(in);
          report(on_progress, "tensor", ++*done, *total, gname);
        });
  }
  for (const auto& [g, r] : recipes)
    CBX_CHECK(matched.count(g), "%s: unexpected tensor '%s' (not in the Chatterbox %s layout)", r.src->file().c_str(),
              r.inputs.back().c_str(), variant_title(cfg.variant));

  w.write(out);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return stats;
}

}  // namespace cbx
