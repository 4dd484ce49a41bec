#include "convert/quantize.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "convert/quant_policy.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_check.h"
#include "core/output_file.h"
#include "models/model_config.h"

namespace cbx {

QuantizeStats quantize_gguf(const std::string& in, const std::string& out, const QuantTypes& types,
                            const ProgressFn& progress) {
  auto t0 = std::chrono::steady_clock::now();
  const DType target = types.type;
  parse_target_type(dtype_name(target));
  parse_target_type(dtype_name(types.s3gen_type()), "--s3gen-type");
  std::unique_ptr<GgufFile> f = GgufFile::open(in);
  // Before the work: refuses OUT when it is IN (any path to it), or when it cannot be written.
  OutputFile out_file(out, {{"input", in}});
  ModelConfig cfg = read_config(*f);  // also checks that this is a chatterbox GGUF
  std::map<std::string, TensorSpec> specs;
  for (TensorSpec& s : model_tensor_specs(cfg)) specs[s.name] = std::move(s);

  GgufWriter w;
  for (const std::string& k : f->keys()) {
    if (k == "general.alignment") continue;   // the writer emits its own
    if (k == kConvertS3genTypeKey) continue;  // written after convert.type, as convert does
    if (k == "general.file_type") {
      w.set_u32(k, gguf_file_type(target));
    } else if (k == kConvertTypeKey) {
      w.set_string(k, type_traits(target).name);
      w.set_string(kConvertS3genTypeKey, type_traits(types.s3gen_type()).name);
    } else {
      w.set_value(k, f->get(k));
    }
  }

  QuantizeStats st;
  auto done = std::make_shared<int64_t>(0);
  std::vector<std::pair<const GgufTensorInfo*, DType>> plan;
  for (const GgufTensorInfo& ti : f->tensors()) {
    std::vector<int64_t> shape(ti.shape, ti.shape + ti.ndim);
    auto it = specs.find(ti.name);
    // Tensors outside the table keep their dtype (forward compatibility).
    DType dt = it == specs.end() ? ti.dtype : policy_dtype(ti.name, shape, it->second.role, it->second.is_int, types);
    if (dt != ti.dtype) {
      CBX_CHECK(!type_traits(ti.dtype).is_quantized,
                "%s: tensor '%s' is %s; requantizing needs an F32/F16 source (convert the checkpoint again)",
                in.c_str(), ti.name.c_str(), dtype_name(ti.dtype));
      CBX_CHECK(type_traits(ti.dtype).to_float, "%s: tensor '%s' has dtype %s, which has no float form", in.c_str(),
                ti.name.c_str(), dtype_name(ti.dtype));
    }
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    size_t bytes = dtype_row_bytes(dt, numel);
    st.n_tensors++;
    st.bytes_in += ti.nbytes;
    st.bytes_out += bytes;
    st.bytes_per_dtype[dt] += bytes;
    plan.push_back({&ti, dt});
  }
  const GgufFile* fp = f.get();
  const int64_t total = int64_t(plan.size());
  for (auto [ti, dt] : plan) {
    std::vector<int64_t> shape(ti->shape, ti->shape + ti->ndim);
    w.add_tensor_lazy(ti->name, dt, shape, [fp, ti = ti, dt = dt, done, total, &progress](void* dst, size_t nbytes) {
      Tensor src = fp->tensor(*ti);
      // NaN / Inf weights are refused here, in the input and after encoding, as in convert.
      check_finite_tensor(ti->name, ti->dtype, src.data, src.numel(), "quantize",
                          "in " + fp->path() + "; refusing to write a model with NaN / Inf weights");
      if (dt == ti->dtype) {
        CBX_CHECK(nbytes == ti->nbytes, "quantize: '%s' size mismatch", ti->name.c_str());
        std::memcpy(dst, src.data, nbytes);
      } else {
        const int64_t n = src.numel();
        std::vector<float> tmp(size_t(n), 0.0f);
        type_traits(ti->dtype).to_float(src.data, tmp.data(), n);
        encode_f32(tmp.data(), n, dt, dst);
        check_finite_tensor(ti->name, dt, dst, n, "quantize",
                            std::string("after encoding as ") + dtype_name(dt) +
                                " (values beyond its range); refusing to write a model with NaN / Inf weights");
      }
      if (progress) {
        ProgressEvent e;
        e.stage = "tensor";
        e.done = ++*done;
        e.total = total;
        e.item = ti->name;
        progress(e);
      }
    });
  }
  w.write(out_file);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace cbx
