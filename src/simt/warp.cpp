// The SIMT emulator's warp collectives (emulator.h): shuffles, votes, __syncwarp, and the
// bfloat16 kernels' ldmatrix and mma.sync, each computed once every lane of the warp is there.
#include <stdexcept>
#include <string>

#include "simt/emulator.h"

namespace combiner::simt {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("simt emulator: " + what);
}

template <typename T>
struct Shuffle {
  T value;
  int lane;  // the lane read: an xor of this one's, or an index
  bool xor_lane;
  T out;
};
template <typename T>
void shuffle_op(void* const* lanes) {
  for (int l = 0; l < 32; ++l) {
    if (!lanes[l]) continue;
    auto& s = *static_cast<Shuffle<T>*>(lanes[l]);
    const int src = s.xor_lane ? l ^ s.lane : s.lane % 32;
    s.out = lanes[src] ? static_cast<Shuffle<T>*>(lanes[src])->value : s.value;
  }
}
template <typename T>
T shuffle(unsigned mask, T value, int lane, bool xor_lane, int width) {
  if (width != 32) fail("a shuffle of width other than 32");
  Shuffle<T> s{value, lane, xor_lane, value};
  detail::warp_collective(mask, &shuffle_op<T>, &s);
  return s.out;
}

struct Vote {
  int predicate;
  int any, all;
};
void vote_op(void* const* lanes) {
  int any = 0, all = 1;
  for (int l = 0; l < 32; ++l)
    if (lanes[l]) {
      any |= static_cast<Vote*>(lanes[l])->predicate != 0;
      all &= static_cast<Vote*>(lanes[l])->predicate != 0;
    }
  for (int l = 0; l < 32; ++l)
    if (lanes[l]) static_cast<Vote*>(lanes[l])->any = any, static_cast<Vote*>(lanes[l])->all = all;
}
void nothing_op(void* const*) {}

struct LdMatrix {
  const __nv_bfloat16* row;
  bool trans;
  uint32_t r[4];
};
uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(lo.bits) | uint32_t(hi.bits) << 16;
}
void ldmatrix_op(void* const* lanes) {
  for (int l = 0; l < 32; ++l)
    if (!lanes[l]) fail("ldmatrix in a warp of fewer than 32 threads");
  auto at = [&](int lane) { return static_cast<LdMatrix*>(lanes[lane]); };
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int g = l / 4, q = l % 4;
      at(l)->r[i] = at(l)->trans ? pack(at(8 * i + 2 * q)->row[g], at(8 * i + 2 * q + 1)->row[g])
                                 : pack(at(8 * i + g)->row[2 * q], at(8 * i + g)->row[2 * q + 1]);
    }
}

struct Mma {
  float* c;
  uint32_t a[4], b[2];
};
float lo(uint32_t x) {
  return __bfloat162float({uint16_t(x & 0xffffu)});
}
float hi(uint32_t x) {
  return __bfloat162float({uint16_t(x >> 16)});
}
void mma_op(void* const* lanes) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    if (!lanes[l]) fail("mma in a warp of fewer than 32 threads");
    const auto& m = *static_cast<Mma*>(lanes[l]);
    const int g = l / 4, q = l % 4;
    for (int h = 0; h < 2; ++h) {  // h: columns (k) 2q + 8h
      A[g][2 * q + 8 * h] = lo(m.a[2 * h]);
      A[g][2 * q + 8 * h + 1] = hi(m.a[2 * h]);
      A[g + 8][2 * q + 8 * h] = lo(m.a[2 * h + 1]);
      A[g + 8][2 * q + 8 * h + 1] = hi(m.a[2 * h + 1]);
      B[2 * q + 8 * h][g] = lo(m.b[h]);
      B[2 * q + 8 * h + 1][g] = hi(m.b[h]);
    }
    C[g][2 * q] = m.c[0];
    C[g][2 * q + 1] = m.c[1];
    C[g + 8][2 * q] = m.c[2];
    C[g + 8][2 * q + 1] = m.c[3];
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float sum = C[i][j];
      for (int k = 0; k < 16; ++k) sum += A[i][k] * B[k][j];
      C[i][j] = sum;
    }
  for (int l = 0; l < 32; ++l) {
    float* c = static_cast<Mma*>(lanes[l])->c;
    const int g = l / 4, q = l % 4;
    c[0] = C[g][2 * q];
    c[1] = C[g][2 * q + 1];
    c[2] = C[g + 8][2 * q];
    c[3] = C[g + 8][2 * q + 1];
  }
}

}  // namespace

void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row, bool trans) {
  LdMatrix m{row, trans, {}};
  detail::warp_collective(0xffffffffu, &ldmatrix_op, &m);
  for (int i = 0; i < 4; ++i) r[i] = m.r[i];
}

void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Mma m{c, {a[0], a[1], a[2], a[3]}, {b0, b1}};
  detail::warp_collective(0xffffffffu, &mma_op, &m);
}

}  // namespace combiner::simt

void __syncwarp(unsigned mask) {
  char unused = 0;
  combiner::simt::detail::warp_collective(mask, &combiner::simt::nothing_op, &unused);
}
int __any_sync(unsigned mask, int predicate) {
  combiner::simt::Vote v{predicate, 0, 0};
  combiner::simt::detail::warp_collective(mask, &combiner::simt::vote_op, &v);
  return v.any;
}
int __all_sync(unsigned mask, int predicate) {
  combiner::simt::Vote v{predicate, 0, 0};
  combiner::simt::detail::warp_collective(mask, &combiner::simt::vote_op, &v);
  return v.all;
}
float __shfl_xor_sync(unsigned mask, float value, int lane_mask, int width) {
  return combiner::simt::shuffle(mask, value, lane_mask, true, width);
}
int __shfl_xor_sync(unsigned mask, int value, int lane_mask, int width) {
  return combiner::simt::shuffle(mask, value, lane_mask, true, width);
}
unsigned __shfl_xor_sync(unsigned mask, unsigned value, int lane_mask, int width) {
  return combiner::simt::shuffle(mask, value, lane_mask, true, width);
}
float __shfl_sync(unsigned mask, float value, int src_lane, int width) {
  return combiner::simt::shuffle(mask, value, src_lane, false, width);
}
int __shfl_sync(unsigned mask, int value, int src_lane, int width) {
  return combiner::simt::shuffle(mask, value, src_lane, false, width);
}
