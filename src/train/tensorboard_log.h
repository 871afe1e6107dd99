// What a run shows in TensorBoard, and the rule that logging must never stop training. Tags:
//   train/bpd train/lr train/grad_norm train/tokens_per_s train/skipped_steps  every log_every
//   val/bpd (each evaluation), test/bpd (the final test), samples (the grid, every sample_every),
//   config (the resolved config as text, at step 0 and at the first step after each resume), and
//   from `combiner-eval --heatmap`, in a folder of their own (eval_tensorboard_folder):
//   eval/<split>_bits_heatmap and eval/<split>_bpd at the checkpoint's step.
// A folder or file that cannot be written, or a disk that fills up, warns once; the records after
// that are dropped and the run goes on (its checkpoints are what must not be lost).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "util/event_file.h"
#include "util/image_io.h"

namespace combiner::train {

// out_dir/tb: where a run's event files go.
std::string tensorboard_folder(const std::string& out_dir);

// The tb/ folder of the run a checkpoint belongs to (<run>/checkpoints/<file> -> <run>/tb), if
// that folder exists; nullopt for a file anywhere else.
std::optional<std::string> run_tensorboard_folder(const std::string& checkpoint_path);

// Where combiner-eval logs one evaluation: tb/eval-step-<8-digit step>-<split>[-ema], a run of
// its own in TensorBoard. No tag of any run then gets a lower step after a higher one when an
// older checkpoint is evaluated after a newer one (TensorBoard's data server drops a tag's later
// points when that happens); opened with `restart`, a second evaluation of the same checkpoint,
// split and weights replaces the first.
std::string eval_tensorboard_folder(const std::string& tb,
                                    int64_t step,
                                    const std::string& split,
                                    const std::string& weights);

// The resolved config as a Markdown code block, as the text summary "config" holds it.
std::string config_markdown(const std::string& yaml);

struct TrainScalars {
  double bits_per_dim = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  int64_t skipped_steps = 0;  // updates skipped for a non-finite loss since the last log line
};

class TensorBoardLog {
 public:
  // A new event file in folder (util::EventFile); `restart` marks first_step as where the run
  // (re)starts, so TensorBoard drops what older files of the folder hold from there on. Never
  // throws: a failure warns once and the log writes nothing.
  TensorBoardLog(const std::string& folder, int64_t first_step, bool restart);

  void train(int64_t step, const TrainScalars& scalars);
  void scalar(const std::string& tag, int64_t step, double value);
  void image(const std::string& tag, int64_t step, const util::EncodedPng& png);
  void text(const std::string& tag, int64_t step, const std::string& text);

  bool writing() const { return file_ != nullptr; }
  // The event file, or "" when none could be created.
  const std::string& path() const { return path_; }

 private:
  template <class Write>
  void guarded(Write&& write);

  std::unique_ptr<util::EventFile> file_;  // null once a write failed
  std::string path_;
};

}  // namespace combiner::train
