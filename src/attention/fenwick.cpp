#include "attention/fenwick.h"

#include "attention/span_ops.h"

namespace combiner::attention {

int64_t fenwick_levels(int64_t length) {
  int64_t levels = 0;
  while ((int64_t(1) << levels) <= length - 1) ++levels;
  return levels;
}

torch::Tensor fenwick_blocks(const torch::Tensor& x, int64_t level) {
  const int64_t size = int64_t(1) << level, pair = 2 * size;
  const int64_t padded = (x.size(2) + pair - 1) / pair * pair;
  return pad_length(x, padded).reshape({x.size(0), x.size(1), padded / size, size, x.size(3)});
}

torch::Tensor fenwick_spread(const torch::Tensor& summary, int64_t level, int64_t length) {
  const int64_t size = int64_t(1) << level;
  const int64_t B = summary.size(0), H = summary.size(1), X = summary.size(3);
  const int64_t pairs = summary.size(2) / 2;
  // Pair p covers blocks 2p and 2p+1; positions in block 2p+1 (bit m set) see block 2p.
  auto even = summary.slice(2, 0, 2 * pairs, 2).unsqueeze(3).expand({B, H, pairs, size, X});
  auto spread = torch::stack({torch::zeros_like(even), even}, 3);  // [B, H, P, 2, 2^m, X]
  return spread.reshape({B, H, pairs * 2 * size, X}).narrow(2, 0, length);
}

torch::Tensor fenwick_allowed(int64_t level, int64_t length, torch::Device device) {
  auto i = torch::arange(length, torch::dtype(torch::kLong).device(device));
  return i.bitwise_right_shift(level).bitwise_and(1).to(torch::kBool).unsqueeze(1);
}

}  // namespace combiner::attention
