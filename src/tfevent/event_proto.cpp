// Each function fills one Event and serialises it; protoc's classes stay inside this file.
#include "tfevent/event_proto.h"

#include "tensorboard_event.pb.h"

namespace combiner::tfevent {
namespace {

Event event_at(double wall_time, int64_t step) {
  Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  return event;
}

}  // namespace

std::string version_event(double wall_time, int64_t step) {
  Event event = event_at(wall_time, step);
  event.set_file_version("brain.Event:2");
  return event.SerializeAsString();
}

std::string restart_event(double wall_time, int64_t step) {
  Event event = event_at(wall_time, step);
  event.mutable_session_log()->set_status(SessionLog::START);
  return event.SerializeAsString();
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  Event event = event_at(wall_time, step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return event.SerializeAsString();
}

std::string image_event(double wall_time,
                        int64_t step,
                        const std::string& tag,
                        int32_t height,
                        int32_t width,
                        int32_t colorspace,
                        const std::string& encoded) {
  Event event = event_at(wall_time, step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* image = v->mutable_image();
  image->set_height(height);
  image->set_width(width);
  image->set_colorspace(colorspace);
  image->set_encoded_image_string(encoded);
  return event.SerializeAsString();
}

std::string text_event(double wall_time,
                       int64_t step,
                       const std::string& tag,
                       const std::string& text) {
  Event event = event_at(wall_time, step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  auto* tensor = v->mutable_tensor();
  tensor->set_dtype(DT_STRING);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(text);
  return event.SerializeAsString();
}

}  // namespace combiner::tfevent
