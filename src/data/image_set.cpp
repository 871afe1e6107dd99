#include "data/image_set.h"

#include <stdexcept>

namespace combiner::data {

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kVal: return "val";
    case Split::kTest: return "test";
  }
  return "?";
}

Split parse_split(const std::string& name) {
  if (name == "train") return Split::kTrain;
  if (name == "val") return Split::kVal;
  if (name == "test") return Split::kTest;
  throw std::invalid_argument("split: unknown split '" + name + "', expected train, val or test");
}

}  // namespace combiner::data
