// Precompiled header: the heavy, stable headers every torch translation unit parses.
#pragma once

#include <torch/torch.h>

#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
