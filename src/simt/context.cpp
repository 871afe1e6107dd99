#include "simt/context.h"

#include <cstdint>
#include <cstring>

namespace combiner::simt {

#if defined(COMBINER_SIMT_UCONTEXT)
void start(Context& c, unsigned char* stack, size_t size, void (*entry)()) {
  getcontext(&c.context);
  c.context.uc_stack.ss_sp = stack;
  c.context.uc_stack.ss_size = size;
  c.context.uc_link = nullptr;
  makecontext(&c.context, entry, 0);
}
void jump(Context& from, Context& to) {
  swapcontext(&from.context, &to.context);
}
#else
// x86-64: the callee-saved registers, MXCSR and the x87 control word pushed on the stack being
// left and popped from the one entered.
extern "C" void combiner_simt_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl combiner_simt_switch
  .type combiner_simt_switch, @function
combiner_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size combiner_simt_switch, .-combiner_simt_switch
)");
// A new stack whose first switch "returns" into entry, as if called (rsp = 8 mod 16 there).
void start(Context& c, unsigned char* stack, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  slot[-1] = 0;                                  // entry's return address: none
  slot[-2] = reinterpret_cast<uint64_t>(entry);  // popped by ret
  for (int r = 3; r <= 8; ++r) slot[-r] = 0;     // rbp, rbx, r12 .. r15
  uint32_t control[2];                           // MXCSR, and the x87 control word
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  std::memcpy(&slot[-9], control, 8);
  c.sp = &slot[-9];
}
void jump(Context& from, Context& to) {
  combiner_simt_switch(&from.sp, to.sp);
}
#endif

}  // namespace combiner::simt
