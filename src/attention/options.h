// The `model.attention` config section as plain data (no torch), so config can hold it.
#pragma once

#include <cstdint>
#include <string>

namespace combiner::attention {

struct AttentionOptions {
  std::string type = "full";  // full | fixed | logsparse | axial | combiner-* (docs/ATTENTION.md)
  int64_t block = 0;          // block size s of the fixed layouts; 0 = one image row (W*C)
  int64_t row_len = 0;        // row length W of the axial layouts; 0 = one image row (W*C)
  std::string abstraction = "max";  // span summary: max | mean | deepsets-max | deepsets-mean
};

}  // namespace combiner::attention
