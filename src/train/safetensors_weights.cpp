// Export goes through load_model, so the file holds exactly what combiner-eval would evaluate;
// loading checks every tensor against a model built from the file's own config before copying.
#include "train/safetensors_weights.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "train/checkpoint.h"
#include "util/safetensors.h"

namespace combiner::train {

namespace {

std::string st_shape_text(c10::IntArrayRef sizes) {
  std::ostringstream s;
  s << sizes;
  return s.str();
}

// The problems of a list, one line: the first 8 and how many more.
std::string first_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (size_t i = 0; i < problems.size() && i < 8; ++i) out += (i ? "; " : "") + problems[i];
  if (problems.size() > 8) out += "; and " + std::to_string(problems.size() - 8) + " more";
  return out;
}

}  // namespace

bool is_safetensors_path(const std::string& path) {
  return std::filesystem::path(path).extension() == ".safetensors";
}

ExportSummary export_safetensors(const std::string& checkpoint_path,
                                 const std::string& out_path,
                                 const ExportOptions& options) {
  if (options.dtype != torch::kFloat && options.dtype != torch::kBFloat16)
    throw std::invalid_argument("--dtype: expected float32 or bfloat16");
  std::error_code ec;
  if (!options.force && std::filesystem::exists(out_path, ec))
    throw std::invalid_argument("--out: '" + out_path + "' exists; pass --force to replace it");
  const LoadedModel loaded = load_model(checkpoint_path, {}, options.ema);
  util::NamedTensorList tensors;
  ExportSummary summary;
  for (auto& [name, tensor] : capture_model(*loaded.model)) {
    const torch::Tensor t = tensor.detach();
    tensors.emplace_back(name, t.is_floating_point() ? t.to(options.dtype) : t);
    summary.parameters += t.numel();
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"config", config::to_yaml(loaded.config)},
      {"step", std::to_string(loaded.step)},
      {"weights", loaded.weights},
      {"dtype", options.dtype == torch::kFloat ? "float32" : "bfloat16"},
  };
  util::save_safetensors(out_path, tensors, metadata);
  summary.tensors = static_cast<int64_t>(tensors.size());
  summary.bytes = std::filesystem::file_size(out_path, ec);
  summary.step = loaded.step;
  summary.weights = loaded.weights;
  return summary;
}

LoadedModel load_safetensors_model(const std::string& path,
                                   const std::vector<std::string>& overrides,
                                   bool ema) {
  if (ema)
    throw std::runtime_error(path +
                             ": --ema: a safetensors file holds one set of weights (export the "
                             "moving average with combiner-export --ema)");
  const util::Safetensors file = util::load_safetensors(path);
  const auto config_yaml = file.metadata.find("config");
  if (config_yaml == file.metadata.end())
    throw std::runtime_error(path +
                             ": no \"config\" in the safetensors __metadata__, so the model's "
                             "architecture is unknown (write the file with combiner-export)");
  LoadedModel loaded;
  loaded.config = config::parse_config(config_yaml->second, path + " (config)");
  for (const auto& assignment : overrides) config::apply_override(loaded.config, assignment);
  config::validate(loaded.config);
  loaded.model = model::ImageTransformer(model::TransformerOptions::from_config(loaded.config));

  std::map<std::string, torch::Tensor> saved(file.tensors.begin(), file.tensors.end());
  std::vector<std::string> problems;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (auto& [name, target] : capture_model(*loaded.model)) {
    const auto it = saved.find(name);
    if (it == saved.end()) {
      problems.push_back("tensor '" + name + "' is missing");
      continue;
    }
    const torch::Tensor& value = it->second;
    const char* dtype = util::safetensors_dtype_name(value.scalar_type());
    const bool dtype_ok = target.is_floating_point() ? (value.scalar_type() == torch::kFloat ||
                                                        value.scalar_type() == torch::kBFloat16)
                                                     : value.scalar_type() == target.scalar_type();
    if (!dtype_ok)
      problems.push_back("tensor '" + name + "' has dtype " + (dtype ? dtype : "?") +
                         ", expected " +
                         (target.is_floating_point()
                              ? std::string("F32 or BF16")
                              : std::string(util::safetensors_dtype_name(target.scalar_type()))));
    else if (value.sizes() != target.sizes())
      problems.push_back("tensor '" + name + "' has shape " + st_shape_text(value.sizes()) +
                         ", the config's model expects " + st_shape_text(target.sizes()));
    else
      copies.emplace_back(target, value);
    saved.erase(it);
  }
  for (const auto& [name, _] : saved)
    problems.push_back("tensor '" + name + "' is not in the model");
  if (!problems.empty())
    throw std::runtime_error(
        path + ": does not match the model of its config: " + first_problems(problems));
  {
    torch::NoGradGuard no_grad;
    for (auto& [target, value] : copies) target.copy_(value.to(target.scalar_type()));
  }
  // What the tensors cannot show (a parameter-free variant, heads, block, row_len) against
  // --set overrides of the saved config.
  check_same_architecture(config_yaml->second, loaded.config, path);
  const auto step = file.metadata.find("step");
  try {
    loaded.step = step == file.metadata.end() ? 0 : std::stoll(step->second);
  } catch (const std::exception&) {
    throw std::runtime_error(path + ": __metadata__ \"step\" is not an integer: '" + step->second +
                             "'");
  }
  const auto weights = file.metadata.find("weights");
  loaded.weights = weights == file.metadata.end() ? "model" : weights->second;
  loaded.model->eval();
  return loaded;
}

}  // namespace combiner::train
