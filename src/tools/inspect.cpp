// Pictures come from the plans (plan.h) and the dense reference (reference.h) only, never from a
// fast path, so they show the contract itself. Helpers live in a named namespace: this folder
// builds as unity batches, where anonymous namespaces of different files share one scope.
#include "tools/inspect.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "attention/reference.h"
#include "util/image_io.h"
#include "util/npy.h"

namespace combiner::attention {

namespace inspect_detail {

std::string describe(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return c10::str(shape);
}

torch::Tensor load_heads(const std::string& flag, const std::string& path, const char* layout) {
  torch::Tensor t;
  try {
    t = util::load_npy(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(flag + ": " + e.what());
  }
  if (t.scalar_type() != torch::kFloat || t.dim() != 3 || t.numel() == 0)
    throw std::invalid_argument(flag + " '" + path + "': expected a non-empty float32 " + layout +
                                " array, found " + describe(t));
  return t;
}

// [L, L, 3] uint8 pattern of one plan: each row painted from its plan, O(L) per row.
torch::Tensor draw_plan(const Plan& plan) {
  const int64_t L = static_cast<int64_t>(plan.size());
  const auto colours = span_colour_indices(plan);
  auto image = torch::empty({L, L, 3}, torch::kUInt8);
  auto a = image.accessor<uint8_t, 3>();
  const auto paint = [&](int64_t i, int64_t j, const Rgb& c) {
    for (int ch = 0; ch < 3; ++ch) a[i][j][ch] = c[ch];
  };
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) paint(i, j, j > i ? kFutureColour : kUnseenColour);
    for (int64_t j : plan[i].direct) paint(i, j, kDirectColour);
    for (size_t r = 0; r < plan[i].spans.size(); ++r)
      for (int64_t j : plan[i].spans[r].positions) paint(i, j, span_colour(colours[i][r]));
    paint(i, i, kSelfColour);
  }
  return image;
}

}  // namespace inspect_detail

Rgb span_colour(int64_t index) {
  // Warm, green and purple hues from matplotlib's tab10/tab20, none close to the blues or grey.
  static constexpr Rgb kPalette[kPaletteSize] = {{255, 187, 0},
                                                 {214, 39, 40},
                                                 {44, 160, 44},
                                                 {148, 103, 189},
                                                 {255, 127, 14},
                                                 {227, 119, 194},
                                                 {140, 86, 75},
                                                 {188, 189, 34},
                                                 {255, 152, 150},
                                                 {152, 223, 138},
                                                 {120, 20, 60},
                                                 {240, 228, 130}};
  return kPalette[((index % kPaletteSize) + kPaletteSize) % kPaletteSize];
}

AttentionOptions inspect_options(const std::string& variant,
                                 int64_t block,
                                 int64_t row_len,
                                 const std::string& abstraction,
                                 int64_t length) {
  const auto& names = variant_names();
  if (std::find(names.begin(), names.end(), variant) == names.end())
    throw std::invalid_argument("unknown variant '" + variant +
                                "', expected one of: " + c10::Join(", ", names));
  AttentionOptions o;
  o.type = variant;
  o.abstraction = abstraction;
  if (uses_block(variant)) {
    if (block <= 0)
      throw std::invalid_argument("--block is required for '" + variant +
                                  "' and must be > 0 (the block size s), got " +
                                  std::to_string(block));
    o.block = block;
  }
  if (uses_row_len(variant)) {
    if (row_len <= 0 || length % row_len != 0)
      throw std::invalid_argument(
          "--row-len is required for '" + variant + "' and must be a positive divisor of L = " +
          std::to_string(length) + " (the row length W), got " + std::to_string(row_len));
    o.row_len = row_len;
  }
  validate(o, length);
  return o;
}

HeadInputs load_head_inputs(const std::string& q_path,
                            const std::string& k_path,
                            const std::string& v_path) {
  using inspect_detail::load_heads;
  HeadInputs in{load_heads("--q", q_path, "[H, L, D]"),
                load_heads("--k", k_path, "[H, L, D]"),
                load_heads("--v", v_path, "[H, L, Dv]")};
  if (!in.k.sizes().equals(in.q.sizes()))
    throw std::invalid_argument("--k '" + k_path +
                                "': expected [H, L, D] = " + c10::str(in.q.sizes()) +
                                " as in --q, found " + c10::str(in.k.sizes()));
  if (in.v.size(0) != in.q.size(0) || in.v.size(1) != in.q.size(1))
    throw std::invalid_argument("--v '" + v_path + "': expected [H, L, Dv] with H, L = " +
                                inspect_detail::shape_text({in.q.size(0), in.q.size(1)}) +
                                " as in --q, found " + c10::str(in.v.sizes()));
  return in;
}

InspectRun run_fast(const AttentionOptions& options, const HeadInputs& in) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);  // DeepSets maps are drawn at construction
  InspectRun run;
  run.module = make_attention(options, in.q.size(1), in.q.size(2));
  run.out = run.module->forward(in.q.unsqueeze(0), in.k.unsqueeze(0), in.v.unsqueeze(0))
                .squeeze(0)
                .to(torch::kFloat)
                .contiguous();
  return run;
}

torch::Tensor run_reference(const AttentionOptions& options,
                            const InspectRun& run,
                            const HeadInputs& in) {
  return reference_attention(
             options, *run.module, in.q.unsqueeze(0), in.k.unsqueeze(0), in.v.unsqueeze(0))
      .squeeze(0);
}

std::vector<std::vector<int64_t>> span_colour_indices(const Plan& plan) {
  std::map<int64_t, int64_t> colour_of_start;    // first position of a span -> its colour
  std::vector<int64_t> owners(kPaletteSize, 0);  // starts holding each colour
  std::vector<std::vector<int64_t>> out;
  for (const auto& position : plan) {
    const size_t n = position.spans.size();
    std::vector<int64_t> colours(n, -1);
    std::vector<bool> taken(kPaletteSize, false);
    // Known starts keep their colour first; a new start takes the free colour that the fewest
    // other starts hold, so different columns or blocks look different as long as they can.
    for (size_t r = 0; r < n; ++r) {
      auto it = colour_of_start.find(position.spans[r].positions.front());
      if (it != colour_of_start.end() && !taken[it->second]) {
        colours[r] = it->second;
        taken[it->second] = true;
      }
    }
    for (size_t r = 0; r < n; ++r) {
      if (colours[r] >= 0) continue;
      int64_t best = -1;
      for (int64_t c = 0; c < kPaletteSize; ++c)
        if (!taken[c] && (best < 0 || owners[c] < owners[best])) best = c;
      colours[r] = best >= 0 ? best : int64_t(r % kPaletteSize);
      if (best >= 0) taken[best] = true;
      if (colour_of_start.emplace(position.spans[r].positions.front(), colours[r]).second)
        ++owners[colours[r]];
    }
    out.push_back(std::move(colours));
  }
  return out;
}

torch::Tensor pattern_images(const AttentionOptions& options, int64_t length) {
  std::vector<torch::Tensor> panels;
  for (const auto& plan : make_plans(options, length))
    panels.push_back(inspect_detail::draw_plan(plan));
  return torch::stack(panels);
}

torch::Tensor matrix_images(const AttentionOptions& options,
                            const InspectRun& run,
                            const HeadInputs& in) {
  const int64_t L = in.q.size(1);
  if (L > kMaxMatrixLength)
    throw std::invalid_argument(
        "--png: the effective matrix is drawn for L <= " + std::to_string(kMaxMatrixLength) +
        " only, got L = " + std::to_string(L));
  auto head0 = [](const torch::Tensor& t) { return t.slice(0, 0, 1).unsqueeze(0); };
  const auto matrices =
      plan_matrices(options, head0(in.q), head0(in.k), deepsets_maps(*run.module));
  auto images = pattern_images(options, L);
  auto pixels = images.accessor<uint8_t, 4>();
  for (size_t p = 0; p < matrices.size(); ++p) {
    auto a = matrices[p][0][0].contiguous();
    auto w = a.accessor<double, 2>();
    for (int64_t i = 0; i < L; ++i) {
      double top = 0;
      for (int64_t j = 0; j <= i; ++j) top = std::max(top, w[i][j]);
      for (int64_t j = 0; j <= i && top > 0; ++j) {
        if (w[i][j] <= 0) continue;
        // Four decades below the row's largest weight fade to 15% of the pattern colour.
        const double t = std::clamp((std::log10(w[i][j] / top) + 4.0) / 4.0, 0.0, 1.0);
        const double keep = 0.15 + 0.85 * t;
        for (int ch = 0; ch < 3; ++ch) {
          auto& c = pixels[p][i][j][ch];
          c = static_cast<uint8_t>(std::lround(255.0 - (255.0 - c) * keep));
        }
      }
    }
  }
  return images;
}

void write_panels(const std::string& path, const torch::Tensor& images, int64_t scale) {
  util::write_image_grid(path, images, scale, images.size(0));
}

}  // namespace combiner::attention
