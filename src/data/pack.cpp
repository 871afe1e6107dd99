// Packing streams each split through a reader into a PackedWriter: ImageNet-64 (and -32) a chunk of
// decoded PNGs (or one npz batch) at a time, the small datasets whole. Progress goes to the log.
#include "data/pack.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/cifar10.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/imagenet64.h"
#include "data/packed.h"

namespace combiner::data {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kChunkImages = 4096;  // ImageNet-64 images decoded per chunk (48 MiB)

// Writes a split's temporary packed file, completed, and appends its writer to writers; for
// ImageNet-64 a progress line every options.progress_every_s seconds.
void write_split(const PackOptions& options,
                 const std::string& dir,
                 OfficialSplit split,
                 std::vector<std::unique_ptr<PackedWriter>>& writers) {
  const std::string path = (fs::path(options.out) / packed_file_name(split)).string();
  const ImageShape shape = dataset_shape(options.dataset);
  const char* name = split == OfficialSplit::kTrain ? "train" : "test";
  if (options.dataset != "imagenet64" && options.dataset != "imagenet32") {
    const ImageSet set =
        options.dataset == "cifar10" ? load_cifar10(dir, split) : load_fashion_mnist(dir, split);
    writers.push_back(std::make_unique<PackedWriter>(path, options.dataset, shape, set.count));
    writers.back()->write(set.data(), set.count);
    spdlog::info("pack: {} {} images", name, set.count);
  } else {
    Imagenet64Reader reader(dir, split, shape.height);
    writers.push_back(std::make_unique<PackedWriter>(path, options.dataset, shape, reader.count()));
    std::vector<uint8_t> chunk(static_cast<size_t>(kChunkImages * shape.length()));
    const auto start = Clock::now();
    auto last_report = start;
    int64_t done = 0;
    while (int64_t n = reader.read(chunk.data(), kChunkImages)) {
      writers.back()->write(chunk.data(), n);
      done += n;
      const auto now = Clock::now();
      if (std::chrono::duration<double>(now - last_report).count() >= options.progress_every_s ||
          done == reader.count()) {
        const double elapsed = std::chrono::duration<double>(now - start).count();
        const double rate = done / std::max(elapsed, 1e-9);
        spdlog::info("pack: {} {}/{} images | {:.0f} images/s | ETA {:.0f}s",
                     name,
                     done,
                     reader.count(),
                     rate,
                     double(reader.count() - done) / rate);
        last_report = now;
      }
    }
  }
  writers.back()->complete();
}

}  // namespace

std::vector<std::string> pack_dataset(const PackOptions& options) {
  dataset_shape(options.dataset);  // std::invalid_argument for an unknown name
  const std::string dir = options.from.empty() ? default_dir(options.dataset) : options.from;
  if (!fs::is_directory(dir))
    throw std::runtime_error("pack: input folder '" + dir + "' for " + options.dataset +
                             " does not exist; see data/README.md for the expected files");
  if (options.out.empty()) throw std::invalid_argument("pack: --out must name a folder");
  if (holds_packed_files(options.out) && !options.force)
    throw std::invalid_argument("pack: '" + options.out +
                                "' already holds packed files; pass --force to replace them");
  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec)
    throw std::runtime_error("pack: cannot create folder '" + options.out + "': " + ec.message());

  std::vector<std::unique_ptr<PackedWriter>> writers;
  for (const auto split : {OfficialSplit::kTrain, OfficialSplit::kTest})
    write_split(options, dir, split, writers);
  // Both complete: only now replace what `out` held.
  std::vector<std::string> paths;
  for (auto& writer : writers) {
    writer->rename_into_place();
    paths.push_back(writer->path());
  }
  return paths;
}

}  // namespace combiner::data
