// .npy reading and writing. The header is a Python dict literal; only the three keys numpy
// writes (descr, fortran_order, shape) are parsed, with a small scanner rather than a general
// Python parser. Data is read straight into the tensor's storage in one call.
#include "util/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "util/atomic_file.h"

namespace combiner::util {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr int64_t kMaxBytes = int64_t{1} << 56;  // 64 PiB: larger than any real .npy

struct DtypeEntry {
  const char* descr;
  torch::ScalarType dtype;
};
constexpr DtypeEntry kDtypes[] = {
    {"<f4", torch::kFloat},
    {"<f8", torch::kDouble},
    {"|u1", torch::kUInt8},
    {"<i8", torch::kLong},
    {"<i4", torch::kInt},
};

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw std::runtime_error("npy '" + name + "': " + what);
}

// Position just after `'key':` (whitespace allowed around the colon), or fail.
size_t find_value(const std::string& header, const std::string& key, const std::string& name) {
  size_t pos = header.find("'" + key + "'");
  if (pos == std::string::npos) pos = header.find("\"" + key + "\"");
  if (pos == std::string::npos) fail(name, "header has no '" + key + "' key: " + header);
  pos += key.size() + 2;
  while (pos < header.size() && std::isspace(static_cast<unsigned char>(header[pos]))) ++pos;
  if (pos >= header.size() || header[pos] != ':') fail(name, "malformed header: " + header);
  ++pos;
  while (pos < header.size() && std::isspace(static_cast<unsigned char>(header[pos]))) ++pos;
  return pos;
}

NpyHeader parse_dict(const std::string& header, const std::string& name) {
  NpyHeader result;
  // descr: a quoted string.
  size_t pos = find_value(header, "descr", name);
  const char quote = pos < header.size() ? header[pos] : '\0';
  const size_t end =
      (quote == '\'' || quote == '"') ? header.find(quote, pos + 1) : std::string::npos;
  if (end == std::string::npos)
    fail(name, "descr is not a quoted string (structured dtype?): " + header);
  result.descr = header.substr(pos + 1, end - pos - 1);
  bool known = false;
  for (const auto& entry : kDtypes)
    if (result.descr == entry.descr) result.dtype = entry.dtype, known = true;
  if (!known)
    fail(name, "unsupported dtype '" + result.descr + "', expected one of <f4 <f8 |u1 <i8 <i4");

  pos = find_value(header, "fortran_order", name);
  if (header.compare(pos, 5, "False") != 0)
    fail(name, "expected fortran_order False (C order), found " + header.substr(pos, 5));

  // shape: a tuple of non-negative integers, e.g. (), (3,), (2, 5).
  pos = find_value(header, "shape", name);
  if (pos >= header.size() || header[pos] != '(') fail(name, "shape is not a tuple: " + header);
  const size_t close = header.find(')', pos);
  if (close == std::string::npos) fail(name, "unterminated shape tuple: " + header);
  const std::string tuple = header.substr(pos + 1, close - pos - 1);
  size_t i = 0;
  while (i < tuple.size()) {
    if (std::isspace(static_cast<unsigned char>(tuple[i])) || tuple[i] == ',') {
      ++i;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(tuple[i])))
      fail(name, "bad shape entry in '(" + tuple + ")'");
    int64_t value = 0;
    while (i < tuple.size() && std::isdigit(static_cast<unsigned char>(tuple[i]))) {
      value = value * 10 + (tuple[i] - '0');
      if (value > kMaxBytes) fail(name, "absurd dimension in shape '(" + tuple + ")'");
      ++i;
    }
    result.shape.push_back(value);
  }
  // The element count and byte size must fit comfortably in int64 (no file is that big), so
  // numel() and data_bytes() never overflow and a tensor of this shape can be asked for.
  int64_t bytes = static_cast<int64_t>(c10::elementSize(result.dtype));
  for (int64_t d : result.shape) {
    if (d != 0 && bytes > kMaxBytes / d)
      fail(name, "shape '(" + tuple + ")' of " + result.descr + " is larger than any file");
    bytes *= d;
  }
  return result;
}

// Header length and prefix size from the fixed part at the start of an .npy (its first 12
// bytes, or fewer if the file is shorter); 0, 0 if the magic or version is wrong.
std::pair<size_t, size_t> header_extent(const uint8_t* data, size_t size) {
  if (size < kMagicSize + 4 || std::memcmp(data, kMagic, kMagicSize) != 0) return {0, 0};
  if (data[6] == 1) return {data[8] | (size_t{data[9]} << 8), 10};
  if ((data[6] == 2 || data[6] == 3) && size >= 12)
    return {data[8] | (size_t{data[9]} << 8) | (size_t{data[10]} << 16) | (size_t{data[11]} << 24),
            12};
  return {0, 0};
}

}  // namespace

int64_t NpyHeader::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t NpyHeader::data_bytes() const {
  return static_cast<size_t>(numel()) * c10::elementSize(dtype);
}

NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& name) {
  if (size < kMagicSize + 4 || std::memcmp(data, kMagic, kMagicSize) != 0)
    fail(name, "not an .npy file (expected the magic \\x93NUMPY at the start)");
  const int major = data[6];
  if (major < 1 || major > 3)
    fail(name, "unsupported format version " + std::to_string(major) + ", expected 1, 2 or 3");
  const auto [header_len, prefix] = header_extent(data, size);
  if (prefix == 0) fail(name, "truncated header");
  if (size < prefix + header_len)
    fail(name,
         "truncated header: expected " + std::to_string(prefix + header_len) + " bytes, found " +
             std::to_string(size));
  NpyHeader header =
      parse_dict(std::string(reinterpret_cast<const char*>(data) + prefix, header_len), name);
  header.data_offset = prefix + header_len;
  return header;
}

torch::Tensor npy_from_bytes(const uint8_t* data, size_t size, const std::string& name) {
  const NpyHeader header = parse_npy_header(data, size, name);
  const size_t found = size - header.data_offset;
  if (found != header.data_bytes())
    fail(name,
         "expected " + std::to_string(header.data_bytes()) + " data bytes for shape and " +
             header.descr + ", found " + std::to_string(found));
  torch::Tensor tensor = torch::empty(header.shape, torch::TensorOptions().dtype(header.dtype));
  if (found > 0) std::memcpy(tensor.data_ptr(), data + header.data_offset, found);
  return tensor;
}

torch::Tensor load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open file: ") + std::strerror(errno));
  std::error_code error;
  const auto file_size = std::filesystem::file_size(path, error);
  if (error) fail(path, "cannot read file size: " + error.message());

  // The fixed prefix gives the header length; then read the header itself (no more of it than
  // the file holds, whatever the prefix claims).
  std::vector<uint8_t> head(std::min<uint64_t>(file_size, 12));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  const auto [header_len, prefix] = header_extent(head.data(), head.size());
  const size_t have = head.size();
  const size_t needed = std::min<uint64_t>(prefix + header_len, file_size);
  if (needed > have) {
    head.resize(needed);
    in.read(reinterpret_cast<char*>(head.data()) + have,
            static_cast<std::streamsize>(needed - have));
  }
  const NpyHeader header = parse_npy_header(head.data(), head.size(), path);
  const uint64_t found = file_size - header.data_offset;
  if (found != header.data_bytes())
    fail(path,
         "expected " + std::to_string(header.data_bytes()) + " data bytes after the header (" +
             header.descr + "), found " + std::to_string(found) +
             (found < header.data_bytes() ? " (truncated file)" : ""));
  torch::Tensor tensor = torch::empty(header.shape, torch::TensorOptions().dtype(header.dtype));
  in.seekg(static_cast<std::streamoff>(header.data_offset));
  in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(found));
  if (static_cast<uint64_t>(in.gcount()) != found) fail(path, "read error in the data");
  return tensor;
}

void save_npy(const std::string& path, const torch::Tensor& tensor) {
  const char* descr = nullptr;
  switch (tensor.scalar_type()) {
    case torch::kFloat:
      descr = "<f4";
      break;
    case torch::kUInt8:
      descr = "|u1";
      break;
    case torch::kLong:
      descr = "<i8";
      break;
    default:
      throw std::invalid_argument("save_npy '" + path + "': expected a float32, uint8 or int64 " +
                                  "tensor, found " +
                                  std::string(c10::toString(tensor.scalar_type())));
  }
  const torch::Tensor data = tensor.detach().to(torch::kCPU).contiguous();
  std::string shape = "(";
  for (int64_t d : data.sizes()) shape += std::to_string(d) + ", ";
  if (data.dim() > 0) shape.erase(shape.size() - (data.dim() == 1 ? 1 : 2));
  shape += ")";
  std::string dict =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads the header with spaces and a newline so the data starts 64-byte aligned.
  const bool v2 = dict.size() + 11 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  const size_t len = dict.size();
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(kMagic, kMagicSize);
    const char version[2] = {static_cast<char>(v2 ? 2 : 1), 0};
    out.write(version, 2);
    for (size_t i = 0; i < prefix - 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out.write(dict.data(), static_cast<std::streamsize>(len));
    out.write(static_cast<const char*>(data.data_ptr()),
              static_cast<std::streamsize>(data.numel() * data.element_size()));
  });
}

}  // namespace combiner::util
