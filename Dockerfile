# A CUDA image that builds combiner against the LibTorch inside pip's torch and runs it.
#   docker build -t combiner .
#   docker run --gpus all -v $PWD/data:/opt/combiner/data -v $PWD/runs:/opt/combiner/runs combiner \
#       combiner-train --config configs/cifar10_ablation_combiner_axial_rowmajor.yaml \
#       --set train.device=cuda --set train.precision=bfloat16
# Several GPUs: scripts/launch.sh -n 8 -- combiner-train ... inside the container (README,
# "Docker"). The build recipe (scripts/build-cuda.sh) is the one that ran on an H200 for
# docs/PERFORMANCE.md; this file itself has not been built here (no Docker engine).
FROM nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive
# Ubuntu 24.04 has what Debian 12 has: spdlog with fmt >= 9, yaml-cpp, stb, CLI11, protobuf 3.21
# (TensorBoard event files).
RUN apt-get update && apt-get install -y --no-install-recommends \
      cmake ninja-build pkg-config g++ python3 python3-venv \
      libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev libstb-dev zlib1g-dev \
      libprotobuf-dev protobuf-compiler && \
    rm -rf /var/lib/apt/lists/*

# torch's wheel carries the CUDA LibTorch (headers, libraries, CMake config) and NCCL.
RUN python3 -m venv /opt/torch && \
    /opt/torch/bin/pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cu126
ENV PATH=/opt/torch/bin:$PATH

WORKDIR /opt/combiner
COPY . .
RUN TORCH_CUDA_ARCH_LIST="8.0;9.0" scripts/build-cuda.sh && \
    ln -s /opt/combiner/build-cuda/combiner-* /usr/local/bin/

CMD ["combiner-train", "--help"]
