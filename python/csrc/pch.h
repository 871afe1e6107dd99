// Precompiled header of the package's build: the torch headers every attention source parses.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
