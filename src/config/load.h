// Loading a config the way the binaries do: file, then --set overrides, then one validate().
// config.h's load_config() is the no-override case of this.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace combiner::config {

// Reads `path`, applies each "key.path=value" in order, validates. Throws std::invalid_argument
// prefixed with the path ("--set" for a bad override); a validation error after overrides reads
// "<path> with --set overrides: <key>: ...".
Config load_config_with_overrides(const std::string& path,
                                  const std::vector<std::string>& overrides);

}  // namespace combiner::config
