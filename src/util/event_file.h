// TensorBoard event files: a new file per writer, events.out.tfevents.<seconds>.<host>.<pid>.<n>,
// holding TFRecords (util/tfrecord.h) of Event protos (tfevent/tensorboard_event.proto). Each
// record goes to the file in one write() as soon as it is made, so a killed process leaves every
// record it finished whole, and readers stop before a record cut short. The class throws on I/O
// errors; what to do about them (train/tensorboard_log.h: warn once, go on) is the caller's choice.
#pragma once

#include <cstdint>
#include <string>

#include "util/image_io.h"

namespace combiner::util {

// False when the build has no protobuf (CMake COMBINER_TENSORBOARD off): EventFile then refuses
// to open.
bool tensorboard_available();

class EventFile {
 public:
  // Creates folder if needed and a new event file in it whose name sorts after the event files
  // already there (TensorBoard reads a folder's files in name order), then writes the file
  // version record at first_step and, when `restart`, a SessionLog START at first_step, which
  // makes TensorBoard drop what the earlier files hold at steps >= first_step.
  // std::runtime_error naming the folder or the file when either cannot be created.
  EventFile(const std::string& folder, int64_t first_step, bool restart);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // Each appends one record; std::runtime_error "<file>: cannot write ...: <reason>" when the
  // write fails (full disk, file size limit), after which the file may end in a partial record.
  void add_scalar(const std::string& tag, int64_t step, double value);
  void add_image(const std::string& tag, int64_t step, const EncodedPng& png);
  // A text summary (TensorBoard's text plugin renders it as Markdown).
  void add_text(const std::string& tag, int64_t step, const std::string& text);

  const std::string& path() const { return path_; }

 private:
  void append(const std::string& serialized_event);

  std::string path_;
  int fd_ = -1;
};

}  // namespace combiner::util
