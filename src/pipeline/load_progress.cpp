#include "pipeline/load_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"
#include "ops/row_linear.h"
#include "pipeline/pipeline_common.h"

namespace cbx {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.compare(0, std::strlen(prefix), prefix) == 0; }

}  // namespace

void LoadProgress::plan(const GgufFile& f, bool t3_repack) {
  for (uint64_t& b : bytes_) b = 0;
  bytes_[int(LoadStage::Open)] = f.data_offset();  // header and metadata (tokenizer vocabulary included)
  const Isa isa = active_isa();
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    if (starts_with(n, "t3.")) {
      // T3 binds its tensors in place; its load work is the planar copies of the layer matrices
      // and the head (embedding tables are never copied).
      if (t.ndim == 2 && n.find("emb") == std::string::npos)
        bytes_[int(LoadStage::T3)] += RowLinear::pack_bytes(f.tensor(t), isa, t3_repack);
    } else if (starts_with(n, "flow."))
      bytes_[int(LoadStage::Flow)] += t.nbytes;
    else if (starts_with(n, "cfm."))
      bytes_[int(LoadStage::Cfm)] += t.nbytes;
    else if (starts_with(n, "hift."))
      bytes_[int(LoadStage::Hift)] += t.nbytes;
    else if (!starts_with(n, "ve.") && !starts_with(n, "campplus.") && !starts_with(n, "s3tok."))
      bytes_[int(LoadStage::Open)] += t.nbytes;  // voice.* and anything else read at open
  }
  done_bytes_ = 0;
  stage_bytes_ = 0;
  next_ = 0;
}

void LoadProgress::done(LoadStage s) {
  CBX_CHECK(int(s) == next_, "model load: stage %d reported after stage %d", int(s), next_ - 1);
  ++next_;
  done_bytes_ += bytes_[int(s)];
  stage_bytes_ = 0;
  report(0, next_ == kStages);
}

void LoadProgress::advance(LoadStage s, uint64_t bytes) {
  CBX_CHECK(int(s) == next_, "model load: progress within stage %d while stage %d is in progress", int(s), next_);
  CBX_CHECK(next_ < kStages, "model load: progress after the last stage");
  stage_bytes_ = std::min(stage_bytes_ + bytes, bytes_[int(s)]);
  report(stage_bytes_, false);
}

void LoadProgress::report(uint64_t part, bool last) {
  if (!fn_) return;
  uint64_t total = 0;
  for (uint64_t b : bytes_) total += b;
  // The last stage reports exactly 1; the others the planned share (below 1; 0 when nothing
  // was planned).
  float fraction = 1.f;
  if (!last) {
    fraction = total > 0 ? float(double(done_bytes_ + part) / double(total)) : 0.f;
    fraction = std::fmin(fraction, std::nextafter(1.f, 0.f));
  }
  if (!fn_(fraction)) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", double(fraction) * 100.0);
    throw AbortedError(path_ + ": model load cancelled by the progress callback at " + pct);
  }
}

}  // namespace cbx
