// The archive read with LibTorch's torch::serialize::InputArchive (a TorchScript module: the
// checkpoint's CRC has vouched for its bytes), its layout walked here instead of by
// Optimizer::load(): "pytorch_version" ("1.5.0" in every LibTorch so far), "param_groups"
// (param_groups/size, then per group params/size and params/<i>: the state key of parameter i)
// and "state" (one sub-archive per key: step, exp_avg, exp_avg_sq, max_exp_avg_sq when amsgrad).
#include "train/optimizer_state.h"

#include <torch/version.h>

#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace combiner::train {

namespace optimizer_state_detail {

using torch::serialize::InputArchive;

struct Refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

c10::IValue value_at(InputArchive& archive, const std::string& key, const std::string& where) {
  c10::IValue value;
  if (!archive.try_read(key, value)) throw Refusal(where + " has no '" + key + "'");
  return value;
}

InputArchive archive_at(InputArchive& archive, const std::string& key, const std::string& where) {
  InputArchive nested;
  if (!archive.try_read(key, nested)) throw Refusal(where + " has no '" + key + "'");
  return nested;
}

int64_t count_at(InputArchive& archive, const std::string& key, const std::string& where) {
  const auto value = value_at(archive, key, where);
  if (!value.isTensor() || value.toTensor().numel() != 1 || value.toTensor().is_floating_point())
    throw Refusal(where + "'s '" + key + "' is not an integer");
  return value.toTensor().item<int64_t>();
}

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

// A moment of `parameter` from its state archive: a tensor of the parameter's shape and dtype.
torch::Tensor moment(InputArchive& state,
                     const std::string& key,
                     const torch::Tensor& parameter,
                     const std::string& where) {
  const auto value = value_at(state, key, where);
  if (!value.isTensor()) throw Refusal(where + "'s '" + key + "' is not a tensor");
  const auto t = value.toTensor();
  if (t.sizes() != parameter.sizes() || t.scalar_type() != parameter.scalar_type())
    throw Refusal(where + "'s '" + key + "' is " + shape_text(t) + ", its parameter is " +
                  shape_text(parameter));
  return t;
}

using States =
    std::vector<std::pair<OptimizerStateKey, std::unique_ptr<torch::optim::AdamWParamState>>>;

// Every parameter's saved state, built before anything in the optimizer changes.
States read_states(torch::optim::AdamW& optimizer, InputArchive& archive) {
  const auto version = value_at(archive, "pytorch_version", "the archive");
  if (!version.isString() || version.toStringRef() != "1.5.0")
    throw Refusal("unknown torch::optim format '" +
                  (version.isString() ? version.toStringRef() : std::string("?")) +
                  "' (every LibTorch so far writes '1.5.0')");
  auto groups = archive_at(archive, "param_groups", "the archive");
  auto saved = archive_at(archive, "state", "the archive");
  auto& ours = optimizer.param_groups();
  const int64_t group_count = count_at(groups, "param_groups/size", "param_groups");
  if (group_count != static_cast<int64_t>(ours.size()))
    throw Refusal("it holds " + std::to_string(group_count) + " parameter groups, this run's " +
                  "optimizer has " + std::to_string(ours.size()));
  States states;
  std::set<std::string> keys;  // a key listed twice would share its moments between parameters
  for (size_t g = 0; g < ours.size(); ++g) {
    const std::string group_name = "param_groups/" + std::to_string(g);
    auto group = archive_at(groups, group_name, "param_groups");
    const auto& params = ours[g].params();
    const int64_t count = count_at(group, "params/size", group_name);
    if (count != static_cast<int64_t>(params.size()))
      throw Refusal(group_name + " holds " + std::to_string(count) + " parameters, this run's " +
                    "has " + std::to_string(params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string where = group_name + " parameter " + std::to_string(i);
      const auto key = value_at(group, "params/" + std::to_string(i), group_name);
      if (!key.isString()) throw Refusal(where + ": its state key is not text");
      if (!keys.insert(key.toStringRef()).second)
        throw Refusal(where + ": its state key '" + key.toStringRef() + "' is listed twice");
      InputArchive state;
      if (!saved.try_read(key.toStringRef(), state)) continue;  // no update touched it yet
      const auto step = value_at(state, "step", where);
      if (!step.isInt() || step.toInt() < 0)
        throw Refusal(where + "'s step count is not a non-negative integer");
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(step.toInt());
      s->exp_avg(moment(state, "exp_avg", params[i], where));
      s->exp_avg_sq(moment(state, "exp_avg_sq", params[i], where));
      c10::IValue max;
      if (state.try_read("max_exp_avg_sq", max) && !max.isNone())
        s->max_exp_avg_sq(moment(state, "max_exp_avg_sq", params[i], where));
      states.emplace_back(state_key(params[i]), std::move(s));
    }
  }
  return states;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace optimizer_state_detail

std::string torch_build_name() {
  return std::string("LibTorch ") + TORCH_VERSION;
}

void restore_adamw_state(torch::optim::AdamW& optimizer,
                         const std::vector<char>& bytes,
                         const std::string& source) {
  using namespace optimizer_state_detail;
  States states;
  try {
    InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    states = read_states(optimizer, archive);
  } catch (const Refusal& e) {
    throw std::runtime_error(source + ": optimizer state: " + e.what());
  } catch (const c10::Error& e) {
    throw std::runtime_error(source + ": optimizer state: not a torch::optim archive this build " +
                             "reads (" + first_line(e.what_without_backtrace()) + ")");
  }
  optimizer.state().clear();
  for (auto& [key, state] : states) optimizer.state()[key] = std::move(state);
}

void move_adamw_state(torch::optim::AdamW& optimizer, const torch::Device& device) {
  for (auto& entry : optimizer.state()) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    s.exp_avg(s.exp_avg().to(device));
    s.exp_avg_sq(s.exp_avg_sq().to(device));
    if (s.max_exp_avg_sq().defined()) s.max_exp_avg_sq(s.max_exp_avg_sq().to(device));
  }
}

std::vector<char> adamw_state_bytes(torch::optim::AdamW& optimizer) {
  struct Kept {
    torch::optim::AdamWParamState* state;
    torch::Tensor exp_avg, exp_avg_sq;
  };
  std::vector<Kept> kept;
  for (auto& entry : optimizer.state()) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    kept.push_back({&s, s.exp_avg(), s.exp_avg_sq()});
    s.exp_avg(s.exp_avg().cpu());
    s.exp_avg_sq(s.exp_avg_sq().cpu());
  }
  const auto put_back = [&] {
    for (auto& k : kept) {
      k.state->exp_avg(k.exp_avg);
      k.state->exp_avg_sq(k.exp_avg_sq);
    }
  };
  try {
    auto bytes = capture_optimizer(optimizer);
    put_back();
    return bytes;
  } catch (...) {
    put_back();
    throw;
  }
}

}  // namespace combiner::train
