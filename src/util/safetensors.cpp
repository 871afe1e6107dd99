// safetensors: the header is read with util/json.h, then every rule of the format is checked
// before any tensor is allocated, so a damaged header cannot ask for more memory than the file
// holds.
#include "util/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "util/atomic_file.h"
#include "util/json.h"

namespace combiner::util {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

struct StDtype {
  const char* name;
  torch::ScalarType dtype;
};
constexpr StDtype kStDtypes[] = {
    {"F32", torch::kFloat},
    {"F64", torch::kDouble},
    {"F16", torch::kHalf},
    {"BF16", torch::kBFloat16},
    {"I64", torch::kLong},
    {"I32", torch::kInt},
    {"I16", torch::kShort},
    {"I8", torch::kChar},
    {"U8", torch::kByte},
};

[[noreturn]] void st_refuse(const std::string& name, const std::string& what) {
  throw std::runtime_error(name + ": not a valid safetensors file: " + what);
}

uint64_t read_u64_le(const uint8_t* at) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | at[i];
  return value;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

SafetensorsEntry read_entry(const std::string& tensor,
                            const JsonValue& value,
                            const std::string& name) {
  const std::string where = "tensor '" + tensor + "': ";
  if (value.kind != JsonValue::Kind::kObject)
    st_refuse(name, where + "expected an object, found " + json_kind_name(value.kind));
  for (const auto& [key, _] : value.members)
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      st_refuse(name, where + "unexpected key \"" + key + "\"");
  SafetensorsEntry e;
  e.name = tensor;
  const JsonValue* dtype = value.find("dtype");
  if (!dtype || dtype->kind != JsonValue::Kind::kString)
    st_refuse(name, where + "\"dtype\" is missing or not a string");
  bool known = false;
  for (const auto& d : kStDtypes)
    if (dtype->text == d.name) e.dtype_name = d.name, e.dtype = d.dtype, known = true;
  if (!known)
    st_refuse(name,
              where + "unsupported dtype \"" + dtype->text +
                  "\" (this reader takes F32 F64 F16 BF16 I64 I32 I16 I8 U8)");
  const JsonValue* shape = value.find("shape");
  if (!shape || shape->kind != JsonValue::Kind::kArray)
    st_refuse(name, where + "\"shape\" is missing or not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& dim : shape->items) {
    const auto size = dim.as_index();
    if (!size) st_refuse(name, where + "\"shape\" holds something other than sizes >= 0");
    overflow = overflow || __builtin_mul_overflow(numel, *size, &numel);
    e.shape.push_back(static_cast<int64_t>(*size));
  }
  const JsonValue* offsets = value.find("data_offsets");
  if (!offsets || offsets->kind != JsonValue::Kind::kArray || offsets->items.size() != 2 ||
      !offsets->items[0].as_index() || !offsets->items[1].as_index())
    st_refuse(name, where + "\"data_offsets\" is missing or not [begin, end]");
  e.begin = *offsets->items[0].as_index();
  e.end = *offsets->items[1].as_index();
  if (e.end < e.begin)
    st_refuse(name,
              where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] end before they begin");
  const uint64_t element = c10::elementSize(e.dtype);
  uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, element, &bytes) || bytes != e.end - e.begin)
    st_refuse(name,
              where + e.dtype_name + " " + shape_text(e.shape) + " needs " +
                  (overflow ? std::string("more bytes than any file holds")
                            : std::to_string(numel) + " x " + std::to_string(element) + " bytes") +
                  ", data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] hold " + std::to_string(e.end - e.begin));
  return e;
}

// N, the header's length, once it is known to fit in a file of file_size bytes.
uint64_t header_length(const uint8_t* data,
                       size_t size,
                       uint64_t file_size,
                       const std::string& name) {
  if (file_size < 8 || size < 8)
    st_refuse(name,
              "shorter than the 8-byte header length (" + std::to_string(file_size) + " bytes)");
  const uint64_t n = read_u64_le(data);
  if (n > kMaxHeaderBytes || n > file_size - 8)
    st_refuse(name,
              "header length " + std::to_string(n) + " is past the end of the file (" +
                  std::to_string(file_size) + " bytes) or above the format's 100 MB limit");
  return n;
}

torch::Tensor empty_for(const SafetensorsEntry& e) {
  return torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
}

}  // namespace

const char* safetensors_dtype_name(torch::ScalarType dtype) {
  for (const auto& d : kStDtypes)
    if (d.dtype == dtype) return d.name;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data,
                                           size_t size,
                                           uint64_t file_size,
                                           const std::string& name) {
  const uint64_t n = header_length(data, size, file_size, name);
  if (n > size - 8) st_refuse(name, "the header is cut short");
  const std::string_view text(reinterpret_cast<const char*>(data) + 8, n);
  JsonValue root;
  try {
    root = parse_json(text);
  } catch (const std::runtime_error& e) {
    st_refuse(name, std::string("the header is not JSON: ") + e.what());
  }
  if (root.kind != JsonValue::Kind::kObject)
    st_refuse(name, std::string("the header is ") + json_kind_name(root.kind) + ", not an object");
  SafetensorsHeader header;
  header.data_offset = 8 + n;
  for (const auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.kind != JsonValue::Kind::kObject)
        st_refuse(name, "\"__metadata__\" is not an object");
      for (const auto& [k, v] : value.members) {
        if (v.kind != JsonValue::Kind::kString)
          st_refuse(name, "\"__metadata__\" entry \"" + k + "\" is not a string");
        header.metadata[k] = v.text;
      }
      continue;
    }
    header.entries.push_back(read_entry(key, value, name));
  }
  // The tensors must tile the data section: sorted by begin, each starting where the previous
  // ended, the last ending at the end of the file.
  std::stable_sort(header.entries.begin(), header.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : header.entries) {
    if (e.begin < expected)
      st_refuse(name,
                "tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                    std::to_string(e.end) + "] overlap those of '" + previous->name + "' [" +
                    std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "]");
    if (e.begin > expected)
      st_refuse(name,
                "tensor '" + e.name + "': data_offsets begin at " + std::to_string(e.begin) +
                    ", expected " + std::to_string(expected) + " (a gap after " +
                    (previous ? "'" + previous->name + "'" : std::string("the header")) + ")");
    expected = e.end;
    previous = &e;
  }
  const uint64_t data_bytes = file_size - header.data_offset;
  if (expected != data_bytes)
    st_refuse(name,
              (previous ? "tensor '" + previous->name + "': data_offsets end at "
                        : std::string("no tensors: data ends at ")) +
                  std::to_string(expected) + " but the data section holds " +
                  std::to_string(data_bytes) + " bytes" +
                  (expected > data_bytes ? " (truncated file?)" : " (extra bytes at the end)"));
  return header;
}

Safetensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  const SafetensorsHeader header = parse_safetensors_header(data, size, size, name);
  Safetensors out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    torch::Tensor t = empty_for(e);
    if (e.end > e.begin)
      std::memcpy(t.data_ptr(), data + header.data_offset + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

Safetensors load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot read: " + ec.message());
  uint8_t length[8] = {};
  in.read(reinterpret_cast<char*>(length), 8);
  // The length is checked against the file size before the header is allocated.
  const uint64_t n = header_length(length, static_cast<size_t>(in.gcount()), file_size, path);
  std::vector<uint8_t> head(8 + n);
  std::copy_n(length, 8, head.begin());
  in.read(reinterpret_cast<char*>(head.data()) + 8, static_cast<std::streamsize>(head.size() - 8));
  if (static_cast<size_t>(in.gcount()) != head.size() - 8)
    throw std::runtime_error(path + ": cannot read the safetensors header");
  const SafetensorsHeader header =
      parse_safetensors_header(head.data(), head.size(), file_size, path);
  Safetensors out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    torch::Tensor t = empty_for(e);
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    if (static_cast<uint64_t>(in.gcount()) != e.end - e.begin)
      throw std::runtime_error(path + ": tensor '" + e.name + "': cannot read its data");
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

void save_safetensors(const std::string& path,
                      const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> data;
  std::set<std::string> names;
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      json += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    json += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const char* dtype = safetensors_dtype_name(tensor.scalar_type());
    if (!dtype)
      throw std::invalid_argument(path + ": tensor '" + name + "' has dtype " +
                                  std::string(c10::toString(tensor.scalar_type())) +
                                  ", which safetensors files here do not hold");
    if (name.empty() || name == "__metadata__" || !names.insert(name).second)
      throw std::invalid_argument(path + ": tensor name '" + name +
                                  "' is empty, reserved or repeated");
    data.push_back(tensor.detach().to(torch::kCPU).contiguous());
    const uint64_t bytes = data.back().nbytes();
    json += std::string(json.size() > 1 ? "," : "") + json_quote(name) + ":{\"dtype\":\"" + dtype +
            "\",\"shape\":[";
    for (int64_t d = 0; d < tensor.dim(); ++d)
      json += (d ? "," : "") + std::to_string(tensor.size(d));
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) +
            "]}";
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t n = json.size();
  write_file_atomic(path, [&](std::ostream& out) {
    char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(length, 8);
    out.write(json.data(), static_cast<std::streamsize>(json.size()));
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  });
}

}  // namespace combiner::util
