// combiner-data: packed dataset files (data/packed.h).
//   pack --dataset NAME --from DIR --out DIR [--force]   published files -> train.pack, test.pack
//   pack --from FOLDER --size H[xW] --out DIR [...]      your own PNG/JPEG files -> an images pack
//   info FILE                                            the header, and the payload checksum
//   show FILE --index N --out x.png                      one image as a PNG
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "data/image_folder.h"
#include "data/pack.h"
#include "data/packed.h"
#include "sample/sampler.h"
#include "util/cli_main.h"
#include "util/image_io.h"
#include "util/runtime.h"

namespace {

namespace data = combiner::data;

// --size H or HxW: the packed height and width.
std::pair<int64_t, int64_t> parse_size(const std::string& text) {
  const auto x = text.find('x');
  auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 6 ||
        part.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(
          "--size: expected H or HxW in whole pixels (e.g. 128 or 96x128), "
          "got '" +
          text + "'");
    return std::stoll(part);
  };
  if (x == std::string::npos) return {number(text), number(text)};
  return {number(text.substr(0, x)), number(text.substr(x + 1))};
}

int run_pack_folder(data::ImageFolderOptions options, const std::string& size, int64_t threads) {
  std::tie(options.height, options.width) = parse_size(size);
  options.threads = static_cast<int>(threads);
  spdlog::info(
      "pack: the images under {} as {}x{}x{}, {}-bit, seed {}, filters {} (shrinking), "
      "{} (enlarging)",
      options.from,
      options.height,
      options.width,
      options.channels,
      options.bits,
      options.seed,
      data::resize_filter_name(options.filters.shrink),
      data::resize_filter_name(options.filters.enlarge));
  const auto report = data::pack_image_folder(options);
  for (const auto& path : report.paths) std::printf("packed: %s\n", path.c_str());
  // The last line says how the pack was made (both files' records together).
  data::FolderRecord both = report.train_record;
  const data::FolderRecord& test = report.test_record;
  both.copied += test.copied;
  both.shrunk += test.shrunk;
  both.enlarged += test.enlarged;
  both.cropped += test.cropped;
  both.skipped += test.skipped;
  std::printf("images: %lld train, %lld test, %zu skipped | %s\n",
              static_cast<long long>(report.train),
              static_cast<long long>(report.test),
              report.skipped.size(),
              data::describe(both).c_str());
  return 0;
}

int run_info(const std::string& path) {
  // The header is printed before the payload's check ends, so a corrupt payload still shows it.
  const auto file = data::PackedFile::open(path, data::PackedFile::Verify::kBackground, 0);
  const auto& h = file->header();
  std::printf("file: %s\nformat: packed dataset, version %u\ndataset: %s\n",
              path.c_str(),
              h.version,
              h.dataset.c_str());
  std::printf("images: %lld of %lldx%lldx%lld (L = %lld)\npayload: %lld bytes\n",
              static_cast<long long>(h.count),
              static_cast<long long>(h.shape.height),
              static_cast<long long>(h.shape.width),
              static_cast<long long>(h.shape.channels),
              static_cast<long long>(h.shape.length()),
              static_cast<long long>(h.payload_bytes()));
  std::printf("subpixels: %lld bits\n", static_cast<long long>(h.bits));
  if (h.folder)
    std::printf("made from a folder: %s; %lld file%s skipped\n",
                data::describe(*h.folder).c_str(),
                static_cast<long long>(h.folder->skipped),
                h.folder->skipped == 1 ? "" : "s");
  else if (h.dataset == "images")
    std::printf(
        "made from a folder: not recorded (format version 1; pack it again to record "
        "the resize filter)\n");
  std::fflush(stdout);
  file->check_integrity(/*wait=*/true);
  std::printf("checksum: CRC-32 %08x, verified\n", h.payload_crc);
  return 0;
}

int run_show(const std::string& path, int64_t index, const std::string& out) {
  const auto file = data::PackedFile::open(path, data::PackedFile::Verify::kBackground);
  const auto& h = file->header();
  if (index < 0 || index >= h.count)
    throw std::invalid_argument("--index " + std::to_string(index) + ": " + path + " holds " +
                                std::to_string(h.count) + " images (0.." +
                                std::to_string(h.count - 1) + ")");
  auto image = torch::from_blob(const_cast<uint8_t*>(file->images() + index * h.shape.length()),
                                {h.shape.height, h.shape.width, h.shape.channels},
                                torch::kUInt8);
  combiner::util::write_png(out, combiner::sample::for_display(image, int64_t{1} << h.bits));
  std::printf("%s: image %lld of %s -> %s\n",
              h.dataset.c_str(),
              static_cast<long long>(index),
              path.c_str(),
              out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-data", [&] {
    CLI::App app{"Packed dataset files: pack a published dataset, inspect and show packed files."};
    app.require_subcommand(1);
    data::PackOptions pack;
    auto* pack_cmd = app.add_subcommand("pack", "write train.pack and test.pack from a dataset");
    pack_cmd->add_option("--dataset",
                         pack.dataset,
                         "fashion_mnist | cifar10 | imagenet64 | imagenet32 (without --size)");
    pack_cmd->add_option("--from",
                         pack.from,
                         "folder of the published files (default: the dataset's default folder); "
                         "with --size, a folder of PNG and JPEG files");
    pack_cmd->add_option("--out", pack.out, "folder for the packed files")->required();
    pack_cmd->add_flag("--force", pack.force, "replace packed files already in --out");
    int64_t threads = 0;
    pack_cmd->add_option("--threads", threads, "decoding threads (default: every core)");
    // Your own images (data.dataset: images).
    std::string size;
    data::ImageFolderOptions folder;
    pack_cmd->add_option("--size", size, "H or HxW: pack the images under --from at this size");
    pack_cmd->add_option("--channels", folder.channels, "3 (RGB, default) or 1 (grayscale)");
    pack_cmd->add_option("--test-fraction",
                         folder.test_fraction,
                         "share of the files in test.pack when --from has no train/ and test/ "
                         "(default 0.1)");
    pack_cmd->add_option("--seed", folder.seed, "the shuffle's seed (default 0)");
    pack_cmd->add_option(
        "--bits", folder.bits, "bits per subpixel, 1 to 8 (default 8): v >> (8 - bits)");
    pack_cmd->add_flag(
        "--strict", folder.strict, "refuse a file that does not decode (default: skip it)");
    std::string filter = "mitchell", upsample_filter = "catmull-rom";
    auto* filter_opt = pack_cmd->add_option(
        "--filter",
        filter,
        "box | triangle | mitchell | catmull-rom: resizes images larger than --size (default "
        "mitchell; box averages areas, as image-net.org's downsampled ImageNet was made). An "
        "image whose centred crop already has the size is copied, never filtered");
    auto* upsample_opt = pack_cmd->add_option(
        "--upsample-filter",
        upsample_filter,
        "the same for images smaller than --size (default catmull-rom, which interpolates)");

    std::string file, out;
    int64_t index = 0;
    auto* info_cmd =
        app.add_subcommand("info", "print a packed file's header, verify its checksum");
    info_cmd->add_option("file", file, "packed file")->required();
    auto* show_cmd = app.add_subcommand("show", "write one image of a packed file as a PNG");
    show_cmd->add_option("file", file, "packed file")->required();
    show_cmd->add_option("--index", index, "image number, from 0")->required();
    show_cmd->add_option("--out", out, "PNG to write")->required();
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    if (*info_cmd) return run_info(file);
    if (*show_cmd) return run_show(file, index, out);
    if (!size.empty()) {
      if (!pack.dataset.empty() && pack.dataset != "images")
        throw std::invalid_argument(
            "pack: --size packs a folder of your own images; it does not "
            "go with --dataset " +
            pack.dataset);
      if (pack.from.empty()) throw std::invalid_argument("pack: --size needs --from FOLDER");
      folder.filters.shrink = data::parse_resize_filter(filter, "--filter");
      folder.filters.enlarge = data::parse_resize_filter(upsample_filter, "--upsample-filter");
      folder.from = pack.from;
      folder.out = pack.out;
      folder.force = pack.force;
      return run_pack_folder(folder, size, threads);
    }
    if (filter_opt->count() > 0 || upsample_opt->count() > 0)
      throw std::invalid_argument(
          "pack: --filter and --upsample-filter resize your own images (--size H[xW] --from "
          "FOLDER); a published dataset is packed as it is");
    if (pack.dataset.empty())
      throw std::invalid_argument(
          "pack: --dataset fashion_mnist | cifar10 | imagenet64 | imagenet32, or --size H[xW] with "
          "--from "
          "FOLDER for your own images");
    spdlog::info("pack: {} on {} threads", pack.dataset, combiner::util::set_threads(threads));
    for (const auto& path : data::pack_dataset(pack)) std::printf("packed: %s\n", path.c_str());
    return 0;
  });
}
