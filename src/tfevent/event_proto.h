// Event protos for TensorBoard, serialised (src/tfevent/tensorboard_event.proto). This folder is
// the only one that sees protobuf, and it sees no LibTorch: pip's torch ships protobuf headers of
// its own in its include folder, which would shadow the ones protoc's output was made for.
// util/event_file.h frames these bytes as records and writes them.
#pragma once

#include <cstdint>
#include <string>

namespace combiner::tfevent {

// file_version "brain.Event:2": the first record of every event file.
std::string version_event(double wall_time, int64_t step);

// SessionLog START: TensorBoard drops what earlier files hold at steps >= step.
std::string restart_event(double wall_time, int64_t step);

// Summary values: a scalar (stored as float32, as TensorBoard does), an encoded image
// (colorspace 1 grey, 3 RGB), a text for the text plugin (a DT_STRING tensor of shape [1]).
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
std::string image_event(double wall_time,
                        int64_t step,
                        const std::string& tag,
                        int32_t height,
                        int32_t width,
                        int32_t colorspace,
                        const std::string& encoded);
std::string text_event(double wall_time,
                       int64_t step,
                       const std::string& tag,
                       const std::string& text);

}  // namespace combiner::tfevent
