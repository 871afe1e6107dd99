// The one place that maps a variant name to its class, and validates layouts against L.
#include <stdexcept>

#include "attention/attention.h"
#include "attention/axial.h"
#include "attention/combiner_axial.h"
#include "attention/combiner_fixed.h"
#include "attention/combiner_logsparse.h"
#include "attention/fixed.h"
#include "attention/full.h"
#include "attention/logsparse.h"

namespace combiner::attention {

const std::vector<std::string>& variant_names() {
  static const std::vector<std::string> names = {"full",
                                                 "fixed",
                                                 "logsparse",
                                                 "axial",
                                                 "combiner-fixed",
                                                 "combiner-logsparse",
                                                 "combiner-axial-vertical",
                                                 "combiner-axial-horizontal",
                                                 "combiner-axial-rowmajor",
                                                 "combiner-mixture"};
  return names;
}

const std::vector<std::string>& abstraction_names() {
  static const std::vector<std::string> names = {"max", "mean", "deepsets-max", "deepsets-mean"};
  return names;
}

bool uses_block(const std::string& type) {
  return type == "fixed" || type == "combiner-fixed";
}

bool uses_row_len(const std::string& type) {
  return type == "axial" || type == "combiner-mixture" || type.rfind("combiner-axial-", 0) == 0;
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
                                options.abstraction +
                                "', expected one of: " + joined(abstraction_names()));
  if (length <= 0)
    throw std::invalid_argument("model.attention: sequence length must be > 0, got " +
                                std::to_string(length));
  if (uses_block(options.type) && options.block <= 0)
    throw std::invalid_argument("model.attention.block: must be > 0 for '" + options.type +
                                "', got " + std::to_string(options.block));
  if (uses_row_len(options.type) && (options.row_len <= 0 || length % options.row_len != 0))
    throw std::invalid_argument(
        "model.attention.row_len: must be > 0 and divide the sequence "
        "length " +
        std::to_string(length) + " for '" + options.type + "', got " +
        std::to_string(options.row_len));
}

std::shared_ptr<AttentionImpl> make_attention(const AttentionOptions& options,
                                              int64_t length,
                                              int64_t head_dim) {
  validate(options, length);
  const auto& type = options.type;
  if (type == "full") return std::make_shared<FullAttentionImpl>();
  if (type == "fixed") return std::make_shared<FixedAttentionImpl>(options.block);
  if (type == "logsparse") return std::make_shared<LogSparseAttentionImpl>();
  if (type == "axial") return std::make_shared<AxialAttentionImpl>(options.row_len);
  if (type == "combiner-fixed")
    return std::make_shared<CombinerFixedAttentionImpl>(options, head_dim);
  if (type == "combiner-logsparse")
    return std::make_shared<CombinerLogSparseAttentionImpl>(options, head_dim);
  // The remaining names are the axial Combiner variants (validate() rejected anything else).
  return std::make_shared<CombinerAxialAttentionImpl>(options, head_dim);
}

}  // namespace combiner::attention
