#include "train/model_loading.h"

#include "train/checkpoint.h"

namespace combiner::train {

LoadedModel load_model(const std::string& checkpoint_path,
                       const std::vector<std::string>& overrides) {
  const auto checkpoint = load_checkpoint(checkpoint_path);
  LoadedModel loaded;
  loaded.config = config::parse_config(checkpoint.config_yaml, checkpoint_path + " (config)");
  for (const auto& assignment : overrides) config::apply_override(loaded.config, assignment);
  config::validate(loaded.config);
  loaded.model = model::ImageTransformer(model::TransformerOptions::from_config(loaded.config));
  restore_model(*loaded.model, checkpoint.model, checkpoint_path);
  loaded.model->eval();
  loaded.step = checkpoint.step;
  return loaded;
}

}  // namespace combiner::train
