// Writes the seed corpora of the fuzz targets into <out>/<target>/: small valid files (and a
// few near misses) made with the project's own writers, zlib, stb, libpng and libjpeg-turbo,
// plus a libFuzzer dictionary of config keys and values. Nothing is copied from a dataset.
//   make_seeds <out>
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/packed.h"
#include "train/checkpoint.h"
#include "util/image_files.h"  // tests/util: PNG and JPEG writers in every layout
#include "util/npy.h"
#include "util/safetensors.h"
#include "zip_writer.h"

#include "data/zip.h"

using namespace combiner;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

void write(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("make_seeds: cannot write " + path.string());
}

void write_text(const fs::path& path, const std::string& text) {
  write(path, Bytes(text.begin(), text.end()));
}

Bytes read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes pattern(size_t n, int seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 7 + seed * 31 + i / 97) % 256);
  return b;
}

Bytes deflate_bytes(const Bytes& in, int window_bits) {
  return fuzz::deflate_bytes(in.data(), in.size(), window_bits);
}

// ---------------------------------------------------------------- config
void config_seeds(const fs::path& dir) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(COMBINER_SOURCE_DIR) / "configs"))
    if (entry.path().extension() == ".yaml" && n < 12)
      write(dir / ("preset_" + std::to_string(n++) + ".yaml"), read(entry.path()));
  config::Config defaults;
  config::validate(defaults);
  write_text(dir / "defaults.yaml", config::to_yaml(defaults));
  write_text(
      dir / "flow.yaml",
      "data: {dataset: cifar10, val_size: 10}\n"
      "model: {layers: 2, width: 32, heads: 2, attention: {type: combiner-fixed, block: 96}}\n"
      "train: {steps: 5, lr: 1.0e-3, final_test: off, out_dir: 'runs/x'}\n");
  write_text(dir / "override.yaml",
             "model.attention.row_len=28\ndata:\n  dataset: fashion_mnist\n");
  write_text(dir / "anchors.yaml", "data: &d {val_size: 3}\nmodel: {attention: {type: axial}}\n");

  // Dictionary: every key name, section, choice and a few YAML tokens.
  std::vector<std::string> words = {"data", "model", "train", "attention", "true", "false", "~",
                                    "null", "!!str", "&a",    "*a",        "{",    "}",     "[",
                                    "]",    ": ",    "\n  ",  "---",       "...",  "1e-3",  "-1",
                                    "0x10", ".inf",  ".nan",  "=",         "'"};
  for (const auto& key : config::key_paths()) {
    words.push_back(key);
    words.push_back(key.substr(key.rfind('.') + 1));
  }
  for (const auto& v : attention::variant_names()) words.push_back(v);
  for (const auto& v : attention::abstraction_names()) words.push_back(v);
  for (const auto& v : data::dataset_names()) words.push_back(v);
  std::string dict;
  for (const auto& w : words) {
    std::string escaped;
    for (char c : w) {
      if (c == '"' || c == '\\' || c < 32) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02X", static_cast<unsigned char>(c));
        escaped += hex;
      } else {
        escaped += c;
      }
    }
    dict += "\"" + escaped + "\"\n";
  }
  write_text(dir.parent_path() / "config.dict", dict);
}

// ---------------------------------------------------------------- idx / CIFAR
Bytes idx3(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols, const Bytes& pixels) {
  Bytes out;
  for (uint32_t v : {magic, count, rows, cols})
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

void fashion_seeds(const fs::path& dir) {
  const Bytes two = idx3(2051, 2, 28, 28, pattern(2 * 784, 1));
  write(dir / "two.idx", two);
  write(dir / "two.idx.gz", deflate_bytes(two, 16 + MAX_WBITS));
  Bytes z = {'Z'};
  z.insert(z.end(), two.begin(), two.end());
  write(dir / "two_gzip_mode", z);
  write(dir / "empty.idx", idx3(2051, 0, 28, 28, {}));
  write(dir / "labels.idx", idx3(2049, 2, 28, 28, pattern(10, 2)));
  const Bytes gz = deflate_bytes(two, 16 + MAX_WBITS);
  Bytes twice = gz;
  twice.insert(twice.end(), gz.begin(), gz.end());
  write(dir / "two_members.gz", twice);
}

void cifar_seeds(const fs::path& dir) {
  write(dir / "raw", pattern(3073, 3));
  Bytes tiled = {'T'};
  const Bytes record = pattern(3073, 4);
  tiled.insert(tiled.end(), record.begin(), record.end());
  write(dir / "tiled_record", tiled);
  write(dir / "tiled_short", {'T', 9, 200, 17});
}

// ---------------------------------------------------------------- packed
void packed_seeds(const fs::path& dir) {
  data::PackedHeader header;
  header.dataset = "fashion_mnist";
  header.shape = {28, 28, 1};
  header.count = 2;
  const Bytes payload = pattern(2 * 784, 5);
  header.payload_crc = data::payload_crc(payload.data(), payload.size(), 1);
  const auto head = data::encode_packed_header(header);
  Bytes file(head.begin(), head.end());
  file.insert(file.end(), payload.begin(), payload.end());
  write(dir / "two.pack", file);
  // Version 2: an images pack with its folder record.
  data::PackedHeader images;
  images.dataset = "images";
  images.shape = {2, 3, 3};
  images.count = 2;
  images.folder = data::FolderRecord{};
  images.folder->copied = 1;
  images.folder->shrunk = 1;
  const Bytes pixels = pattern(2 * 18, 6);
  images.payload_crc = data::payload_crc(pixels.data(), pixels.size(), 1);
  const auto images_head = data::encode_packed_header(images);
  Bytes images_file(images_head.begin(), images_head.end());
  images_file.insert(images_file.end(), pixels.begin(), pixels.end());
  write(dir / "images_v2.pack", images_file);
  write(dir / "header_only", Bytes(head.begin(), head.end()));
  Bytes valid = {'V'};
  valid.insert(valid.end(), payload.begin(), payload.end());
  write(dir / "valid_mode", valid);
}

// ---------------------------------------------------------------- npz
Bytes npy_file(const fs::path& scratch, const torch::Tensor& t) {
  util::save_npy(scratch.string(), t);
  Bytes bytes = read(scratch);
  fs::remove(scratch);
  return bytes;
}

void npz_seeds(const fs::path& dir, const fs::path& scratch) {
  const auto image = [](int seed) {
    const Bytes p = pattern(12288, seed);
    return torch::from_blob(const_cast<uint8_t*>(p.data()), {1, 12288}, torch::kUInt8).clone();
  };
  const Bytes data = npy_file(scratch, image(5));
  const Bytes labels = npy_file(scratch, torch::tensor({int64_t{7}}));
  using fuzz::zip;
  write(dir / "deflated.npz", zip({{"data.npy", data, true}, {"labels.npy", labels, true}}));
  write(dir / "stored.npz", zip({{"labels.npy", labels, false}, {"data.npy", data, false}}));
  const Bytes none = npy_file(scratch, torch::zeros({0, 12288}, torch::kUInt8));
  write(dir / "empty.npz", zip({{"data.npy", none, false}}));
  const Bytes wrong = npy_file(scratch, torch::zeros({2, 5}, torch::kUInt8));
  write(dir / "wrong_shape.npz", zip({{"data.npy", wrong, true}}));
}

// ---------------------------------------------------------------- PNG
void png_seeds(const fs::path& dir) {
  for (const auto& [name, side, channels] :
       std::vector<std::tuple<std::string, int, int>>{{"rgb64.png", 64, 3},
                                                      {"rgb32.png", 32, 3},
                                                      {"grey64.png", 64, 1},
                                                      {"rgba64.png", 64, 4},
                                                      {"rgb1.png", 1, 3}}) {
    const Bytes pixels = pattern(static_cast<size_t>(side * side * channels), side + channels);
    Bytes png;
    stbi_write_png_to_func(
        [](void* context, void* data, int size) {
          auto* out = static_cast<Bytes*>(context);
          out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
        },
        &png,
        side,
        side,
        channels,
        pixels.data(),
        side * channels);
    write(dir / name, png);
  }
}

// ---------------------------------------------------------------- PNG and JPEG, every layout
void image_seeds(const fs::path& dir) {
  using testing::JpegLayout;
  using testing::PngLayout;
  const int w = 16, h = 12;
  const auto samples = [&](int channels, int bits) {
    std::vector<uint16_t> s(static_cast<size_t>(w * h * channels));
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint16_t>((i * 40503u) % (1u << bits));
    return s;
  };
  const std::vector<png_color> palette = {{0, 0, 0}, {250, 10, 10}, {10, 250, 10}, {9, 9, 250}};
  struct Png {
    const char* name;
    PngLayout layout;
    int channels, bits;
  };
  const std::vector<Png> pngs = {
      {"grey1.png", {w, h, PNG_COLOR_TYPE_GRAY, 1, false, {}, {}, true}, 1, 1},
      {"grey8.png", {w, h, PNG_COLOR_TYPE_GRAY, 8, false, {}, {}, true}, 1, 8},
      {"grey16.png", {w, h, PNG_COLOR_TYPE_GRAY, 16, false, {}, {}, true}, 1, 16},
      {"grey_alpha.png", {w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, {}, {}, true}, 2, 8},
      {"palette4_trns.png", {w, h, PNG_COLOR_TYPE_PALETTE, 4, false, palette, {0, 99}, true}, 1, 2},
      {"palette8.png", {w, h, PNG_COLOR_TYPE_PALETTE, 8, true, palette, {}, true}, 1, 2},
      {"rgb8_interlaced.png", {w, h, PNG_COLOR_TYPE_RGB, 8, true, {}, {}, true}, 3, 8},
      {"rgb16.png", {w, h, PNG_COLOR_TYPE_RGB, 16, false, {}, {}, true}, 3, 16},
      {"rgba8.png", {w, h, PNG_COLOR_TYPE_RGB_ALPHA, 8, false, {}, {}, true}, 4, 8},
      {"rgba16.png", {w, h, PNG_COLOR_TYPE_RGB_ALPHA, 16, false, {}, {}, true}, 4, 16},
  };
  const auto put = [&](const char* name, const Bytes& file) {
    if (file.empty()) throw std::runtime_error(std::string("cannot encode seed ") + name);
    write(dir / name, file);
  };
  for (const Png& png : pngs)
    put(png.name, testing::png_file(png.layout, samples(png.channels, png.bits)));
  const auto pixels = [&](int channels) {
    Bytes p(static_cast<size_t>(w * h * channels));
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i % 7 * 30 + i / 50);
    return p;
  };
  struct Jpeg {
    const char* name;
    JpegLayout layout;
    int channels;
  };
  const std::vector<Jpeg> jpegs = {
      {"baseline.jpg", {w, h, JCS_RGB, JCS_YCbCr, 75, false}, 3},
      {"baseline_grey.jpg", {w, h, JCS_GRAYSCALE, JCS_GRAYSCALE, 75, false}, 1},
      {"progressive.jpg", {w, h, JCS_RGB, JCS_YCbCr, 75, true}, 3},
      {"progressive_grey.jpg", {w, h, JCS_GRAYSCALE, JCS_GRAYSCALE, 75, true}, 1},
      {"rgb.jpg", {w, h, JCS_RGB, JCS_RGB, 75, false}, 3},
      {"cmyk.jpg", {w, h, JCS_CMYK, JCS_CMYK, 75, false}, 4},
      {"ycck_progressive.jpg", {w, h, JCS_CMYK, JCS_YCCK, 75, true}, 4},
  };
  for (const Jpeg& jpeg : jpegs)
    put(jpeg.name, testing::jpeg_file(jpeg.layout, pixels(jpeg.channels)));
}

// ---------------------------------------------------------------- npy
void npy_seeds(const fs::path& dir, const fs::path& scratch) {
  write(dir / "float.npy", npy_file(scratch, torch::arange(12, torch::kFloat).reshape({3, 4})));
  write(dir / "uint8.npy", npy_file(scratch, torch::tensor({1, 2, 250}, torch::kUInt8)));
  write(dir / "scalar.npy", npy_file(scratch, torch::tensor(int64_t{42})));
  write(dir / "empty.npy", npy_file(scratch, torch::zeros({0, 3})));
  // Version 2 header, as numpy writes for very long headers, and a double array.
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  std::string header = dict + std::string(64 - (12 + dict.size() + 1) % 64, ' ') + "\n";
  Bytes v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0};
  fuzz::put_le(v2, header.size(), 4);
  v2.insert(v2.end(), header.begin(), header.end());
  const double values[2] = {1.5, -2.0};
  v2.insert(v2.end(),
            reinterpret_cast<const uint8_t*>(values),
            reinterpret_cast<const uint8_t*>(values) + 16);
  write(dir / "v2_double.npy", v2);
}

// ---------------------------------------------------------------- checkpoint
void checkpoint_seeds(const fs::path& dir, const fs::path& scratch) {
  train::Checkpoint c;
  c.config_yaml = "data:\n  dataset: cifar10\n";
  c.step = 3;
  c.samples_seen = 48;
  c.model = {{"head.weight", torch::ones({2, 3})}, {"head.bias", torch::zeros({2})}};
  c.ema = {{"head.bias", torch::full({2}, 0.5)}};
  c.optimizer = {'o', 'p', 't'};
  c.rng_state = torch::arange(8, torch::kUInt8);
  train::save_checkpoint(scratch.string(), c);
  const Bytes file = read(scratch);
  fs::remove(scratch);
  Bytes whole = {0};  // first byte % 4 selects the target's mode: 0 whole file
  whole.insert(whole.end(), file.begin(), file.end());
  write(dir / "whole", whole);
  Bytes payload = {1};  // odd: the payload; the target adds the header itself
  payload.insert(payload.end(), file.begin() + 20, file.end());
  write(dir / "payload", payload);
  // 2: the pickle alone; the target adds the container. Its tensors get 64-byte records
  // "0".."7", enough for the small tensors above.
  const auto container = data::ZipArchive::in_memory(file.data() + 20, file.size() - 20, "seed");
  Bytes pickle = {2};
  const Bytes pkl = container.read("archive/data.pkl");
  pickle.insert(pickle.end(), pkl.begin(), pkl.end());
  write(dir / "pickle", pickle);
}

// ---------------------------------------------------------------- safetensors
void safetensors_seeds(const fs::path& dir, const fs::path& scratch) {
  util::save_safetensors(scratch.string(),
                         {{"blocks.0.qkv.weight", torch::arange(12, torch::kFloat).view({3, 4})},
                          {"head.bias", torch::ones({2}).to(torch::kBFloat16)},
                          {"index", torch::arange(3, torch::kLong)},
                          {"empty", torch::zeros({0, 2})}},
                         {{"format", "pt"}, {"config", "model:\n  width: 16\n"}});
  write(dir / "model.safetensors", read(scratch));
  util::save_safetensors(scratch.string(), {{"x", torch::tensor(1.5)}}, {});
  write(dir / "scalar.safetensors", read(scratch));
  util::save_safetensors(scratch.string(), {}, {});
  write(dir / "empty.safetensors", read(scratch));
  fs::remove(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <out folder>\n");
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const fs::path scratch = out / "scratch.tmp";
    fs::create_directories(out);
    config_seeds(out / "config");
    fashion_seeds(out / "fashion_mnist");
    cifar_seeds(out / "cifar10");
    packed_seeds(out / "packed");
    npz_seeds(out / "imagenet64_npz", scratch);
    png_seeds(out / "imagenet64_png");
    image_seeds(out / "image_decode");
    npy_seeds(out / "npy", scratch);
    checkpoint_seeds(out / "checkpoint", scratch);
    safetensors_seeds(out / "safetensors", scratch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
