#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace combiner::train {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'C', 'M', 'B', 'C', 'K', 'P', 'T', '1'};
constexpr int64_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = sizeof(kMagic) + sizeof(uint64_t) + sizeof(uint32_t);

uint32_t crc_of(const std::vector<char>& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib's crc32 takes a uInt length: feed large payloads in chunks.
  for (size_t at = 0; at < bytes.size(); at += (1u << 30)) {
    const size_t n = std::min<size_t>(bytes.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

std::runtime_error bad_file(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": not a valid combiner checkpoint: " + what);
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
  state.insert("optimizer",
               torch::from_blob(const_cast<char*>(c.optimizer.data()),
                                {static_cast<int64_t>(c.optimizer.size())},
                                torch::kUInt8)
                   .clone());
  state.insert("rng_state", c.rng_state.defined() ? c.rng_state : torch::empty({0}, torch::kUInt8));
  c10::Dict<std::string, at::Tensor> ema;
  for (const auto& [name, tensor] : c.ema) ema.insert(name, tensor.detach().cpu());
  state.insert("ema", ema);
  const std::vector<char> payload = torch::pickle_save(state);

  const fs::path final_path(path);
  if (final_path.has_parent_path()) fs::create_directories(final_path.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw std::runtime_error(path + ": cannot write checkpoint: " + std::strerror(errno));
    const uint64_t size = payload.size();
    const uint32_t crc = crc_of(payload);
    bool ok = std::fwrite(kMagic, 1, sizeof(kMagic), f) == sizeof(kMagic) &&
              std::fwrite(&size, sizeof(size), 1, f) == 1 &&
              std::fwrite(&crc, sizeof(crc), 1, f) == 1 &&
              std::fwrite(payload.data(), 1, payload.size(), f) == payload.size();
    ok = (std::fflush(f) == 0) && ok;
    const int saved_errno = errno;
    std::fclose(f);
    if (!ok) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": writing checkpoint failed (" + std::strerror(saved_errno) +
                               "); the previous checkpoints are kept");
    }
  }
  fs::rename(tmp, final_path);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open checkpoint");
  char magic[sizeof(kMagic)];
  uint64_t size = 0;
  uint32_t crc = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&size), sizeof(size));
  in.read(reinterpret_cast<char*>(&crc), sizeof(crc));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
    throw bad_file(path, "bad header (expected the magic 'CMBCKPT1')");
  const auto file_size = fs::file_size(path);
  if (file_size != kHeaderBytes + size)
    throw bad_file(path,
                   "truncated or padded: header says " + std::to_string(kHeaderBytes + size) +
                       " bytes, file has " + std::to_string(file_size));
  std::vector<char> payload(size);
  in.read(payload.data(), static_cast<std::streamsize>(size));
  if (!in) throw bad_file(path, "could not read the payload");
  if (crc_of(payload) != crc) throw bad_file(path, "checksum mismatch (corrupt file)");

  Checkpoint c;
  try {
    auto state = torch::pickle_load(payload).toGenericDict();
    const int64_t version = state.at("format_version").toInt();
    if (version != kFormatVersion)
      throw bad_file(path,
                     "format version " + std::to_string(version) + ", this build reads " +
                         std::to_string(kFormatVersion));
    c.config_yaml = state.at("config_yaml").toStringRef();
    c.step = state.at("step").toInt();
    c.samples_seen = state.at("samples_seen").toInt();
    for (const auto& entry : state.at("model").toGenericDict())
      c.model.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    std::sort(c.model.begin(), c.model.end(), [](auto& a, auto& b) { return a.first < b.first; });
    if (state.contains("ema"))
      for (const auto& entry : state.at("ema").toGenericDict())
        c.ema.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    auto optimizer = state.at("optimizer").toTensor().contiguous();
    c.optimizer.assign(optimizer.data_ptr<uint8_t>(),
                       optimizer.data_ptr<uint8_t>() + optimizer.numel());
    c.rng_state = state.at("rng_state").toTensor();
  } catch (const c10::Error& e) {
    throw bad_file(path, std::string("unreadable state: ") + e.what_without_backtrace());
  }
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

std::vector<char> capture_optimizer(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  return {bytes.begin(), bytes.end()};
}

void restore_optimizer(torch::optim::Optimizer& optimizer, const std::vector<char>& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  archive.load_from(in);
  optimizer.load(archive);
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
