// The config key table. Each row names a key path once, binds it to its struct member through a
// generic accessor lambda (works on const and non-const Config), and states its range and
// meaning. Cross-field rules (grad_accum divides batch_size, ...) live in validate.cpp.
#include "config/fields.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "attention/attention.h"
#include "config/scalar.h"
#include "data/dataset.h"

namespace combiner::config {
namespace {

template <class T>
constexpr FieldType type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return FieldType::kInt;
  if constexpr (std::is_same_v<T, double>) return FieldType::kFloat;
  if constexpr (std::is_same_v<T, bool>) return FieldType::kBool;
  if constexpr (std::is_same_v<T, std::string>) return FieldType::kString;
}

// `access` is a generic lambda `[](auto& c) -> auto& { return c.section.member; }`.
template <class Access>
Field make(std::string path, Access access, std::string meaning) {
  using T = std::decay_t<decltype(access(std::declval<Config&>()))>;
  static_assert(std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                    std::is_same_v<T, bool> || std::is_same_v<T, std::string>,
                "config fields are int64_t, double, bool or std::string");
  Field field;
  field.path = std::move(path);
  field.type = type_of<T>();
  field.meaning = std::move(meaning);
  field.get = [access](const Config& c) { return Value(std::in_place_type<T>, access(c)); };
  field.set = [access](Config& c, const Value& v) { access(c) = std::get<T>(v); };
  return field;
}

std::vector<Field> build_table() {
  // clang-format off
  return {
    make("data.dataset", [](auto& c) -> auto& { return c.data.dataset; },
         "dataset name").one_of(&data::dataset_names),
    make("data.dir", [](auto& c) -> auto& { return c.data.dir; },
         "folder of the dataset's files; \"\" = the dataset's default folder"),
    make("data.val_size", [](auto& c) -> auto& { return c.data.val_size; },
         "images held out from the end of the training set for validation").at_least(0),
    make("data.height", [](auto& c) -> auto& { return c.data.height; },
         "image height; 0 = the dataset's (images: the packed header's)").at_least(0).at_most(1024),
    make("data.width", [](auto& c) -> auto& { return c.data.width; },
         "image width; 0 = the dataset's (images: the packed header's)").at_least(0).at_most(1024),
    make("data.channels", [](auto& c) -> auto& { return c.data.channels; },
         "channels per pixel; 0 = the dataset's (images: the packed header's)").at_least(0).at_most(4),
    make("data.bits", [](auto& c) -> auto& { return c.data.bits; },
         "bits per subpixel, 1 to 8 (2^bits values); 0 = the dataset's (images: the packed "
         "header's)").at_least(0).at_most(8),

    make("model.layers", [](auto& c) -> auto& { return c.model.layers; },
         "transformer blocks").at_least(1).at_most(1024),
    make("model.width", [](auto& c) -> auto& { return c.model.width; },
         "residual stream width (d_model); divisible by model.heads").above(0),
    make("model.heads", [](auto& c) -> auto& { return c.model.heads; },
         "attention heads; head dim = width / heads").above(0),
    make("model.mlp_ratio", [](auto& c) -> auto& { return c.model.mlp_ratio; },
         "MLP hidden width = mlp_ratio * width").above(0),
    make("model.dropout", [](auto& c) -> auto& { return c.model.dropout; },
         "dropout on attention output, MLP output and embeddings").at_least(0).below(1),
    make("model.attention.type", [](auto& c) -> auto& { return c.model.attention.type; },
         "attention variant").one_of(&attention::variant_names),
    make("model.attention.block", [](auto& c) -> auto& { return c.model.attention.block; },
         "block size of the fixed layouts; 0 = one image row (width * channels)").at_least(0),
    make("model.attention.row_len", [](auto& c) -> auto& { return c.model.attention.row_len; },
         "row length of the axial layouts; 0 = one image row (width * channels)").at_least(0),
    make("model.attention.abstraction",
         [](auto& c) -> auto& { return c.model.attention.abstraction; },
         "span summary of the Combiner variants").one_of(&attention::abstraction_names),

    make("train.steps", [](auto& c) -> auto& { return c.train.steps; },
         "optimizer updates").above(0),
    make("train.batch_size", [](auto& c) -> auto& { return c.train.batch_size; },
         "images per update (all micro-batches together)").above(0),
    make("train.grad_accum", [](auto& c) -> auto& { return c.train.grad_accum; },
         "micro-batches per update; divides batch_size").above(0),
    make("train.lr", [](auto& c) -> auto& { return c.train.lr; },
         "peak learning rate, reached at the end of warmup").above(0),
    make("train.warmup_steps", [](auto& c) -> auto& { return c.train.warmup_steps; },
         "linear warmup steps from 0 to lr; at most steps").at_least(0),
    make("train.min_lr", [](auto& c) -> auto& { return c.train.min_lr; },
         "cosine decay floor, reached at the last step; at most lr").at_least(0),
    make("train.weight_decay", [](auto& c) -> auto& { return c.train.weight_decay; },
         "AdamW decoupled weight decay (matrices only)").at_least(0),
    make("train.beta1", [](auto& c) -> auto& { return c.train.beta1; },
         "AdamW first-moment decay").at_least(0).below(1),
    make("train.beta2", [](auto& c) -> auto& { return c.train.beta2; },
         "AdamW second-moment decay").at_least(0).below(1),
    make("train.grad_clip", [](auto& c) -> auto& { return c.train.grad_clip; },
         "max global gradient norm; 0 = no clipping").at_least(0),
    make("train.max_nonfinite_steps",
         [](auto& c) -> auto& { return c.train.max_nonfinite_steps; },
         "updates with a NaN/inf loss or gradient are skipped; this many in a row stop the run")
        .above(0),
    make("train.ema_decay", [](auto& c) -> auto& { return c.train.ema_decay; },
         "decay of the weights' exponential moving average (e.g. 0.999); 0 = none")
        .at_least(0).below(1),
    make("train.seed", [](auto& c) -> auto& { return c.train.seed; },
         "seed for parameters, data order and dropout").at_least(0),
    make("train.threads", [](auto& c) -> auto& { return c.train.threads; },
         "LibTorch intra-op threads; 0 = every core").at_least(0),
    make("train.out_dir", [](auto& c) -> auto& { return c.train.out_dir; },
         "run folder: checkpoints, metrics.jsonl, config.yaml").required(),
    make("train.checkpoint_every", [](auto& c) -> auto& { return c.train.checkpoint_every; },
         "steps between checkpoints; 0 = only at the end").at_least(0),
    make("train.keep_checkpoints", [](auto& c) -> auto& { return c.train.keep_checkpoints; },
         "newest checkpoints kept in out_dir").at_least(1),
    make("train.eval_every", [](auto& c) -> auto& { return c.train.eval_every; },
         "steps between validation passes; 0 = never during training").at_least(0),
    make("train.eval_batch_size", [](auto& c) -> auto& { return c.train.eval_batch_size; },
         "images per evaluation batch; 0 = batch_size").at_least(0),
    make("train.log_every", [](auto& c) -> auto& { return c.train.log_every; },
         "steps between console lines").above(0),
    make("train.final_test", [](auto& c) -> auto& { return c.train.final_test; },
         "evaluate test bits/dim after the last step"),
    make("train.sample_every", [](auto& c) -> auto& { return c.train.sample_every; },
         "steps between sample grids in out_dir; 0 = never").at_least(0),
    make("train.sample_count", [](auto& c) -> auto& { return c.train.sample_count; },
         "images in each sample grid").above(0),
    make("train.tensorboard", [](auto& c) -> auto& { return c.train.tensorboard; },
         "TensorBoard event files in out_dir/tb/: scalars, sample grids, the config"),
    make("train.activation_checkpointing",
         [](auto& c) -> auto& { return c.train.activation_checkpointing; },
         "recompute each block's activations in backward: less memory, ~1.3x compute; auto = "
         "the fastest of nothing, the MLP halves (recompute_mlp) or whole blocks recomputed "
         "whose step, measured at the start, fits the device's free memory")
        .one_of(&activation_checkpointing_names).or_bool(),
    make("train.recompute_mlp", [](auto& c) -> auto& { return c.train.recompute_mlp; },
         "recompute each block's MLP half (LayerNorm, both linears, GELU, dropout) in backward, "
         "keeping the attention half's activations; moot with activation_checkpointing true; "
         "with auto, at least this is recomputed"),
    make("train.precision", [](auto& c) -> auto& { return c.train.precision; },
         "block math: float32, or bfloat16 autocast (fp32 weights, softmax, logits), or auto "
         "(bfloat16 where the model runs on CUDA, float32 on the CPU)")
        .one_of(&precision_names),
    make("train.attention_path", [](auto& c) -> auto& { return c.train.attention_path; },
         "auto (fused CUDA kernels where they apply: attention and LayerNorm), composed "
         "(always the LibTorch path) or fused (always the fused path; the kernels' slow CPU "
         "model on the CPU)")
        .one_of(&attention_path_names),
    make("train.cuda_graph", [](auto& c) -> auto& { return c.train.cuda_graph; },
         "auto (on CUDA, the step captured once as a CUDA graph and replayed, where the run "
         "allows it) or off (every step launched op by op)")
        .one_of(&cuda_graph_names),
    make("train.device", [](auto& c) -> auto& { return c.train.device; },
         "auto (cuda if LibTorch sees a GPU, else cpu), cpu, cuda or cuda:N").required(),
    make("train.dist_timeout_s", [](auto& c) -> auto& { return c.train.dist_timeout_s; },
         "seconds a collective waits for the other ranks before the run stops").above(0),
  };
  // clang-format on
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Bounds in the table are whole numbers, printed as such: "in [0, 1)" even for float keys.
std::string bound_text(double v) {
  return v == std::floor(v) ? std::to_string(static_cast<int64_t>(v)) : format_double(v);
}

// "in [0, 1)", "> 0", ">= 1", "<= 1024".
std::string range_text(const Field& f) {
  if (f.min && f.max)
    return std::string("in ") + (f.min->inclusive ? "[" : "(") + bound_text(f.min->value) + ", " +
           bound_text(f.max->value) + (f.max->inclusive ? "]" : ")");
  if (f.min) return (f.min->inclusive ? ">= " : "> ") + bound_text(f.min->value);
  return (f.max->inclusive ? "<= " : "< ") + bound_text(f.max->value);
}

bool in_range(const Field& f, double v) {
  if (f.min && (f.min->inclusive ? v < f.min->value : v <= f.min->value)) return false;
  if (f.max && (f.max->inclusive ? v > f.max->value : v >= f.max->value)) return false;
  return true;
}

}  // namespace

const char* type_description(FieldType type) {
  switch (type) {
    case FieldType::kInt:
      return "an integer";
    case FieldType::kFloat:
      return "a float";
    case FieldType::kBool:
      return "a bool (true or false)";
    case FieldType::kString:
      return "a string";
  }
  return "a value";
}

std::string range_description(const Field& field) {
  return field.min || field.max ? range_text(field) : "";
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = build_table();
  return table;
}

const Field* find_field(const std::string& path) {
  for (const auto& f : fields())
    if (f.path == path) return &f;
  return nullptr;
}

bool is_section(const std::string& path) {
  if (path.empty()) return true;
  for (const auto& f : fields())
    if (f.path.size() > path.size() && f.path.compare(0, path.size(), path) == 0 &&
        f.path[path.size()] == '.')
      return true;
  return false;
}

std::vector<std::string> section_keys(const std::string& section) {
  const std::string prefix = section.empty() ? "" : section + ".";
  std::vector<std::string> keys;
  for (const auto& f : fields()) {
    if (f.path.compare(0, prefix.size(), prefix) != 0) continue;
    std::string child = f.path.substr(prefix.size());
    child = child.substr(0, child.find('.'));
    if (std::find(keys.begin(), keys.end(), child) == keys.end()) keys.push_back(child);
  }
  return keys;
}

void check_field(const Field& field, const Config& config) {
  const Value value = field.get(config);
  const std::string got = ", got " + format_value(value);
  if (field.choices) {
    const auto& names = field.choices();
    const auto& s = std::get<std::string>(value);
    bool found = false;
    for (const auto& n : names) found = found || n == s;
    if (!found) throw std::invalid_argument(field.path + ": must be one of " + join(names) + got);
  }
  if (field.non_empty && std::get<std::string>(value).empty())
    throw std::invalid_argument(field.path + ": must not be empty");
  if (field.min || field.max) {
    const double v = field.type == FieldType::kInt ? static_cast<double>(std::get<int64_t>(value))
                                                   : std::get<double>(value);
    if (!in_range(field, v))
      throw std::invalid_argument(field.path + ": must be " + range_text(field) + got);
  }
}

std::string precision_on(const TrainConfig& t, bool cuda) {
  if (t.precision != "auto") return t.precision;
  return cuda ? "bfloat16" : "float32";
}

const std::vector<std::string>& activation_checkpointing_names() {
  static const std::vector<std::string> names = {"false", "true", "auto"};
  return names;
}

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"float32", "bfloat16", "auto"};
  return names;
}

const std::vector<std::string>& attention_path_names() {
  static const std::vector<std::string> names = {"auto", "composed", "fused"};
  return names;
}

const std::vector<std::string>& cuda_graph_names() {
  static const std::vector<std::string> names = {"auto", "off"};
  return names;
}

}  // namespace combiner::config
