// NumPy .npy files: NPY format versions 1, 2 and 3, little-endian, C order, for the dtypes
// float32, float64, uint8, int32 and int64 (saving: float32, uint8, int64). Anything else is
// refused with the path and what was found rather than guessed at. Saves are atomic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace combiner::util {

// What an .npy header says; data_offset counts from the start of the file.
struct NpyHeader {
  std::string descr;  // numpy dtype string, e.g. "<f4", "|u1"
  torch::ScalarType dtype = torch::kUInt8;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  int64_t numel() const;
  size_t data_bytes() const;  // numel * element size
};

// Parses the header of an .npy held in memory (size bytes at data; the header alone suffices).
// name is used in error messages only (a file path, or "archive.npz:data.npy").
NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& name);

// A whole .npy held in memory (e.g. an npz member): checks that exactly data_bytes() follow
// the header and returns a tensor owning a copy.
torch::Tensor npy_from_bytes(const uint8_t* data, size_t size, const std::string& name);

// std::runtime_error naming path on a missing file, bad magic, unsupported dtype or order, or
// data shorter or longer than the header says.
torch::Tensor load_npy(const std::string& path);

// float32, uint8 or int64 (else std::invalid_argument); written to path + ".tmp" and renamed,
// so a failed save never leaves a partial file at path.
void save_npy(const std::string& path, const torch::Tensor& tensor);

}  // namespace combiner::util
