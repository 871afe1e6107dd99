// A strict reader of torch.save / torch::pickle_save archives: a zip container holding a
// protocol-2 pickle (data.pkl) and one record per tensor storage (data/<key>). It accepts the
// plain values and tensors such archives hold (dicts with string keys, strings, ints, floats,
// bools, None, tuples, tensors) and nothing else: no other callables, no other opcodes. Used
// instead of torch::pickle_load, which LibTorch 1.13 runs on an unchecked pickle stack machine
// (REDUCE on an empty stack reads past a vector: pytorch#77573) and an archive reader that
// allocates whatever the zip directory claims.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace combiner::data {

struct PickleValue {
  enum Kind {
    kMark,
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kTuple,
    kDict,
    kGlobal,
    kOrdered,
    kStorage,
    kTensor
  };
  Kind kind = kNone;
  int64_t number = 0;                               // kBool, kInt; kFloat: the IEEE bits
  std::string text;                                 // kStr; kGlobal: "module name"
  std::vector<std::shared_ptr<PickleValue>> items;  // kTuple; kDict: key, value, key, value...
  torch::Tensor tensor;                             // kStorage (flat), kTensor
  bool nested = false;                              // kDict: held by another dict
};

// The top-level value of the archive in data[0, size), which must be a dict. Dicts nest two
// levels at most. std::runtime_error "<name>: <what is wrong>" for anything else: a corrupt or
// truncated container, a record whose size or CRC is wrong, an unsupported opcode or callable,
// a tensor reaching past its storage.
std::shared_ptr<const PickleValue> read_torch_archive(const uint8_t* data,
                                                      size_t size,
                                                      const std::string& name);

// The value of key in a dict, or nullptr.
std::shared_ptr<const PickleValue> dict_entry(const PickleValue& dict, const std::string& key);

}  // namespace combiner::data
