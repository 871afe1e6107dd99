// runtime: the binaries run on the malloc the build chose, configured as runtime.cpp says, and
// freed tensor-sized blocks come back without the kernel faulting their pages in again.
#include "util/runtime.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <memory>

namespace combiner::util {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Allocates, writes and frees `bytes` (the empty asm makes the block escape: without it the
// compiler may elide the whole allocation).
__attribute__((noinline)) char touch_block(size_t bytes) {
  std::unique_ptr<char[]> block(new char[bytes]);
  asm volatile("" : : "r"(block.get()) : "memory");
  std::memset(block.get(), 1, bytes);
  asm volatile("" : : "r"(block.get()) : "memory");
  return block[bytes / 2];
}

TEST(Runtime, RunsOnTheMallocTheBuildLinked) {
  const Allocator a = allocator();
  EXPECT_EQ(a.name, COMBINER_EXPECTED_MALLOC);
  if (a.name == "jemalloc") {
    EXPECT_EQ(a.dirty_decay_ms, -1) << "runtime.cpp's malloc_conf was not read";
    EXPECT_NE(a.describe().find("freed pages kept"), std::string::npos) << a.describe();
    EXPECT_FALSE(a.version.empty());
  } else {
    EXPECT_NE(a.describe().find("glibc"), std::string::npos) << a.describe();
  }
}

TEST(Runtime, FreedBlocksAreReusedWithoutPageFaults) {
  tune_process();
  constexpr size_t kBytes = size_t(24) << 20;  // one [12288 x 512] fp32 activation
  ASSERT_EQ(touch_block(kBytes), 1);           // first use: its 6144 pages fault in
  const long before = minor_faults();
  ASSERT_EQ(touch_block(kBytes), 1);
  const long faults = minor_faults() - before;
  EXPECT_LT(faults, 600) << "the second use of a freed 24 MiB block faulted " << faults
                         << " pages in again (" << allocator().describe() << ")";
}

}  // namespace
}  // namespace combiner::util
