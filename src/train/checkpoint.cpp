// Checkpoint files: header (magic, payload size, CRC-32), then the torch::pickle_save archive
// of a str-keyed dict.
// Writing goes through util::write_file_atomic (temporary file, fsync, rename, folder fsync).
// Reading trusts nothing in the file: sizes are checked before allocating, and the state is
// read by the strict reader of data/torch_archive.h, not by LibTorch's unpickler.
#include "train/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "config/config.h"
#include "config/fields.h"
#include "config/scalar.h"
#include "data/torch_archive.h"
#include "train/optimizer_state.h"
#include "util/atomic_file.h"

namespace combiner::train {

namespace fs = std::filesystem;

namespace {

// torch::pickle_save's archive, the same bytes, handed to `sink` piece by piece instead of
// gathered in a vector: pickle_save's vector (grown by doubling) held up to twice the weights
// and AdamW moments on top of the training's own memory. Only the small pickle is buffered; the
// tensors' bytes go from the tensors to the sink.
using Sink = std::function<void(const char*, size_t)>;
void write_archive(const c10::IValue& state, const Sink& sink) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); });
  pickler.protocol();
  pickler.pushIValue(state);
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    sink(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors(
      "data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
}  // the writer's destructor writes the zip's end records

// The payload's size and CRC-32, as the header records them.
struct SizeCrc {
  uint64_t size = 0;
  uLong crc = crc32(0L, Z_NULL, 0);
  void add(const char* data, size_t size_in) {
    // zlib's crc32 takes a uInt length: feed large payloads in chunks.
    for (size_t at = 0; at < size_in; at += (1u << 30)) {
      const size_t n = std::min<size_t>(size_in - at, 1u << 30);
      crc = crc32(crc, reinterpret_cast<const Bytef*>(data + at), static_cast<uInt>(n));
    }
    size += size_in;
  }
};

constexpr char kMagic[8] = {'C', 'M', 'B', 'C', 'K', 'P', 'T', '1'};
constexpr int64_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = sizeof(kMagic) + sizeof(uint64_t) + sizeof(uint32_t);

uint32_t crc_of(const char* data, size_t size) {
  SizeCrc sum;
  sum.add(data, size);
  return static_cast<uint32_t>(sum.crc);
}

std::runtime_error bad_file(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": not a valid combiner checkpoint: " + what);
}

// The magic and the payload size of a checkpoint whose first bytes are data[0, size) and whose
// whole length is total.
void check_header(const char* data, size_t size, uint64_t total, const std::string& name) {
  if (size < kHeaderBytes || std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    throw bad_file(name, "bad header (expected the magic 'CMBCKPT1')");
  uint64_t payload = 0;
  std::memcpy(&payload, data + sizeof(kMagic), sizeof(payload));
  if (payload != total - kHeaderBytes)
    throw bad_file(name,
                   "truncated or padded: header says " +
                       (payload > total ? std::to_string(payload) + " payload bytes"
                                        : std::to_string(kHeaderBytes + payload) + " bytes") +
                       ", file has " + std::to_string(total));
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  c10::Dict<std::string, at::Tensor> model;
  for (const auto& [name, tensor] : c.model) model.insert(name, tensor.detach().cpu());
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("format_version", kFormatVersion);
  state.insert("config_yaml", c.config_yaml);
  state.insert("step", c.step);
  state.insert("samples_seen", c.samples_seen);
  state.insert("model", model);
  // A view of c.optimizer, which outlives the pickling: no copy of the AdamW moments.
  state.insert("optimizer",
               torch::from_blob(const_cast<char*>(c.optimizer.data()),
                                {static_cast<int64_t>(c.optimizer.size())},
                                torch::kUInt8));
  state.insert("rng_state", c.rng_state.defined() ? c.rng_state : torch::empty({0}, torch::kUInt8));
  c10::Dict<std::string, at::Tensor> ema;
  for (const auto& [name, tensor] : c.ema) ema.insert(name, tensor.detach().cpu());
  state.insert("ema", ema);
  state.insert("written_by", torch_build_name());

  const fs::path final_path(path);
  if (final_path.has_parent_path()) {
    std::error_code error;
    fs::create_directories(final_path.parent_path(), error);
    if (error)
      throw std::runtime_error(path + ": cannot create the checkpoint folder '" +
                               final_path.parent_path().string() + "': " + error.message());
  }
  // Two passes over the archive, holding no copy of it: the first for the header's size and
  // CRC, the second into the file, checked against the first.
  SizeCrc expected;
  write_archive(state, [&](const char* data, size_t size) { expected.add(data, size); });
  const uint64_t size = expected.size;
  const auto crc = static_cast<uint32_t>(expected.crc);
  try {
    util::write_file_atomic(path, [&](std::ostream& out) {
      out.write(kMagic, sizeof(kMagic));
      out.write(reinterpret_cast<const char*>(&size), sizeof(size));
      out.write(reinterpret_cast<const char*>(&crc), sizeof(crc));
      SizeCrc written;
      write_archive(state, [&](const char* data, size_t n) {
        written.add(data, n);
        out.write(data, static_cast<std::streamsize>(n));
      });
      if (written.size != expected.size || written.crc != expected.crc)
        throw std::runtime_error(path + ": the archive changed between its two passes");
    });
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("checkpoint: ") + e.what() +
                             "; the previous checkpoints are kept");
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open checkpoint: " + std::strerror(errno));
  std::error_code error;
  const uint64_t file_size = fs::file_size(path, error);
  if (error) throw std::runtime_error(path + ": cannot read checkpoint: " + error.message());
  // The header alone first: its size field is checked against the file before the payload is
  // allocated, so a damaged header cannot ask for more memory than the file holds.
  std::vector<char> bytes(std::min<uint64_t>(file_size, kHeaderBytes));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  check_header(bytes.data(), bytes.size(), file_size, path);
  bytes.resize(file_size);
  in.read(bytes.data() + kHeaderBytes, static_cast<std::streamsize>(file_size - kHeaderBytes));
  if (static_cast<uint64_t>(in.gcount()) != file_size - kHeaderBytes)
    throw bad_file(path, "could not read the payload");
  return parse_checkpoint(bytes.data(), bytes.size(), path);
}

Checkpoint parse_checkpoint(const char* data, size_t size, const std::string& name) {
  check_header(data, size, size, name);
  uint32_t crc = 0;
  std::memcpy(&crc, data + sizeof(kMagic) + sizeof(uint64_t), sizeof(crc));
  if (crc_of(data + kHeaderBytes, size - kHeaderBytes) != crc)
    throw bad_file(name, "checksum mismatch (corrupt file)");

  // Read strictly (data/torch_archive.h), not with torch::pickle_load: a crafted state would
  // crash LibTorch 1.13's unpickler.
  std::shared_ptr<const data::PickleValue> state;
  try {
    state = data::read_torch_archive(
        reinterpret_cast<const uint8_t*>(data) + kHeaderBytes, size - kHeaderBytes, "state");
  } catch (const std::runtime_error& e) {
    throw bad_file(name, e.what());
  }
  using Value = data::PickleValue;
  auto field = [&](const char* key, Value::Kind kind, const char* what) -> const Value& {
    const auto v = data::dict_entry(*state, key);
    if (!v || v->kind != kind)
      throw bad_file(name, std::string("'") + key + "' is missing or not " + what);
    return *v;
  };
  // In the order saved; the model's are sorted by name, as they always were.
  auto tensors = [&](const char* key) {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    const auto& items = field(key, Value::kDict, "a dict").items;
    for (size_t i = 0; i < items.size(); i += 2) {
      if (items[i + 1]->kind != Value::kTensor)
        throw bad_file(name, std::string("'") + key + "." + items[i]->text + "' is not a tensor");
      out.emplace_back(items[i]->text, items[i + 1]->tensor);
    }
    return out;
  };
  Checkpoint c;
  if (const auto writer = data::dict_entry(*state, "written_by");
      writer && writer->kind == Value::kStr)
    c.written_by = writer->text;
  const int64_t version = field("format_version", Value::kInt, "an integer").number;
  if (version != kFormatVersion)
    throw bad_file(name,
                   "format version " + std::to_string(version) +
                       (c.written_by.empty() ? "" : " (written by " + c.written_by + ")") +
                       ", this build reads " + std::to_string(kFormatVersion) +
                       ": read it with the combiner build that wrote it");
  c.config_yaml = field("config_yaml", Value::kStr, "a string").text;
  c.step = field("step", Value::kInt, "an integer").number;
  c.samples_seen = field("samples_seen", Value::kInt, "an integer").number;
  c.model = tensors("model");
  std::sort(c.model.begin(), c.model.end(), [](auto& a, auto& b) { return a.first < b.first; });
  if (data::dict_entry(*state, "ema")) c.ema = tensors("ema");
  const torch::Tensor optimizer = field("optimizer", Value::kTensor, "a tensor").tensor;
  if (optimizer.scalar_type() != torch::kUInt8 || optimizer.dim() != 1)
    throw bad_file(name, "'optimizer' is not a 1-d uint8 tensor");
  const torch::Tensor bytes = optimizer.contiguous();
  c.optimizer.assign(bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + bytes.numel());
  c.rng_state = field("rng_state", Value::kTensor, "a tensor").tensor;
  return c;
}

std::vector<std::pair<std::string, torch::Tensor>> capture_model(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void restore_model(torch::nn::Module& model,
                   const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                   const std::string& source) {
  std::map<std::string, torch::Tensor> saved(tensors.begin(), tensors.end());
  std::vector<std::string> problems;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (auto& [name, target] : capture_model(model)) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      problems.push_back("missing " + name);
      continue;
    }
    if (it->second.sizes() != target.sizes()) {
      std::ostringstream s;
      s << name << " has shape " << it->second.sizes() << ", model expects " << target.sizes();
      problems.push_back(s.str());
    } else {
      copies.emplace_back(target, it->second);
    }
    saved.erase(it);
  }
  for (const auto& [name, _] : saved) problems.push_back("unexpected " + name);
  if (!problems.empty()) {
    std::string msg = source +
                      ": checkpoint does not match the model (another architecture or "
                      "attention variant?): ";
    for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += (i ? "; " : "") + problems[i];
    if (problems.size() > 8) msg += "; and " + std::to_string(problems.size() - 8) + " more";
    throw std::runtime_error(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(value);
}

void check_same_architecture(const Checkpoint& checkpoint,
                             const config::Config& config,
                             const std::string& source) {
  check_same_architecture(checkpoint.config_yaml, config, source);
}

void check_same_architecture(const std::string& saved_config_yaml,
                             const config::Config& config,
                             const std::string& source) {
  config::Config saved;
  try {
    saved = config::parse_config(saved_config_yaml, source + " (config)");
    config::validate(saved);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": the checkpoint's config does not read: " + e.what());
  }
  std::string differences;
  for (const auto& field : config::fields()) {
    const bool architecture = field.path == "data.dataset" ||
                              (field.path.rfind("model.", 0) == 0 && field.path != "model.dropout");
    if (!architecture) continue;
    const std::string was = config::format_value(field.get(saved));
    const std::string is = config::format_value(field.get(config));
    if (was != is)
      differences += (differences.empty() ? "" : "; ") + field.path + " is " + was +
                     " in the checkpoint, " + is + " here";
  }
  if (!differences.empty())
    throw std::runtime_error(source +
                             ": checkpoint is from another architecture or attention "
                             "variant: " +
                             differences);
}

std::vector<char> capture_optimizer(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  // Straight into a vector reserved for AdamW's moments (amsgrad's third included): a stream,
  // its string and a copy of that held them 3 times, each grown by doubling.
  size_t expected = size_t{1} << 20;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) expected += 3 * p.nbytes() + 4096;
  std::vector<char> bytes;
  bytes.reserve(expected);
  archive.save_to([&bytes](const void* data, size_t size) {
    const auto* first = static_cast<const char*>(data);
    bytes.insert(bytes.end(), first, first + size);
    return size;
  });
  return bytes;
}

void restore_optimizer(torch::optim::AdamW& optimizer,
                       const Checkpoint& checkpoint,
                       const std::string& path) {
  try {
    restore_adamw_state(optimizer, checkpoint.optimizer, path);
  } catch (const std::runtime_error& e) {
    const std::string writer = checkpoint.written_by.empty()
                                   ? "a combiner that did not record its LibTorch"
                                   : checkpoint.written_by;
    const bool other = writer != torch_build_name();
    throw std::runtime_error(
        std::string(e.what()) + " (the checkpoint was written by " + writer + ", this build runs " +
        torch_build_name() + "); " +
        (other ? "resume it with the build that wrote it, or " : "the file is damaged: ") +
        "resume from an earlier checkpoint of the run (move this one out of its checkpoints/ "
        "folder)");
  }
}

std::string checkpoint_path(const std::string& out_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%08lld.ckpt", static_cast<long long>(step));
  return (fs::path(out_dir) / "checkpoints" / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& out_dir) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && entry.path().extension() == ".ckpt")
      out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort by step
  return out;
}

void prune_checkpoints(const std::string& out_dir, int64_t keep) {
  auto all = list_checkpoints(out_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i]);
}

}  // namespace combiner::train
