#include "util/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

// jemalloc, where the build links it (CMakeLists.txt, COMBINER_JEMALLOC), reads this string at
// its first allocation: freed pages stay with the process (never purged back to the kernel), as
// glibc's trim threshold kept them before. Purging them on jemalloc's default 10 s decay made a
// training step 5x slower here, every tensor's pages faulted in again. Without jemalloc the
// symbol is unused.
extern "C" {
__attribute__((used, visibility("default"))) const char* malloc_conf =
    "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}

namespace combiner::util {

namespace {
// The file of the shared object whose malloc this process calls: libc.so.6 or libjemalloc.so.2.
std::string malloc_owner() {
  Dl_info info{};
  void* found = dlsym(RTLD_DEFAULT, "malloc");  // the first definition: the interposed one if any
  if (!found || dladdr(found, &info) == 0 || !info.dli_fname) return "";
  return info.dli_fname;
}

// jemalloc's control interface when jemalloc is the process's malloc, else nullptr.
using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
Mallctl find_mallctl() {
  if (malloc_owner().find("jemalloc") == std::string::npos) return nullptr;
  return reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
}
}  // namespace

int64_t set_threads(int64_t threads) {
  if (threads <= 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(threads));
  return at::get_num_threads();
}

void tune_process() {
  at::globalContext().setFlushDenormal(true);
  if (find_mallctl()) return;  // jemalloc: configured by malloc_conf above
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

Allocator allocator() {
  Allocator a;
  const std::string owner = malloc_owner();
  if (owner.find("libc.so") == std::string::npos && !owner.empty())
    a.name = owner.substr(owner.rfind('/') + 1);  // another preloaded malloc (tcmalloc, ...)
  auto mallctl = find_mallctl();
  if (!mallctl) return a;
  a.name = "jemalloc";
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) == 0 && version) a.version = version;
  ssize_t decay = 0;
  size = sizeof(decay);
  if (mallctl("opt.dirty_decay_ms", &decay, &size, nullptr, 0) == 0) a.dirty_decay_ms = decay;
  return a;
}

std::string Allocator::describe() const {
  if (name == "glibc") return "glibc malloc (mmap threshold 32 MiB, trim threshold 1 GiB)";
  if (name != "jemalloc") return name;
  return name + " " + version.substr(0, version.find('-')) +
         (dirty_decay_ms < 0 ? ", freed pages kept"
                             : ", freed pages purged after " + std::to_string(dirty_decay_ms) +
                                   " ms");
}

}  // namespace combiner::util
