// safetensors files (huggingface/safetensors): an 8-byte little-endian header length N, N bytes
// of JSON {"<tensor>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"<key>": "<string>"}}, then the tensors' bytes, little-endian, C order.
// Reading is strict, as the reference implementation is: the offsets must tile the data exactly
// (no gap, no overlap, nothing after), each tensor's byte count must match its dtype and shape,
// and every refusal is one line naming the file and the tensor. Saves are atomic.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace combiner::util {

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // "F32", "BF16", ...
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range in the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order (by begin)
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
};

// The dtypes read and written: F32 F64 F16 BF16 I64 I32 I16 I8 U8; nullptr for others.
const char* safetensors_dtype_name(torch::ScalarType dtype);

// Parses and checks the header of a file of file_size bytes whose first `size` bytes are at
// data (the first 8 + N bytes suffice). std::runtime_error naming `name` (and the tensor) when
// the header does not parse, a dtype is unknown, a shape and dtype disagree with the offsets, the
// offsets overlap or leave a gap, or the data section is not exactly the tensors' bytes.
SafetensorsHeader parse_safetensors_header(const uint8_t* data,
                                           size_t size,
                                           uint64_t file_size,
                                           const std::string& name);

struct Safetensors {
  NamedTensorList tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// A whole file held in memory.
Safetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// A file: the header, then each tensor read straight into its storage.
Safetensors load_safetensors(const std::string& path);

// Writes tensors (contiguous copies on the CPU, in the given order; dtypes as above, names
// unique and not "__metadata__") and string metadata, the header padded with spaces to a
// multiple of 8 bytes. std::invalid_argument for a bad name or dtype; std::runtime_error naming
// path when the file cannot be written, in which case path is left as it was.
void save_safetensors(const std::string& path,
                      const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata);

}  // namespace combiner::util
