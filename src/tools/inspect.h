// What combiner-inspect does, as library calls: run one variant's fast path on q, k, v read from
// .npy files, and draw attention patterns (from the plans) and effective matrices (from the dense
// reference) in the colours of the paper's Figure 1: direct attention blue, spans in a palette.
#pragma once

#include <torch/torch.h>

#include "attention/attention.h"
#include "attention/plan.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace combiner::attention {

using Rgb = std::array<uint8_t, 3>;

inline constexpr Rgb kFutureColour = {255, 255, 255};  // j > i
inline constexpr Rgb kUnseenColour = {222, 222, 222};  // j <= i outside a sparse support
inline constexpr Rgb kSelfColour = {8, 48, 107};       // j = i (always direct)
inline constexpr Rgb kDirectColour = {66, 146, 198};   // the rest of the direct set
inline constexpr int64_t kPaletteSize = 12;            // span colours, none blue or grey
Rgb span_colour(int64_t index);                        // index taken modulo kPaletteSize

// Largest L the dense pictures accept: the reference is O(L^2) memory and slower still.
inline constexpr int64_t kMaxMatrixLength = 1024;
inline constexpr int64_t kMaxPatternLength = 4096;

// Fills `options.block` / `options.row_len` for the variant from the flags --block / --row-len
// (0 = not given) and validates it for L. std::invalid_argument naming the flag when a needed
// one is missing, not positive, or (--row-len) does not divide L; unused flags are ignored.
AttentionOptions inspect_options(const std::string& variant,
                                 int64_t block,
                                 int64_t row_len,
                                 const std::string& abstraction,
                                 int64_t length);

// q, k: [H, L, D] and v: [H, L, Dv] float32, checked against each other.
struct HeadInputs {
  torch::Tensor q, k, v;
};
// Reads the three files; std::invalid_argument / std::runtime_error naming the flag (--q, --k,
// --v), the file and what was expected (dtype float32, rank 3, matching H, L and D).
HeadInputs load_head_inputs(const std::string& q_path,
                            const std::string& k_path,
                            const std::string& v_path);

// The fast path on a batch of one: [H, L, Dv] float32. The module is built with a fixed seed
// (its DeepSets maps, if any, are reproducible) and returned for the reference.
struct InspectRun {
  torch::Tensor out;
  std::shared_ptr<AttentionImpl> module;
};
InspectRun run_fast(const AttentionOptions& options, const HeadInputs& inputs);

// The dense reference A v for the same module: [H, L, Dv] float64.
torch::Tensor run_reference(const AttentionOptions& options,
                            const InspectRun& run,
                            const HeadInputs& inputs);

// Palette index of every span of every position of one plan: out[i][r] for plan[i].spans[r].
// A span keeps the colour of the spans that started at the same position in earlier rows (so a
// column or block keeps its colour down the picture) unless another span of row i holds it; a
// new start takes the free colour held by the fewest starts. The spans of one row always differ
// while there are at most kPaletteSize of them.
std::vector<std::vector<int64_t>> span_colour_indices(const Plan& plan);

// The pattern of every plan of `options` (one for most variants, two for combiner-mixture):
// uint8 [P, L, L, 3], cell (i, j) coloured self / direct / span / unseen / future.
torch::Tensor pattern_images(const AttentionOptions& options, int64_t length);

// Head 0's effective matrix per plan, drawn like pattern_images but each attended cell faded
// towards white by its weight (log scale, relative to the row's largest weight, 4 decades):
// uint8 [P, L, L, 3]. `run` supplies the DeepSets maps; L <= kMaxMatrixLength.
torch::Tensor matrix_images(const AttentionOptions& options,
                            const InspectRun& run,
                            const HeadInputs& inputs);

// Writes [P, L, L, 3] images side by side, each cell scale x scale pixels.
void write_panels(const std::string& path, const torch::Tensor& images, int64_t scale);

}  // namespace combiner::attention
