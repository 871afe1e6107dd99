// The strict unpickler behind read_torch_archive: a pickle stack machine for the opcodes
// torch::pickle_save writes, whose every pop, mark and memo use is checked, which calls only
// the three callables such archives use, and which builds tensors itself from storage records
// read through the bounds- and CRC-checked zip reader.
#include "data/torch_archive.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "data/zip.h"

namespace combiner::data {
namespace {

using Value = PickleValue;
using ValuePtr = std::shared_ptr<PickleValue>;

ValuePtr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

torch::ScalarType storage_type(const std::string& global) {
  static const std::pair<const char*, torch::ScalarType> kTypes[] = {
      {"torch FloatStorage", torch::kFloat},
      {"torch DoubleStorage", torch::kDouble},
      {"torch HalfStorage", torch::kHalf},
      {"torch BFloat16Storage", torch::kBFloat16},
      {"torch LongStorage", torch::kLong},
      {"torch IntStorage", torch::kInt},
      {"torch ShortStorage", torch::kShort},
      {"torch CharStorage", torch::kChar},
      {"torch ByteStorage", torch::kByte},
      {"torch BoolStorage", torch::kBool}};
  for (const auto& [name, type] : kTypes)
    if (global == name) return type;
  return torch::ScalarType::Undefined;
}

class Unpickler {
 public:
  Unpickler(const ZipArchive& archive, std::string root, std::string name)
      : archive_(archive), root_(std::move(root)), name_(std::move(name)) {}

  ValuePtr run() {
    const std::vector<uint8_t> pickle = read(root_ + "/data.pkl");
    bytes_ = &pickle;
    if (take(1) != 0x80 || take(1) != 2) fail("expected a protocol 2 pickle");
    for (;;) {
      const auto op = static_cast<char>(take(1));
      if (op == '.') break;
      step(op);
    }
    if (at_ != pickle.size()) fail("bytes after the end of the pickle");
    if (stack_.size() != 1 || stack_[0]->kind != Value::kDict) fail("the archive is not one dict");
    return stack_[0];
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(name_ + ": data.pkl, byte " + std::to_string(at_) + ": " + what);
  }
  std::vector<uint8_t> read(const std::string& member) const {
    try {
      return archive_.read(member);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(name_ + ": " + e.what());
    }
  }
  uint64_t take(int n) {
    if (bytes_->size() - at_ < static_cast<size_t>(n)) fail("unexpected end");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | (*bytes_)[at_ + i];
    at_ += n;
    return v;
  }
  std::string take_text(uint64_t n) {
    if (bytes_->size() - at_ < n) fail("a string runs past the end");
    std::string text(reinterpret_cast<const char*>(bytes_->data()) + at_, n);
    at_ += n;
    return text;
  }
  std::string take_line() {
    const auto begin = bytes_->begin() + static_cast<std::ptrdiff_t>(at_);
    const auto end = std::find(begin, bytes_->end(), '\n');
    if (end == bytes_->end()) fail("unterminated GLOBAL");
    std::string line(begin, end);
    at_ += line.size() + 1;
    return line;
  }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop() {
    if (stack_.empty() || stack_.back()->kind == Value::kMark) fail("stack underflow");
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  ValuePtr pop(Value::Kind kind, const char* what) {
    ValuePtr v = pop();
    if (v->kind != kind) fail(std::string("expected ") + what);
    return v;
  }
  std::vector<ValuePtr> pop_to_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark) + 1,
                                stack_.end());
    stack_.resize(mark);
    for (const auto& item : items)
      if (item->kind == Value::kMark) fail("unbalanced MARK");
    return items;
  }
  ValuePtr tuple(std::vector<ValuePtr> items) {
    ValuePtr t = make(Value::kTuple);
    t->items = std::move(items);
    return t;
  }
  void memo_put(uint64_t id) {
    if (stack_.empty() || stack_.back()->kind == Value::kMark || id > memo_.size())
      fail("bad memo store");
    if (id == memo_.size())
      memo_.push_back(stack_.back());
    else
      memo_[id] = stack_.back();
  }
  ValuePtr memo_get(uint64_t id) {
    if (id >= memo_.size()) fail("memo entry " + std::to_string(id) + " was never stored");
    return memo_[id];
  }
  // Dicts hold strings to scalars, tensors or dicts that hold no dicts: two levels, as the
  // state has, and no cycles (a dict inside itself would never be freed).
  void set_items(const ValuePtr& dict, std::vector<ValuePtr> items) {
    if (dict->kind != Value::kDict || items.size() % 2 != 0) fail("bad SETITEMS");
    for (size_t i = 0; i < items.size(); i += 2) {
      const ValuePtr& value = items[i + 1];
      if (items[i]->kind != Value::kStr) fail("a dict key is not a string");
      if (value->kind == Value::kTuple || value->kind == Value::kGlobal ||
          value->kind == Value::kStorage || value->kind == Value::kOrdered)
        fail("a dict value of an unexpected kind");
      if (value->kind == Value::kDict) {
        const bool holds_dict =
            std::any_of(value->items.begin(), value->items.end(), [](const ValuePtr& v) {
              return v->kind == Value::kDict;
            });
        if (dict->nested || value == dict || holds_dict) fail("dicts nested too deep");
        value->nested = true;
      }
    }
    dict->items.insert(dict->items.end(), items.begin(), items.end());
  }
  int64_t integer(const ValuePtr& v) {
    if (v->kind != Value::kInt || v->number < 0) fail("expected a non-negative integer");
    return v->number;
  }
  std::vector<int64_t> integers(const ValuePtr& v) {
    if (v->kind != Value::kTuple || v->items.size() > 64) fail("expected a tuple of integers");
    std::vector<int64_t> out;
    for (const auto& item : v->items) out.push_back(integer(item));
    return out;
  }
  // BINPERSID ('storage', torch.<T>Storage, key, location, numel): the record <root>/data/key.
  ValuePtr storage(const ValuePtr& id) {
    const auto& a = id->items;
    if (id->kind != Value::kTuple || a.size() != 5 || a[0]->kind != Value::kStr ||
        a[0]->text != "storage" || a[1]->kind != Value::kGlobal || a[2]->kind != Value::kStr ||
        a[2]->text.empty() || a[2]->text.find_first_not_of("0123456789") != std::string::npos)
      fail("bad storage reference");
    const torch::ScalarType type = storage_type(a[1]->text);
    if (type == torch::ScalarType::Undefined) fail("unknown storage type '" + a[1]->text + "'");
    const int64_t numel = integer(a[4]);
    auto& cached = storages_[a[2]->text];
    if (!cached.defined()) {
      const std::string record = root_ + "/data/" + a[2]->text;
      const std::vector<uint8_t> bytes = read(record);
      const size_t element = c10::elementSize(type);
      if (bytes.size() % element != 0) fail("record " + record + " is not whole elements");
      cached = torch::empty({static_cast<int64_t>(bytes.size() / element)}, type);
      if (!bytes.empty()) std::memcpy(cached.data_ptr(), bytes.data(), bytes.size());
    }
    if (cached.scalar_type() != type || cached.numel() < numel)
      fail("storage " + a[2]->text + " is smaller or of another type than its reference says");
    ValuePtr v = make(Value::kStorage);
    v->tensor = cached;
    return v;
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict()).
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& a) {
    if (a.size() != 6 || a[0]->kind != Value::kStorage || a[4]->kind != Value::kBool ||
        a[5]->kind != Value::kOrdered)
      fail("bad _rebuild_tensor_v2 arguments");
    const int64_t offset = integer(a[1]);
    const std::vector<int64_t> size = integers(a[2]), stride = integers(a[3]);
    if (size.size() != stride.size()) fail("a tensor's size and stride differ in length");
    int64_t last = offset, numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < size.size(); ++d) {
      int64_t extent = 0;
      overflow = overflow || __builtin_mul_overflow(numel, size[d], &numel) ||
                 (size[d] > 0 && (__builtin_mul_overflow(size[d] - 1, stride[d], &extent) ||
                                  __builtin_add_overflow(last, extent, &last)));
    }
    const torch::Tensor& flat = a[0]->tensor;
    if (overflow || (numel > 0 && last >= flat.numel()))
      fail("a tensor reaches past the end of its storage");
    ValuePtr v = make(Value::kTensor);
    v->tensor = flat.as_strided(size, stride, offset);
    return v;
  }
  void reduce() {
    const ValuePtr args = pop(Value::kTuple, "a tuple of arguments");
    const ValuePtr callable = pop(Value::kGlobal, "a GLOBAL to call");
    const auto& a = args->items;
    if (callable->text == "torch.jit._pickle restore_type_tag") {
      if (a.size() != 2 || a[0]->kind != Value::kDict || a[1]->kind != Value::kStr)
        fail("bad restore_type_tag arguments");
      push(a[0]);
    } else if (callable->text == "torch._utils _rebuild_tensor_v2") {
      push(rebuild_tensor(a));
    } else if (callable->text == "collections OrderedDict" && a.empty()) {
      push(make(Value::kOrdered));
    } else {
      fail("cannot call '" + callable->text + "'");
    }
  }
  void step(char op) {
    switch (op) {
      case '(':
        marks_.push_back(stack_.size());
        push(make(Value::kMark));
        break;
      case '}':
        push(make(Value::kDict));
        break;
      case ')':
        push(tuple({}));
        break;
      case 't':
        push(tuple(pop_to_mark()));
        break;
      case '\x85':
      case '\x86':
      case '\x87': {
        std::vector<ValuePtr> items(static_cast<size_t>(op - '\x84'));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        push(tuple(std::move(items)));
        break;
      }
      case 'N':
        push(make(Value::kNone));
        break;
      case '\x88':
      case '\x89': {
        ValuePtr v = make(Value::kBool);
        v->number = op == '\x88';
        push(v);
        break;
      }
      case 'K':
      case 'M':
      case 'J':
      case '\x8a': {
        ValuePtr v = make(Value::kInt);
        if (op == 'J')
          v->number = static_cast<int32_t>(take(4));
        else if (op != '\x8a')
          v->number = static_cast<int64_t>(take(op == 'K' ? 1 : 2));
        else {
          const auto n = static_cast<int>(take(1));
          if (n > 8) fail("integer wider than 64 bits");
          const uint64_t raw = n == 0 ? 0 : take(n);
          v->number = n == 0 || n == 8 ? static_cast<int64_t>(raw)
                                       : static_cast<int64_t>(raw << (64 - 8 * n)) >> (64 - 8 * n);
        }
        push(v);
        break;
      }
      case 'G': {
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | take(1);  // big-endian
        ValuePtr v = make(Value::kFloat);
        v->number = static_cast<int64_t>(bits);
        push(v);
        break;
      }
      case 'X': {
        ValuePtr v = make(Value::kStr);
        v->text = take_text(take(4));
        push(v);
        break;
      }
      case 'c': {
        ValuePtr v = make(Value::kGlobal);
        v->text = take_line();
        v->text += " " + take_line();
        push(v);
        break;
      }
      case 'q':
        memo_put(take(1));
        break;
      case 'r':
        memo_put(take(4));
        break;
      case 'h':
        push(memo_get(take(1)));
        break;
      case 'j':
        push(memo_get(take(4)));
        break;
      case 'u': {
        std::vector<ValuePtr> items = pop_to_mark();
        if (stack_.empty()) fail("SETITEMS without a dict");
        set_items(stack_.back(), std::move(items));
        break;
      }
      case 's': {
        ValuePtr value = pop(), key = pop();
        if (stack_.empty()) fail("SETITEM without a dict");
        set_items(stack_.back(), {key, value});
        break;
      }
      case 'R':
        reduce();
        break;
      case 'Q':
        push(storage(pop(Value::kTuple, "a storage reference")));
        break;
      default:
        fail("unsupported opcode " + std::to_string(static_cast<unsigned char>(op)));
    }
  }

  const ZipArchive& archive_;
  std::string root_, name_;
  const std::vector<uint8_t>* bytes_ = nullptr;
  size_t at_ = 0;
  std::vector<ValuePtr> stack_, memo_;
  std::vector<size_t> marks_;
  std::map<std::string, torch::Tensor> storages_;
};

}  // namespace

std::shared_ptr<const PickleValue> read_torch_archive(const uint8_t* data,
                                                      size_t size,
                                                      const std::string& name) {
  std::string root;
  std::unique_ptr<ZipArchive> archive;
  try {
    archive = std::make_unique<ZipArchive>(ZipArchive::in_memory(data, size, "archive"));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(name + ": " + e.what());
  }
  // Like LibTorch, take the archive's folder from its first member ("archive/data.pkl").
  if (!archive->entries().empty()) {
    const std::string& first = archive->entries()[0].name;
    root = first.substr(0, first.find('/'));
  }
  return Unpickler(*archive, root, name).run();
}

std::shared_ptr<const PickleValue> dict_entry(const PickleValue& dict, const std::string& key) {
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2)
    if (dict.items[i]->text == key) return dict.items[i + 1];
  return nullptr;
}

}  // namespace combiner::data
