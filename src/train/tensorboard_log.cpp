// TensorBoardLog: util::EventFile behind a catch that turns the first I/O error into one warning.
#include "train/tensorboard_log.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace combiner::train {

namespace fs = std::filesystem;

std::string tensorboard_folder(const std::string& out_dir) {
  return (fs::path(out_dir) / "tb").string();
}

std::optional<std::string> run_tensorboard_folder(const std::string& checkpoint_path) {
  const fs::path folder = fs::path(checkpoint_path).parent_path();
  if (folder.filename() != "checkpoints") return std::nullopt;
  const fs::path tb = folder.parent_path() / "tb";
  std::error_code ec;
  if (!fs::is_directory(tb, ec)) return std::nullopt;
  return tb.string();
}

std::string eval_tensorboard_folder(const std::string& tb,
                                    int64_t step,
                                    const std::string& split,
                                    const std::string& weights) {
  char name[64];
  std::snprintf(name, sizeof(name), "eval-step-%08lld-", static_cast<long long>(step));
  return (fs::path(tb) / (name + split + (weights == "ema" ? "-ema" : ""))).string();
}

std::string config_markdown(const std::string& yaml) {
  // Indented four spaces: a Markdown code block, so the text plugin keeps the YAML's layout.
  std::string out = "    ";
  for (const char c : yaml) {
    out += c;
    if (c == '\n') out += "    ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out + "\n";
}

TensorBoardLog::TensorBoardLog(const std::string& folder, int64_t first_step, bool restart) {
  try {
    file_ = std::make_unique<util::EventFile>(folder, first_step, restart);
    path_ = file_->path();
  } catch (const std::exception& e) {
    spdlog::warn("TensorBoard: {}; this run writes no events (training goes on)", e.what());
  }
}

template <class Write>
void TensorBoardLog::guarded(Write&& write) {
  if (!file_) return;
  try {
    write(*file_);
  } catch (const std::exception& e) {
    spdlog::warn("TensorBoard: {}; no more events are written (training goes on)", e.what());
    file_.reset();
  }
}

void TensorBoardLog::train(int64_t step, const TrainScalars& s) {
  guarded([&](util::EventFile& f) {
    f.add_scalar("train/bpd", step, s.bits_per_dim);
    f.add_scalar("train/lr", step, s.lr);
    f.add_scalar("train/grad_norm", step, s.grad_norm);
    f.add_scalar("train/tokens_per_s", step, s.tokens_per_s);
    f.add_scalar("train/skipped_steps", step, static_cast<double>(s.skipped_steps));
  });
}

void TensorBoardLog::scalar(const std::string& tag, int64_t step, double value) {
  guarded([&](util::EventFile& f) { f.add_scalar(tag, step, value); });
}

void TensorBoardLog::image(const std::string& tag, int64_t step, const util::EncodedPng& png) {
  guarded([&](util::EventFile& f) { f.add_image(tag, step, png); });
}

void TensorBoardLog::text(const std::string& tag, int64_t step, const std::string& text) {
  guarded([&](util::EventFile& f) { f.add_text(tag, step, text); });
}

}  // namespace combiner::train
