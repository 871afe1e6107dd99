// Bytes of the files the data tests write: little- and big-endian integers, and PNG images
// through stb_image_write.
#pragma once

#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::testing {

// Appends the low `bytes` bytes of v, least significant first (zip, npy).
inline void put(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Appends v as 4 bytes, most significant first (idx, CIFAR-10's labels).
inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// Writes `pixels` (h rows of w pixels of c interleaved channels) as a PNG file.
inline void write_png(
    const std::string& path, int w, int h, int c, const std::vector<uint8_t>& pixels) {
  ASSERT_TRUE(stbi_write_png(path.c_str(), w, h, c, pixels.data(), w * c)) << path;
}

}  // namespace combiner::testing
