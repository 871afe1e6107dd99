#include "train/model_loading.h"

#include "train/checkpoint.h"
#include "train/safetensors_weights.h"

namespace combiner::train {

LoadedModel load_model(const std::string& checkpoint_path,
                       const std::vector<std::string>& overrides,
                       bool ema) {
  if (is_safetensors_path(checkpoint_path))
    return load_safetensors_model(checkpoint_path, overrides, ema);
  const auto checkpoint = load_checkpoint(checkpoint_path);
  LoadedModel loaded;
  loaded.config = config::parse_config(checkpoint.config_yaml, checkpoint_path + " (config)");
  for (const auto& assignment : overrides) config::apply_override(loaded.config, assignment);
  config::validate(loaded.config);
  loaded.model = model::ImageTransformer(model::TransformerOptions::from_config(loaded.config));
  if (ema && checkpoint.ema.empty())
    throw std::runtime_error(checkpoint_path +
                             ": --ema: this checkpoint holds no EMA weights (trained with "
                             "train.ema_decay = 0)");
  restore_model(*loaded.model, ema ? checkpoint.ema : checkpoint.model, checkpoint_path);
  // After the tensors, whose message names them: what the tensors cannot show (the variant of a
  // parameter-free attention, heads, block, row_len) is compared key by key.
  check_same_architecture(checkpoint, loaded.config, checkpoint_path);
  loaded.weights = ema ? "ema" : "model";
  loaded.model->eval();
  loaded.step = checkpoint.step;
  return loaded;
}

}  // namespace combiner::train
