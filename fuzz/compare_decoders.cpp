// Decodes each file given with the project's decoder (util::decode_image_bytes: libpng,
// libjpeg-turbo) and with stb_image, which decoded them before, at 3 and at 1 channels, and says
// how far apart the two are: PNG pixels must be identical; JPEG pixels differ by the decoders'
// IDCT and upsampling. One line per JPEG and per disagreement, then a summary.
//   compare_decoders FILE...      (no FILE: the paths are read from standard input, one a line)
#include <stb/stb_image.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/image_decode.h"

using namespace combiner;

namespace {

struct Tally {
  int files = 0, identical = 0, differ = 0, both_refuse = 0, ours_refuse = 0, stb_refuses = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Tally png, jpeg, other;  // by signature
  double jpeg_max = 0, jpeg_sum = 0, jpeg_count = 0, jpeg_changed = 0;
  std::vector<std::string> paths(argv + 1, argv + argc);
  for (std::string line; argc == 1 && std::getline(std::cin, line);) paths.push_back(line);
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    if (bytes.empty()) continue;
    const bool is_png = bytes[0] == 0x89;
    Tally& t = is_png ? png : bytes[0] == 0xff ? jpeg : other;
    ++t.files;
    bool all_same = true, refused = false;
    for (const int channels : {3, 1}) {
      std::string ours_error;
      util::DecodedImage ours;
      try {
        ours = util::decode_image_bytes(bytes.data(), bytes.size(), path, channels);
      } catch (const std::exception& e) {
        ours_error = e.what();
      }
      int w = 0, h = 0, n = 0;
      std::unique_ptr<stbi_uc, void (*)(void*)> theirs(
          stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &n, channels),
          stbi_image_free);
      if (!ours_error.empty() || !theirs) {
        if (channels == 3) {
          if (!theirs && !ours_error.empty())
            ++t.both_refuse;
          else if (!theirs)
            ++t.stb_refuses;
          else
            ++t.ours_refuse;
          std::printf("%s: %s\n",
                      path.c_str(),
                      !ours_error.empty() ? ("ours: " + ours_error).c_str()
                                          : ("stb: " + std::string(stbi_failure_reason())).c_str());
        }
        refused = true;
        break;
      }
      if (ours.width != w || ours.height != h) {
        std::printf("%s: ours %lld x %lld, stb %d x %d\n",
                    path.c_str(),
                    static_cast<long long>(ours.width),
                    static_cast<long long>(ours.height),
                    w,
                    h);
        all_same = false;
        continue;
      }
      int max = 0;
      double sum = 0, changed = 0;
      for (size_t k = 0; k < ours.pixels.size(); ++k) {
        const int d = std::abs(int(ours.pixels[k]) - int(theirs.get()[k]));
        max = std::max(max, d);
        sum += d;
        changed += d > 0;
      }
      const double count = double(ours.pixels.size());
      if (max > 0) all_same = false;
      if (!is_png) {
        jpeg_max = std::max<double>(jpeg_max, max);
        jpeg_sum += sum, jpeg_count += count, jpeg_changed += changed;
      }
      if (!is_png || max > 0)
        std::printf("%s: %d x %d, %d channel%s: max |diff| %d, mean |diff| %.4f, %.2f%% differ\n",
                    path.c_str(),
                    w,
                    h,
                    channels,
                    channels == 1 ? "" : "s",
                    max,
                    sum / count,
                    100 * changed / count);
    }
    if (!refused) ++(all_same ? t.identical : t.differ);
  }
  for (const auto& [name, t] :
       {std::pair<const char*, Tally>{"PNG", png}, {"JPEG", jpeg}, {"neither", other}})
    std::printf(
        "%s: %d files; decoded by both: %d identical at 3 and 1 channels, %d not; refused by both "
        "%d, by ours only %d, by stb only %d\n",
        name,
        t.files,
        t.identical,
        t.differ,
        t.both_refuse,
        t.ours_refuse,
        t.stb_refuses);
  if (jpeg_count > 0)
    std::printf("JPEG subpixels: max |diff| %.0f, mean |diff| %.4f, %.2f%% differ\n",
                jpeg_max,
                jpeg_sum / jpeg_count,
                100 * jpeg_changed / jpeg_count);
  return 0;
}
