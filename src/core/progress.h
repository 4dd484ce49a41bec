// Progress of a long library operation (convert, quantize, voice build), handed to the caller:
// the library never prints; the CLI decides whether and how to show it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace cbx {

struct ProgressEvent {
  const char* stage = "";  // what is being done: "reading", "tensor", "step"
  int64_t done = 0;        // 1-based index of the current item; 0 with total 0: no count
  int64_t total = 0;
  std::string item;  // the file, tensor or stage name
};

using ProgressFn = std::function<void(const ProgressEvent&)>;
using WarningFn = std::function<void(const std::string&)>;

}  // namespace cbx
