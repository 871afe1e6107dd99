// Where a fiber of the SIMT emulator (or its scheduler) resumes: on x86-64 a saved stack pointer
// switched by a few instructions (no system call: ucontext's switch masks signals on each one);
// elsewhere, and under AddressSanitizer (which understands it), ucontext.
#pragma once

#include <cstddef>

#if !defined(__x86_64__) || defined(__SANITIZE_ADDRESS__)
#define COMBINER_SIMT_UCONTEXT 1
#include <ucontext.h>
#endif

namespace combiner::simt {

#if defined(COMBINER_SIMT_UCONTEXT)
struct Context {
  ucontext_t context;
};
#else
struct Context {
  void* sp = nullptr;
};
#endif

// Makes `c` start entry() on the given stack at the first jump into it; entry never returns.
void start(Context& c, unsigned char* stack, size_t size, void (*entry)());
// Saves the running context into `from` and resumes `to`.
void jump(Context& from, Context& to);

}  // namespace combiner::simt
