#include "util/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <malloc.h>

#include <algorithm>
#include <thread>

namespace combiner::util {

int64_t set_threads(int64_t threads) {
  if (threads <= 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(threads));
  return at::get_num_threads();
}

void tune_process() {
  at::globalContext().setFlushDenormal(true);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

}  // namespace combiner::util
