// The folder packer: list the image files, split and shuffle them, then decode them in chunks on
// several threads and stream each chunk, in order, into the split's PackedWriter.
#include "data/image_folder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "data/packed.h"
#include "util/image_decode.h"

namespace combiner::data {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxSourceSide = 16384;  // larger sources are refused before decoding
constexpr size_t kChunkFiles = 256;        // files decoded together between two writes

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// Every image file under dir, sorted, so the shuffle alone decides the order.
std::vector<std::string> list_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end;
       it.increment(ec))
    if (it->is_regular_file(ec) && is_image_file(it->path())) files.push_back(it->path().string());
  if (ec) throw std::runtime_error("pack: cannot list '" + dir.string() + "': " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// Fisher-Yates with a 64-bit Mersenne Twister: the same order for the same seed everywhere.
void shuffle(std::vector<std::string>& files, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = files.size(); i > 1; --i) std::swap(files[i - 1], files[rng() % i]);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct FolderSplit {
  const char* name;
  std::vector<std::string> files;
};

// Decodes files[begin, end) into out (image i at (i - begin) * L) on `threads` threads, with
// what was done to each in fits[i - begin]; a file that fails leaves its reason in why[i - begin].
void decode_chunk(const std::vector<std::string>& files,
                  size_t begin,
                  size_t end,
                  const ImageShape& shape,
                  const ResizeFilters& filters,
                  int threads,
                  std::vector<uint8_t>& out,
                  std::vector<Fit>& fits,
                  std::vector<std::string>& why) {
  const size_t n = end - begin, L = static_cast<size_t>(shape.length());
  out.resize(n * L);
  fits.assign(n, Fit{});
  why.assign(n, "");
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        const auto bytes = read_file(files[begin + i]);
        auto image = decode_image(bytes.data(), bytes.size(), shape, files[begin + i], filters);
        std::copy(
            image.pixels.begin(), image.pixels.end(), out.begin() + static_cast<ptrdiff_t>(i * L));
        fits[i] = image.fit;
      } catch (const std::exception& e) {
        why[i] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
}

void count_fit(const Fit& fit, FolderRecord& record) {
  if (fit.resampling == Resampling::kCopied)
    ++record.copied;
  else if (fit.resampling == Resampling::kShrunk)
    ++record.shrunk;
  else
    ++record.enlarged;
  if (fit.cropped) ++record.cropped;
}

}  // namespace

std::vector<uint8_t> decode_image(const uint8_t* bytes,
                                  size_t size,
                                  const ImageShape& shape,
                                  const std::string& name) {
  return decode_image(bytes, size, shape, name, ResizeFilters{}).pixels;
}

DecodedImage decode_image(const uint8_t* bytes,
                          size_t size,
                          const ImageShape& shape,
                          const std::string& name,
                          const ResizeFilters& filters) {
  const int C = static_cast<int>(shape.channels);
  util::DecodeLimits limits;
  limits.max_side = kMaxSourceSide;
  const util::DecodedImage decoded = util::decode_image_bytes(bytes, size, name, C, limits);
  DecodedImage image;
  image.pixels.resize(static_cast<size_t>(shape.length()));
  image.fit = fit_image(decoded.pixels.data(), static_cast<int>(decoded.width),
                        static_cast<int>(decoded.height), shape, filters, image.pixels.data(),
                        name);
  return image;
}

ImageFolderReport pack_image_folder(const ImageFolderOptions& options) {
  const ImageShape shape{options.height, options.width, options.channels};
  if (shape.height < 1 || shape.height > kMaxImageSide || shape.width < 1 ||
      shape.width > kMaxImageSide)
    throw std::invalid_argument("pack: --size " + std::to_string(shape.height) + "x" +
                                std::to_string(shape.width) + ": height and width must be 1 to " +
                                std::to_string(kMaxImageSide));
  if (shape.channels != 1 && shape.channels != 3)
    throw std::invalid_argument("pack: --channels " + std::to_string(shape.channels) +
                                ": expected 1 (grayscale) or 3 (RGB)");
  if (options.bits < 1 || options.bits > 8)
    throw std::invalid_argument("pack: --bits " + std::to_string(options.bits) +
                                ": expected 1 to 8");
  if (!(options.test_fraction >= 0 && options.test_fraction < 1))
    throw std::invalid_argument("pack: --test-fraction " + std::to_string(options.test_fraction) +
                                ": expected at least 0 and below 1");
  if (!fs::is_directory(options.from))
    throw std::invalid_argument("pack: --from '" + options.from + "' is not a folder");
  if (options.out.empty()) throw std::invalid_argument("pack: --out must name a folder");
  if (holds_packed_files(options.out) && !options.force)
    throw std::invalid_argument("pack: '" + options.out +
                                "' already holds packed files; pass --force to replace them");

  const fs::path from(options.from);
  std::vector<FolderSplit> splits = {{"train", {}}, {"test", {}}};
  if (fs::is_directory(from / "train") && fs::is_directory(from / "test")) {
    splits[0].files = list_images(from / "train");
    splits[1].files = list_images(from / "test");
  } else {
    auto files = list_images(from);
    shuffle(files, options.seed);
    size_t test = static_cast<size_t>(options.test_fraction * double(files.size()) + 0.5);
    if (options.test_fraction > 0 && test == 0 && files.size() > 1) test = 1;
    splits[1].files.assign(files.begin(), files.begin() + static_cast<ptrdiff_t>(test));
    splits[0].files.assign(files.begin() + static_cast<ptrdiff_t>(test), files.end());
  }
  for (const auto& split : splits)
    if (split.files.empty())
      throw std::invalid_argument("pack: no " + std::string(split.name) +
                                  " images (*.png, *.jpg, *.jpeg) under '" + options.from + "'" +
                                  (split.name == std::string("test") && options.test_fraction == 0
                                       ? " (--test-fraction is 0)"
                                       : ""));
  for (auto& split : splits) shuffle(split.files, options.seed + 1);

  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec)
    throw std::runtime_error("pack: cannot create folder '" + options.out + "': " + ec.message());
  const int threads = options.threads > 0 ? options.threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  ImageFolderReport report;
  std::vector<std::unique_ptr<PackedWriter>> writers;
  for (const auto& split : splits) {
    const std::string path = (fs::path(options.out) / (std::string(split.name) + ".pack")).string();
    FolderRecord& record =
        split.name == std::string("train") ? report.train_record : report.test_record;
    record.filters = options.filters;
    PackedHeader header;
    header.dataset = "images";
    header.shape = shape;
    header.count = int64_t(split.files.size());
    header.bits = options.bits;
    header.folder = record;
    writers.push_back(std::make_unique<PackedWriter>(path, header));
    const auto start = Clock::now();
    auto last_report = start;
    std::vector<uint8_t> chunk;
    std::vector<Fit> fits;
    std::vector<std::string> why;
    int64_t written = 0;
    for (size_t begin = 0; begin < split.files.size(); begin += kChunkFiles) {
      const size_t end = std::min(split.files.size(), begin + kChunkFiles);
      decode_chunk(split.files, begin, end, shape, options.filters, threads, chunk, fits, why);
      if (options.bits < 8)
        for (auto& v : chunk) v = static_cast<uint8_t>(v >> (8 - options.bits));
      for (size_t i = 0; i < end - begin; ++i) {
        if (!why[i].empty()) {
          if (options.strict) throw std::runtime_error("pack: " + why[i] + " (--strict)");
          spdlog::warn("pack: skipped {}", why[i]);
          report.skipped.emplace_back(split.files[begin + i], why[i]);
          ++record.skipped;
          continue;
        }
        writers.back()->write(chunk.data() + i * static_cast<size_t>(shape.length()), 1);
        count_fit(fits[i], record);
        ++written;
      }
      const auto now = Clock::now();
      if (std::chrono::duration<double>(now - last_report).count() >= options.progress_every_s ||
          end == split.files.size()) {
        const double rate =
            double(end) / std::max(1e-9, std::chrono::duration<double>(now - start).count());
        spdlog::info("pack: {} {}/{} files | {:.0f} images/s | ETA {:.0f}s",
                     split.name,
                     end,
                     split.files.size(),
                     rate,
                     double(split.files.size() - end) / rate);
        last_report = now;
      }
    }
    if (written == 0)
      throw std::runtime_error("pack: none of the " + std::to_string(split.files.size()) + " " +
                               split.name + " files under '" + options.from + "' decoded");
    writers.back()->set_folder_record(record);
    writers.back()->complete_short();
    (split.name == std::string("train") ? report.train : report.test) = written;
  }
  for (auto& writer : writers) {  // both complete: only now replace what `out` held
    writer->rename_into_place();
    report.paths.push_back(writer->path());
  }
  return report;
}

}  // namespace combiner::data
