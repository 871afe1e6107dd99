// Loading a config the way the binaries do: file, then --set overrides, then one validate().
// config.h's load_config() is the no-override case of this.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace combiner::config {

// The config file a binary's --config names: path itself if it exists, else configs/<path>
// (so `combiner-train --config cifar_axial.yaml` finds the preset from the project folder).
// std::invalid_argument naming both when neither exists.
std::string find_config(const std::string& path);

// Reads find_config(path), applies each "key.path=value" in order, validates. Throws
// std::invalid_argument prefixed with the path ("--set" for a bad override); a validation error
// after overrides reads
// "<path> with --set overrides: <key>: ...".
Config load_config_with_overrides(const std::string& path,
                                  const std::vector<std::string>& overrides);

// The same without what validate() reads from the dataset's files: the overrides applied to
// find_config(path) (to the defaults when path is ""), checked by check_values() alone, so keys
// resolved from the data (data.height, model.attention.block, ...) keep the values given. What
// `combiner-train --print-config` shows; nothing but the config file is read.
Config read_config_with_overrides(const std::string& path,
                                  const std::vector<std::string>& overrides);

}  // namespace combiner::config
