// .npy inputs that broke the fuzz target's rule (fuzz/npy_fuzz.cpp: refuse bad bytes only with
// std::runtime_error naming the file), kept so the bugs stay fixed.
#include <filesystem>

#include "util/npy.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

std::vector<uint8_t> npy(const std::string& descr, const std::string& shape, size_t data_bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
  dict += '\n';
  std::vector<uint8_t> out = {0x93,
                              'N',
                              'U',
                              'M',
                              'P',
                              'Y',
                              1,
                              0,
                              static_cast<uint8_t>(dict.size() & 0xff),
                              static_cast<uint8_t>(dict.size() >> 8)};
  out.insert(out.end(), dict.begin(), dict.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

// Each dimension was below the old per-dimension limit (2^48), but their product overflowed
// int64 (undefined behaviour) and wrapped to 0, which matched an empty payload; the reader then
// asked LibTorch for a tensor of that shape and got c10::Error, which names no file.
TEST(NpyFuzzRegression, ShapeWhoseElementCountOverflows) {
  TempDir dir;
  const auto bytes = npy("<f4", "(1099511627776, 1099511627776, 1099511627776, 16)", 0);
  expect_throw_with<std::runtime_error>(
      [&] { npy_from_bytes(bytes.data(), bytes.size(), "m.npy"); },
      {"m.npy", "larger than any file"});
  write_bytes(dir.file("wrap.npy"), bytes);
  expect_throw_with<std::runtime_error>([&] { load_npy(dir.file("wrap.npy")); },
                                        {dir.file("wrap.npy"), "larger than any file"});
}

// Not a bug found: a guard for the header-length reading that load_npy and npy_from_bytes now
// share (a length pointing past the end of the file, for each format version).
TEST(NpyFuzzRegression, HeaderLengthPastTheEnd) {
  TempDir dir;
  for (const uint8_t version : {1, 2, 3}) {
    std::vector<uint8_t> bytes = {
        0x93, 'N', 'U', 'M', 'P', 'Y', version, 0, 0xff, 0xff, 0xff, 0x7f};
    const std::string name = "v" + std::to_string(version) + ".npy";
    expect_throw_with<std::runtime_error>([&] { npy_from_bytes(bytes.data(), bytes.size(), name); },
                                          {name, "truncated header"});
    write_bytes(dir.file(name), bytes);
    expect_throw_with<std::runtime_error>([&] { load_npy(dir.file(name)); },
                                          {dir.file(name), "truncated header"});
  }
}

}  // namespace
}  // namespace combiner::util
