#!/usr/bin/env python3
"""Reads TensorBoard event files as a reader outside this project would, for the tests.

Usage: read_events.py PB_DIR FILE...

PB_DIR holds tensorboard_event_pb2.py, which the test makes from src/tfevent/tensorboard_event.proto
with protoc --python_out. Every record's TFRecord framing is checked (both masked CRC-32Cs,
computed here in pure Python), a record cut short at the end of a file is reported, not an error,
and every Event is decoded with Python's protobuf. Output, one line each:
  file <path> records <n> truncated_tail <bytes>
  <step> version <file_version>
  <step> start
  <step> scalar <tag> <value>
  <step> image <tag> <height> <width> <colorspace> <png width> <png height>
  <step> text <tag> <plugin name> <text as a JSON string>
Exit status 1, with the reason on stderr, on a CRC mismatch or an Event that does not decode.
"""
import json
import struct
import sys

sys.path.insert(0, sys.argv[1])
import tensorboard_event_pb2 as pb  # noqa: E402

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(path, at, what):
    sys.stderr.write(f"{path}: record at byte {at}: {what}\n")
    sys.exit(1)


def png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return -1, -1
    return struct.unpack(">II", data[16:24])


def describe(event):
    kind = event.WhichOneof("what")
    if kind == "file_version":
        return [f"{event.step} version {event.file_version}"]
    if kind == "session_log":
        status = pb.SessionLog.SessionStatus.Name(event.session_log.status)
        return [f"{event.step} {status.lower()}"]
    lines = []
    for v in event.summary.value:
        which = v.WhichOneof("value")
        if which == "simple_value":
            lines.append(f"{event.step} scalar {v.tag} {v.simple_value!r}")
        elif which == "image":
            w, h = png_size(v.image.encoded_image_string)
            lines.append(f"{event.step} image {v.tag} {v.image.height} {v.image.width} "
                         f"{v.image.colorspace} {w} {h}")
        elif which == "tensor":
            t = v.tensor
            if t.dtype != pb.DT_STRING or len(t.string_val) != 1:
                raise ValueError(f"tag {v.tag}: expected one DT_STRING value")
            lines.append(f"{event.step} text {v.tag} {v.metadata.plugin_data.plugin_name} "
                         + json.dumps(t.string_val[0].decode("utf-8")))
        else:
            raise ValueError(f"tag {v.tag}: unexpected value kind {which}")
    return lines


for path in sys.argv[2:]:
    data = open(path, "rb").read()
    at, records, lines = 0, 0, []
    while at + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked(data[at:at + 8]) != length_crc:
            fail(path, at, "length CRC mismatch")
        if at + 16 + length > len(data):
            break
        payload = data[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(payload) != data_crc:
            fail(path, at, "data CRC mismatch")
        event = pb.Event()
        try:
            event.ParseFromString(payload)
            lines += describe(event)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the test's failure
            fail(path, at, f"does not decode: {e}")
        at += 16 + length
        records += 1
    print(f"file {path} records {records} truncated_tail {len(data) - at}")
    for line in lines:
        print(line)
