// The three weight files (T3, S3Gen, VE) of a variant, from the upstream layout table.
#include "mkckpt.h"

namespace mk {

void write_weight_file(const Options& o, cbx::CkptFile f) {
  const cbx::UpstreamDims d = cbx::upstream_dims(o.variant, o.tiny);
  std::vector<cbx::UpstreamTensor> tensors;
  cbx::for_each_upstream_tensor(f, o.variant, d, [&](const cbx::UpstreamTensor& t) { tensors.push_back(t); });
  const std::string name = cbx::upstream_file_name(f, o.variant, o.t3_version);
  const std::string path = o.dir + "/" + name;
  // The file name is part of the key, so t3_mtl23ls_v2 and _v3 hold different weights.
  const uint64_t key = stream_key(o.seed, "file", name);
  if (cbx::upstream_file_is_torch_pickle(f, o.variant))
    write_torch_state_dict(path, tensors, key);
  else
    write_safetensors_streaming(path, tensors, key, o.threads);
}

}  // namespace mk
