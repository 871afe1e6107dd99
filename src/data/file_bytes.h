// Whole-file reads for the dataset readers, which parse bytes in memory (so the same parsers
// serve files and the fuzz targets). Errors carry the reader's name, the path and errno's text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::data {

// The bytes of path. std::runtime_error "<reader>: cannot read '<path>': <reason>" if it is
// missing, unreadable (permission denied, a folder) or changes size while being read.
std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& reader);

}  // namespace combiner::data
