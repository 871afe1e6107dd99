// safetensors files: from memory (parse_safetensors) and from a file (load_safetensors, which
// reads the header, then each tensor straight into its storage). Both must agree.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fuzz_common.h"
#include "util/safetensors.h"

using namespace combiner;

namespace {
std::string temp_path;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  temp_path = (std::filesystem::temp_directory_path() /
               ("safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors"))
                  .string();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz.safetensors";
  util::Safetensors from_memory, from_file;
  const bool memory_ok =
      fuzz::refuses_cleanly([&] { from_memory = util::parse_safetensors(data, size, name); }, name);
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const bool file_ok =
      fuzz::refuses_cleanly([&] { from_file = util::load_safetensors(temp_path); }, temp_path);
  if (memory_ok != file_ok)
    fuzz::bug("parse_safetensors and load_safetensors disagree on whether the input is valid");
  if (!memory_ok) return 0;
  if (from_memory.metadata != from_file.metadata ||
      from_memory.tensors.size() != from_file.tensors.size())
    fuzz::bug("parse_safetensors and load_safetensors read different headers");
  for (size_t i = 0; i < from_memory.tensors.size(); ++i) {
    const auto& [a_name, a] = from_memory.tensors[i];
    const auto& [b_name, b] = from_file.tensors[i];
    // Bytes, not values: NaN payloads are valid data and never compare equal.
    if (a_name != b_name || a.sizes() != b.sizes() || a.dtype() != b.dtype() ||
        (a.nbytes() > 0 && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) != 0))
      fuzz::bug("parse_safetensors and load_safetensors read different tensors: " + a_name);
  }
  return 0;
}
