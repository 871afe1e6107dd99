#!/usr/bin/env python3
"""Reads a safetensors file with json and numpy alone, as a Python user without this project
would, and compares it tensor for tensor with what the test saved from the checkpoint.

Usage: check_safetensors.py FILE EXPECTED_DIR

EXPECTED_DIR holds names.txt (one tensor name a line, the checkpoint's), <name>.npy for each
(float32; for a bf16 export, the checkpoint's values rounded to bf16) and config.yaml. Checks:
the header length and its 8-byte alignment, the JSON, offsets that tile the data section in
order, every dtype and shape, every value bit for bit, the set of names, and __metadata__'s
config. Prints "ok <tensors> tensors <dtype>"; exits 1 with the reason otherwise.
"""
import json
import os
import struct
import sys

import numpy as np

path, expected_dir = sys.argv[1], sys.argv[2]


def fail(what):
    sys.stderr.write(f"{path}: {what}\n")
    sys.exit(1)


data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
if (8 + n) % 8 != 0:
    fail(f"header of {n} bytes leaves the data unaligned")
header = json.loads(data[8:8 + n].decode("utf-8"))
body = data[8 + n:]
metadata = header.pop("__metadata__", {})
entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
at = 0
dtypes = set()
for name, entry in entries:
    begin, end = entry["data_offsets"]
    if begin != at:
        fail(f"tensor {name}: begins at {begin}, expected {at}")
    at = end
    raw = body[begin:end]
    shape = tuple(entry["shape"])
    dtypes.add(entry["dtype"])
    if entry["dtype"] == "F32":
        value = np.frombuffer(raw, dtype="<f4").reshape(shape)
    elif entry["dtype"] == "BF16":  # numpy has no bf16: widen the 16 bits to a float32's top half
        value = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        value = value.reshape(shape)
    else:
        fail(f"tensor {name}: unexpected dtype {entry['dtype']}")
    expected = np.load(os.path.join(expected_dir, name + ".npy"))
    if expected.shape != value.shape:
        fail(f"tensor {name}: shape {value.shape}, checkpoint has {expected.shape}")
    if not np.array_equal(expected.view(np.uint32), value.view(np.uint32)):
        fail(f"tensor {name}: values differ from the checkpoint's")
if at != len(body):
    fail(f"tensors end at {at}, data section holds {len(body)} bytes")
names = open(os.path.join(expected_dir, "names.txt")).read().split()
if sorted(names) != sorted(header):
    fail(f"tensor names differ: {sorted(set(names) ^ set(header))}")
config = open(os.path.join(expected_dir, "config.yaml")).read()
if metadata.get("config") != config:
    fail("__metadata__ config differs from the checkpoint's")
if metadata.get("format") != "pt":
    fail(f"__metadata__ format is {metadata.get('format')!r}, expected 'pt'")
print(f"ok {len(entries)} tensors {' '.join(sorted(dtypes))}")
