// The one place that maps a variant name to its class, and validates layouts against L.
#include <stdexcept>

#include "attention/attention.h"
#include "attention/full.h"

namespace combiner::attention {

const std::vector<std::string>& variant_names() {
  static const std::vector<std::string> names = {"full"};
  return names;
}

const std::vector<std::string>& abstraction_names() {
  static const std::vector<std::string> names = {"max", "mean", "deepsets-max", "deepsets-mean"};
  return names;
}

namespace {
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
bool contains(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names)
    if (n == name) return true;
  return false;
}
}  // namespace

void validate(const AttentionOptions& options, int64_t length) {
  if (!contains(variant_names(), options.type))
    throw std::invalid_argument("model.attention.type: unknown variant '" + options.type +
                                "', expected one of: " + joined(variant_names()));
  if (!contains(abstraction_names(), options.abstraction))
    throw std::invalid_argument("model.attention.abstraction: unknown abstraction '" +
                                options.abstraction + "', expected one of: " +
                                joined(abstraction_names()));
  if (options.block <= 0)
    throw std::invalid_argument("model.attention.block: must be > 0, got " +
                                std::to_string(options.block));
  if (options.row_len <= 0 || length % options.row_len != 0)
    throw std::invalid_argument("model.attention.row_len: must be > 0 and divide the sequence "
                                "length " + std::to_string(length) + ", got " +
                                std::to_string(options.row_len));
}

std::shared_ptr<AttentionImpl> make_attention(const AttentionOptions& options,
                                              int64_t length,
                                              int64_t head_dim) {
  validate(options, length);
  if (options.type == "full") return std::make_shared<FullAttentionImpl>();
  throw std::invalid_argument("model.attention.type: no implementation for '" + options.type + "'");
}

}  // namespace combiner::attention
