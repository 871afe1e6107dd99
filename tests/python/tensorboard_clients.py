#!/usr/bin/env python3
"""Reads a folder of TensorBoard event files with TensorBoard's own code, for the tests.

Usage: tensorboard_clients.py LOGDIR

Two readers, each over every run under LOGDIR (a folder holding event files, named by its path
relative to LOGDIR as `tensorboard --logdir LOGDIR` names it):
  event_accumulator  tensorboard.backend.event_processing.event_accumulator.EventAccumulator,
                     one per run folder, keeping every point and purging what a restart
                     (SessionLog START) orphans, as TensorBoard's Python loader does;
  data_server        the Rust data server that `tensorboard` starts by default (the binary of
                     the tensorboard_data_server package, --reload once), read through
                     TensorBoard's GrpcDataProvider the way its scalars, images and text plugins
                     read it.
Images are decoded with PIL; text is also rendered by the text plugin (text_array_to_html).
Output, one line each, points of a tag in the order the reader gives them:
  <reader> run <run>
  <reader> scalar <run> <tag> <step> <value>
  <reader> image <run> <tag> <step> <width> <height> <PNG width> <PNG height> <PIL mode>
  <reader> text <run> <tag> <step> <JSON array: the text, the text plugin's HTML of it>
Exit status 1, with the reason on stderr, when a reader fails (an image that does not decode, a
data server that does not start or load within 60 s, ...).
"""
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from PIL import Image
from tensorboard import context
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.data import grpc_provider, server_ingester
from tensorboard.plugins.text import text_plugin
from tensorboard.util import tensor_util

import grpc

ALL = 10**9  # "every point": no downsampling


def fail(what):
    sys.stderr.write(f"tensorboard_clients.py: {what}\n")
    sys.exit(1)


def png_line(reader, run, tag, step, width, height, png):
    try:
        image = Image.open(io.BytesIO(png))
        image.load()
    except Exception as e:  # noqa: BLE001 - any decoding failure is the test's failure
        fail(f"{reader}: run {run} tag {tag} step {step}: the image does not decode: {e}")
    w, h = image.size
    return f"{reader} image {run} {tag} {step} {width} {height} {w} {h} {image.mode}"


def text_line(reader, run, tag, step, array):
    if array.size != 1:
        fail(f"{reader}: run {run} tag {tag} step {step}: {array.size} strings, expected 1")
    text = array.reshape(-1)[0].decode("utf-8")
    html = text_plugin.text_array_to_html(array, enable_markdown=True)
    return f"{reader} text {run} {tag} {step} {json.dumps([text, html])}"


def run_folders(logdir):
    """Folders under logdir holding event files, relative to it, as TensorBoard names runs."""
    runs = []
    for folder, _, files in os.walk(logdir):
        if any("tfevents" in f for f in files):
            runs.append(os.path.relpath(folder, logdir))
    return sorted(runs)


def read_with_event_accumulator(logdir):
    reader = "event_accumulator"
    lines = []
    keep_all = {event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0,
                event_accumulator.TENSORS: 0}
    for run in run_folders(logdir):
        acc = event_accumulator.EventAccumulator(os.path.join(logdir, run), size_guidance=keep_all)
        acc.Reload()
        lines.append(f"{reader} run {run}")
        tags = acc.Tags()
        for tag in sorted(tags["scalars"]):
            for e in acc.Scalars(tag):
                lines.append(f"{reader} scalar {run} {tag} {e.step} {e.value!r}")
        for tag in sorted(tags["images"]):
            for e in acc.Images(tag):
                lines.append(png_line(reader, run, tag, e.step, e.width, e.height,
                                      e.encoded_image_string))
        # The tensors the text plugin owns: its name in the summary metadata.
        for tag in sorted(t for t in tags["tensors"]
                          if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"):
            for e in acc.Tensors(tag):
                lines.append(text_line(reader, run, tag, e.step,
                                       tensor_util.make_ndarray(e.tensor_proto)))
    return lines


def start_data_server(logdir):
    """The data server over logdir, its address once its one load cycle has finished."""
    binary = server_ingester.get_server_binary()  # NoDataServerError names what is missing
    port_dir = tempfile.mkdtemp(prefix="tb_clients_")
    port_file = os.path.join(port_dir, "port")
    server = subprocess.Popen(
        [binary.path, "--logdir", logdir, "--reload", "once", "--port", "0",
         "--port-file", port_file, "--samples-per-plugin", "scalars=all,images=all,text=all",
         "--die-after-stdin", "--verbose"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()

    def drain():
        for line in server.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    log, deadline = [], time.monotonic() + 60
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            fail(f"data_server: {binary.path} did not finish loading {logdir} in 60 s: "
                 + "".join(log))
        if line is None:
            fail(f"data_server: {binary.path} exited with {server.wait()}: " + "".join(log))
        log.append(line)
        if "Finished load cycle" in line:
            break
    with open(port_file) as f:
        port = int(f.read())
    shutil.rmtree(port_dir)
    return server, f"localhost:{port}"


def read_with_data_server(logdir):
    reader = "data_server"
    server, address = start_data_server(logdir)
    provider = grpc_provider.GrpcDataProvider(
        address, grpc_provider.make_stub(grpc.insecure_channel(address)))
    ctx, eid = context.RequestContext(), ""
    lines = [f"{reader} run {r.run_name}"
             for r in sorted(provider.list_runs(ctx, experiment_id=eid), key=lambda r: r.run_name)]
    scalars = provider.read_scalars(ctx, experiment_id=eid, plugin_name="scalars",
                                    downsample=ALL, run_tag_filter=None)
    for run, tags in sorted(scalars.items()):
        for tag, points in sorted(tags.items()):
            lines += [f"{reader} scalar {run} {tag} {p.step} {p.value!r}" for p in points]
    images = provider.read_blob_sequences(ctx, experiment_id=eid, plugin_name="images",
                                          downsample=ALL, run_tag_filter=None)
    for run, tags in sorted(images.items()):
        for tag, points in sorted(tags.items()):
            for p in points:
                # The images plugin's layout: width, height, then the encoded images.
                blobs = [provider.read_blob(ctx, blob_key=b.blob_key) for b in p.values]
                if len(blobs) != 3:
                    fail(f"{reader}: run {run} tag {tag} step {p.step}: {len(blobs)} blobs, "
                         "expected width, height and one image")
                lines.append(png_line(reader, run, tag, p.step, int(blobs[0]), int(blobs[1]),
                                      blobs[2]))
    texts = provider.read_tensors(ctx, experiment_id=eid, plugin_name="text", downsample=ALL,
                                  run_tag_filter=None)
    for run, tags in sorted(texts.items()):
        for tag, points in sorted(tags.items()):
            lines += [text_line(reader, run, tag, p.step, p.numpy) for p in points]
    server.stdin.close()  # --die-after-stdin
    server.wait(timeout=30)
    return lines


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        fail(f"usage: tensorboard_clients.py LOGDIR (a folder), got {argv}")
    for line in read_with_event_accumulator(argv[0]) + read_with_data_server(argv[0]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
