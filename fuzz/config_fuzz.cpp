// Config parsing: arbitrary text through parse_config, then validate, then (for a valid config)
// to_yaml -> parse_config -> validate must give the same YAML back. The first line is also tried
// as a --set override on the defaults.
#include <cstdint>
#include <string>

#include "config/config.h"
#include "fuzz_common.h"

using namespace combiner;

namespace {

// validate() names the broken key: its messages start with a section of the file.
bool names_a_key(const std::string& message) {
  for (const char* section : {"data.", "model.", "train."})
    if (message.rfind(section, 0) == 0) return true;
  return false;
}

void check_validate(config::Config& config) {
  try {
    config::validate(config);
  } catch (const std::invalid_argument& e) {
    if (!names_a_key(e.what()))
      fuzz::bug(std::string("validate message names no key: ") + e.what());
    return;
  }
  const std::string yaml = config::to_yaml(config);
  config::Config back;
  try {
    back = config::parse_config(yaml, "round-trip.yaml");
    config::validate(back);
  } catch (const std::exception& e) {
    fuzz::bug(std::string("a validated config does not read back: ") + e.what() + "\n" + yaml);
  }
  if (config::to_yaml(back) != yaml)
    fuzz::bug("a validated config reads back different:\n" + yaml + "\n---\n" +
              config::to_yaml(back));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  config::Config config;
  if (fuzz::refuses_cleanly([&] { config = config::parse_config(text, "fuzz.yaml"); }, "fuzz.yaml"))
    check_validate(config);

  config::Config defaults;
  const std::string first_line = text.substr(0, text.find('\n'));
  if (fuzz::refuses_cleanly([&] { config::apply_override(defaults, first_line); }, "--set"))
    check_validate(defaults);
  return 0;
}
