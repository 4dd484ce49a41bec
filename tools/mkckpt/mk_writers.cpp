// File writers: a streaming safetensors writer (tensor by tensor, block by block, so a
// multi-GB file never sits in memory) and torch.save state dicts via cbx::save_torch_pt.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "convert/torch_pt.h"
#include "core/error.h"
#include "core/output_file.h"
#include "mkckpt.h"

namespace mk {

void Progress::add(size_t n) {
  done_bytes += n;
  const bool big = total_bytes >= (size_t(64) << 20);  // tiny files: one line only
  const int pct = total_bytes ? int(100.0 * double(done_bytes) / double(total_bytes)) : 100;
  if (big && pct / 10 != last_pct / 10 && done_bytes < total_bytes)
    std::fprintf(stderr, "  %s %3d%%\n", label.c_str(), pct);
  if (done_bytes >= total_bytes && last_pct != 100) {
    std::fprintf(stderr, "  %-30s %10.1f MB\n", label.c_str(), double(total_bytes) / 1e6);
    last_pct = 100;
    return;
  }
  last_pct = pct;
}

namespace {

const char* st_dtype(cbx::DType d) {
  switch (d) {
    case cbx::DType::F32:
      return "F32";
    case cbx::DType::I64:
      return "I64";
    default:
      cbx::fail("mkckpt: no safetensors name for dtype %s", cbx::dtype_name(d));
  }
}

// Rank in the safetensors Dtype enum (declaration order); the Python package sorts tensors by
// this, descending, then by name.
int st_rank(cbx::DType d) { return d == cbx::DType::I64 ? 13 : 11; }

std::string shape_json(const std::vector<int64_t>& s) {
  std::string j = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) j += ',';
    j += std::to_string(s[i]);
  }
  j += ']';
  return j;
}

// Through OutputFile (core/output_file.h): written whole or not at all, never over a device.
struct File {
  cbx::OutputFile out;
  explicit File(const std::string& p) : out(p) {}
  void write(const void* d, size_t n) { out.write(d, n); }
  void close() { out.commit(); }
};

}  // namespace

void write_safetensors_streaming(const std::string& path, const std::vector<cbx::UpstreamTensor>& tensors,
                                 uint64_t file_key, int threads) {
  std::vector<const cbx::UpstreamTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    if (st_rank(a->dtype) != st_rank(b->dtype)) return st_rank(a->dtype) > st_rank(b->dtype);
    return a->name < b->name;
  });

  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  size_t off = 0;
  for (const auto* t : order) {
    const size_t n = tensor_bytes(*t);
    header.append(",\"").append(t->name).append("\":{\"dtype\":\"").append(st_dtype(t->dtype));
    header.append("\",\"shape\":").append(shape_json(t->shape)).append(",\"data_offsets\":[");
    header.append(std::to_string(off)).append(",").append(std::to_string(off + n)).append("]}");
    off += n;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  File out(path);
  const uint64_t hlen = header.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = uint8_t(hlen >> (8 * i));
  out.write(le, 8);
  out.write(header.data(), header.size());

  Progress prog;
  prog.label = std::filesystem::path(path).filename().string();
  prog.total_bytes = off;
  // Chunks of blocks: each thread fills a contiguous run of blocks of the chunk buffer.
  const int64_t chunk_blocks = 128;  // 8M elements, 32 MB
  std::vector<uint8_t> buf;
  for (const auto* t : order) {
    const int64_t n = numel(t->shape);
    const size_t esize = t->dtype == cbx::DType::I64 ? 8 : 4;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const uint64_t key = stream_key(file_key, t->name);
    for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
      const int64_t b1 = std::min(blocks, b0 + chunk_blocks);
      const int64_t e0 = b0 * kBlock, e1 = std::min(n, b1 * kBlock);
      buf.resize(size_t(e1 - e0) * esize);
      const int nt = int(std::min<int64_t>(threads, b1 - b0));
      if (nt <= 1) {
        fill_blocks(*t, key, b0, b1, buf.data());
      } else {
        std::vector<std::thread> pool;
        const int64_t per = (b1 - b0 + nt - 1) / nt;
        for (int k = 0; k < nt; ++k) {
          const int64_t s = b0 + k * per, e = std::min(b1, s + per);
          if (s >= e) break;
          uint8_t* dst = buf.data() + size_t((s - b0) * kBlock) * esize;
          pool.emplace_back([t, key, s, e, dst] { fill_blocks(*t, key, s, e, dst); });
        }
        for (auto& th : pool) th.join();
      }
      out.write(buf.data(), buf.size());
      prog.add(buf.size());
    }
  }
  if (off == 0) prog.add(0);
  out.close();
}

void write_torch_state_dict(const std::string& path, const std::vector<cbx::UpstreamTensor>& tensors,
                            uint64_t file_key) {
  std::vector<std::pair<std::string, cbx::PyRef>> items;
  items.reserve(tensors.size());
  size_t total = 0;
  for (const auto& t : tensors) total += tensor_bytes(t);
  Progress prog;
  prog.label = std::filesystem::path(path).filename().string();
  prog.total_bytes = total;
  for (const auto& t : tensors) {
    items.emplace_back(t.name, cbx::py_tensor(make_tensor(t, stream_key(file_key, t.name))));
    prog.add(tensor_bytes(t));
  }
  cbx::save_torch_pt(path, *cbx::py_dict(std::move(items)));
}

}  // namespace mk
