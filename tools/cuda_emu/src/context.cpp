#include "context.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "fibres: x86-64 or AArch64 only (add a switch routine for this machine)"
#endif

namespace emu::detail {

FibreStack::FibreStack(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  mapped_ = size_ + page;
  // Reserved, not committed: only the pages a thread touches cost memory.
  base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base_ == MAP_FAILED) {
    std::perror("cuda-emu: mmap of a fibre stack");
    std::abort();
  }
  mprotect(base_, page, PROT_NONE);  // the guard page, at the low end where the stack grows to
  top_ = static_cast<char*>(base_) + mapped_;
}

FibreStack::~FibreStack() {
  munmap(base_, mapped_);
}

}  // namespace emu::detail

// switch(from_sp, to_sp): pushes the callee-saved registers, stores the stack pointer through
// from_sp, loads to_sp, pops that fibre's registers and returns into it. A new fibre's stack
// is laid out (make_context) so that this "return" enters emu_fibre_start with the entry
// function and its argument in callee-saved registers.
extern "C" void emu_switch(void** from_sp, void* to_sp);
extern "C" void emu_fibre_start();

#if defined(__x86_64__)
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch,.-emu_switch

.globl emu_fibre_start
.type emu_fibre_start,@function
emu_fibre_start:
  movq %r13, %rdi
  callq *%r12
  ud2
.size emu_fibre_start,.-emu_fibre_start
)");
#elif defined(__aarch64__)
asm(R"(
.text
.globl emu_switch
.type emu_switch,%function
emu_switch:
  sub sp, sp, #176
  stp x19, x20, [sp, #0]
  stp x21, x22, [sp, #16]
  stp x23, x24, [sp, #32]
  stp x25, x26, [sp, #48]
  stp x27, x28, [sp, #64]
  stp x29, x30, [sp, #80]
  stp d8, d9, [sp, #96]
  stp d10, d11, [sp, #112]
  stp d12, d13, [sp, #128]
  stp d14, d15, [sp, #144]
  mov x9, sp
  str x9, [x0]
  mov sp, x1
  ldp x19, x20, [sp, #0]
  ldp x21, x22, [sp, #16]
  ldp x23, x24, [sp, #32]
  ldp x25, x26, [sp, #48]
  ldp x27, x28, [sp, #64]
  ldp x29, x30, [sp, #80]
  ldp d8, d9, [sp, #96]
  ldp d10, d11, [sp, #112]
  ldp d12, d13, [sp, #128]
  ldp d14, d15, [sp, #144]
  add sp, sp, #176
  ret
.size emu_switch,.-emu_switch

.globl emu_fibre_start
.type emu_fibre_start,%function
emu_fibre_start:
  mov x0, x20
  blr x19
  brk #0
.size emu_fibre_start,.-emu_fibre_start
)");
#endif

namespace emu::detail {

void make_context(Context& ctx, const FibreStack& stack, void (*entry)(void*), void* arg) {
  auto top = reinterpret_cast<uintptr_t>(stack.top()) & ~uintptr_t{15};
  auto* slots = reinterpret_cast<uintptr_t*>(top);
#if defined(__x86_64__)
  // From the new stack pointer up: r15 r14 r13 r12 rbx rbp, then the return address. After
  // the ret, rsp = top - 16: 16-byte aligned before emu_fibre_start's call, as the ABI wants.
  uintptr_t* sp = slots - 9;
  for (int i = 0; i < 9; ++i) sp[i] = 0;
  sp[2] = reinterpret_cast<uintptr_t>(arg);    // r13
  sp[3] = reinterpret_cast<uintptr_t>(entry);  // r12
  sp[6] = reinterpret_cast<uintptr_t>(&emu_fibre_start);
#else
  // 176 bytes of saved registers: x19 (entry), x20 (arg), ..., x30 (the return address).
  uintptr_t* sp = slots - 22;
  for (int i = 0; i < 22; ++i) sp[i] = 0;
  sp[0] = reinterpret_cast<uintptr_t>(entry);
  sp[1] = reinterpret_cast<uintptr_t>(arg);
  sp[11] = reinterpret_cast<uintptr_t>(&emu_fibre_start);
#endif
  ctx.sp = sp;
}

void switch_context(Context& from, Context& to) {
  emu_switch(&from.sp, to.sp);
}

}  // namespace emu::detail
