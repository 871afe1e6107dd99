#!/usr/bin/env python3
"""Reads a combiner-export file with the safetensors package itself, for the tests.

Usage:
  safetensors_clients.py check FILE EXPECTED_DIR
      EXPECTED_DIR holds names.txt (one tensor name a line, the checkpoint's), <name>.npy for each
      (float32; for a bf16 export, the checkpoint's values rounded to bf16) and metadata.json
      (the __metadata__ the file must hold, exactly). safetensors.torch.load_file must give every
      tensor with the file's dtype and the expected values bit for bit; safetensors.numpy.load_file
      the same for float32 files (numpy has no bfloat16: for a bf16 file safe_open(framework="np")
      must list the names and give the metadata, and reading a tensor must fail on the dtype).
      Prints one line per client:
        safetensors.torch ok <n> tensors <torch dtype>
        safetensors.numpy ok <n> tensors <numpy dtype> | safetensors.numpy names-only <n> tensors
  safetensors_clients.py resave FILE OUT
      Loads FILE with safetensors.torch.load_file and writes its tensors to OUT with
      safetensors.torch.save_file, with only the "config" of FILE's __metadata__. Prints "saved".
Exit status 1, with the reason on stderr, on any difference.
"""
import json
import os
import sys

import numpy as np
import safetensors.numpy
import safetensors.torch
import torch
from safetensors import safe_open


def fail(what):
    sys.stderr.write(f"safetensors_clients.py: {what}\n")
    sys.exit(1)


def same_bits(name, client, value, expected):
    """value, expected: float32 numpy arrays."""
    if value.shape != expected.shape:
        fail(f"{client}: tensor {name}: shape {value.shape}, checkpoint has {expected.shape}")
    if not np.array_equal(value.view(np.uint32), expected.view(np.uint32)):
        fail(f"{client}: tensor {name}: values differ from the checkpoint's")


def check(path, expected_dir):
    names = sorted(open(os.path.join(expected_dir, "names.txt")).read().split())
    metadata = json.load(open(os.path.join(expected_dir, "metadata.json")))
    expected = {n: np.load(os.path.join(expected_dir, n + ".npy")) for n in names}
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[metadata["dtype"]]

    with safe_open(path, framework="pt") as f:
        if f.metadata() != metadata:
            fail(f"safe_open: __metadata__ {f.metadata()}, expected {metadata}")
    tensors = safetensors.torch.load_file(path)
    if sorted(tensors) != names:
        fail(f"safetensors.torch: tensor names differ: {sorted(set(tensors) ^ set(names))}")
    for name, t in tensors.items():
        if t.dtype != torch_dtype:
            fail(f"safetensors.torch: tensor {name}: dtype {t.dtype}, expected {torch_dtype}")
        same_bits(name, "safetensors.torch", t.float().numpy(), expected[name])
    print(f"safetensors.torch ok {len(tensors)} tensors {torch_dtype}")

    if metadata["dtype"] == "float32":
        arrays = safetensors.numpy.load_file(path)
        if sorted(arrays) != names:
            fail(f"safetensors.numpy: tensor names differ: {sorted(set(arrays) ^ set(names))}")
        for name, a in arrays.items():
            if a.dtype != np.float32:
                fail(f"safetensors.numpy: tensor {name}: dtype {a.dtype}, expected float32")
            same_bits(name, "safetensors.numpy", a, expected[name])
        print(f"safetensors.numpy ok {len(arrays)} tensors float32")
        return
    with safe_open(path, framework="np") as f:
        if sorted(f.keys()) != names or f.metadata() != metadata:
            fail("safetensors.numpy: names or __metadata__ differ")
        try:
            f.get_tensor(names[0])
            fail("safetensors.numpy: read a bfloat16 tensor, which numpy has no dtype for")
        except TypeError as e:
            if "bfloat16" not in str(e):
                raise
    print(f"safetensors.numpy names-only {len(names)} tensors")


def resave(path, out):
    tensors = safetensors.torch.load_file(path)
    with safe_open(path, framework="pt") as f:
        config = f.metadata()["config"]
    safetensors.torch.save_file(tensors, out, metadata={"config": config})
    print("saved")


def main(argv):
    if len(argv) == 3 and argv[0] == "check":
        check(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "resave":
        resave(argv[1], argv[2])
    else:
        fail(f"usage: safetensors_clients.py check FILE EXPECTED_DIR | resave FILE OUT, got {argv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
