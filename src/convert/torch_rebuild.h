// Pieces of torch.load's restricted unpickler that know about torch: the whitelist of
// globals and materialising a (strided) tensor view out of a storage.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convert/checkpoint_tensor.h"

namespace cbx {

// Whether a pickle may name `global` ("module.name"), as torch's weights_only unpickler.
bool torch_global_allowed(const std::string& global);
// torch.FloatStorage -> F32 ...; torch.UntypedStorage -> untyped (bytes). False otherwise.
bool torch_storage_type(const std::string& global, DType* dtype, bool* untyped);
// torch.float32 -> F32 ... False for anything else. uint8 and bool are read as I8.
bool torch_dtype_global(const std::string& global, DType* dtype);

// The view (offset, size, stride; in elements) of `storage` copied out contiguous.
// Throws cbx::Error (without a file name) if any addressed element lies outside the
// storage's `storage_elems` elements or `*budget` bytes would be exceeded (decremented).
std::shared_ptr<CkptTensor> materialise_view(const uint8_t* storage, int64_t storage_elems, DType dtype, int64_t offset,
                                             const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                                             size_t* budget);

// Python's "text".encode("latin1") for UTF-8 text; false if a code point is > 0xff.
bool latin1_from_utf8(const std::string& utf8, std::string* out);

}  // namespace cbx
