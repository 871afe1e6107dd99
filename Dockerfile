# A CUDA image that builds combiner against the LibTorch inside pip's torch and runs it.
#   docker build -t combiner .
#   docker run --gpus all -v $PWD/data:/opt/combiner/data combiner \
#       combiner-train --config configs/cifar10_ablation_full.yaml --set train.device=cuda
# Untested here: this machine has no Docker engine and no GPU (see README, "Docker").
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel

ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      cmake ninja-build pkg-config g++ libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev \
      libstb-dev zlib1g-dev libgtest-dev && \
    rm -rf /var/lib/apt/lists/*

WORKDIR /opt/combiner
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMBINER_BUILD_TESTS=OFF \
      -DCMAKE_PREFIX_PATH="$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')" && \
    ninja -C build && \
    ln -s /opt/combiner/build/combiner-* /usr/local/bin/

CMD ["combiner-train", "--help"]
