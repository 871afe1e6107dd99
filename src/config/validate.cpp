// validate(): the per-key ranges and choices from the field table, then the rules that relate
// two keys, then the defaults that depend on the dataset (data.dir, attention block/row_len),
// and last the attention layout against the sequence length L = H * W * C.
#include <stdexcept>
#include <string>

#include "attention/attention.h"
#include "config/config.h"
#include "config/fields.h"
#include "config/scalar.h"
#include "data/dataset.h"

namespace combiner::config {
namespace {

void check_relations(const Config& config) {
  const ModelConfig& m = config.model;
  const TrainConfig& t = config.train;
  if (m.width % m.heads != 0)
    throw std::invalid_argument("model.width: must be divisible by model.heads (" +
                                std::to_string(m.heads) + "), got " + std::to_string(m.width));
  if (t.batch_size % t.grad_accum != 0)
    throw std::invalid_argument("train.grad_accum: must divide train.batch_size (" +
                                std::to_string(t.batch_size) + "), got " +
                                std::to_string(t.grad_accum));
  if (t.min_lr > t.lr)
    throw std::invalid_argument("train.min_lr: must be <= train.lr (" + format_double(t.lr) +
                                "), got " + format_double(t.min_lr));
  const bool cuda_index = t.device.rfind("cuda:", 0) == 0 && t.device.size() > 5 &&
                          t.device.find_first_not_of("0123456789", 5) == std::string::npos;
  if (t.device != "auto" && t.device != "cpu" && t.device != "cuda" && !cuda_index)
    throw std::invalid_argument("train.device: must be auto, cpu, cuda or cuda:N, got '" +
                                t.device + "'");
  if (t.warmup_steps > t.steps)
    throw std::invalid_argument("train.warmup_steps: must be <= train.steps (" +
                                std::to_string(t.steps) + "), got " +
                                std::to_string(t.warmup_steps));
}

}  // namespace

void check_values(const Config& config) {
  for (const Field& field : fields()) check_field(field, config);
  check_relations(config);
}

void validate(Config& config) {
  check_values(config);

  // The dataset name is known to be valid here. The shape is resolved once, here: a named
  // dataset's own, or an `images` folder's packed header (unless the config already carries it,
  // as a run's config.yaml and its checkpoints do).
  if (config.data.dir.empty()) config.data.dir = data::default_dir(config.data.dataset);
  const data::ImageShape shape = data::resolve_shape(config.data);
  const int64_t row = shape.width * shape.channels;
  attention::AttentionOptions& a = config.model.attention;
  if (a.block == 0) a.block = row;
  if (a.row_len == 0) a.row_len = row;
  attention::validate(a, shape.length());
}

}  // namespace combiner::config
