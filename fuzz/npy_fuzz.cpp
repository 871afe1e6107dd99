// .npy files: from memory (npy_from_bytes, as npz members are read) and from a file (load_npy,
// which reads the header and then the data straight into the tensor). Both must agree.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fuzz_common.h"
#include "util/npy.h"

using namespace combiner;

namespace {
std::string temp_path;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  temp_path =
      (std::filesystem::temp_directory_path() / ("npy_fuzz_" + std::to_string(::getpid()) + ".npy"))
          .string();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_array.npy";
  torch::Tensor from_memory, from_file;
  fuzz::refuses_cleanly([&] { from_memory = util::npy_from_bytes(data, size, name); }, name);
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  fuzz::refuses_cleanly([&] { from_file = util::load_npy(temp_path); }, temp_path);
  if (from_memory.defined() != from_file.defined())
    fuzz::bug("npy_from_bytes and load_npy disagree on whether the input is valid");
  // Bytes, not values: NaN payloads are valid data and never compare equal.
  if (from_memory.defined() &&
      (from_memory.sizes() != from_file.sizes() || from_memory.dtype() != from_file.dtype() ||
       (from_memory.nbytes() > 0 &&
        std::memcmp(from_memory.data_ptr(), from_file.data_ptr(), from_memory.nbytes()) != 0)))
    fuzz::bug("npy_from_bytes and load_npy read different arrays");
  return 0;
}
