#pragma once
// Minimal fibres: a stack and a saved stack pointer, switched by a few instructions written by
// hand for x86-64 and AArch64 (ucontext's swapcontext would also save the signal mask, a
// system call per switch, and a block switches fibres at every barrier and shuffle). Kernel
// code never throws, so no unwinding ever crosses a fibre boundary.
#include <cstddef>

namespace emu::detail {

struct Context;

// A fibre's stack, with a guard page below it so that an overflow faults rather than
// corrupting its neighbour.
class FibreStack {
 public:
  explicit FibreStack(std::size_t bytes);
  ~FibreStack();
  FibreStack(const FibreStack&) = delete;
  FibreStack& operator=(const FibreStack&) = delete;
  void* top() const { return top_; }
  std::size_t size() const { return size_; }

 private:
  void* base_;
  std::size_t mapped_;
  void* top_;
  std::size_t size_;
};

// Where a suspended fibre (or the scheduler) resumes.
struct Context {
  void* sp = nullptr;
};

// Prepares ctx to start entry(arg) on stack when first switched to.
void make_context(Context& ctx, const FibreStack& stack, void (*entry)(void*), void* arg);

// Saves the running context in from and resumes to.
void switch_context(Context& from, Context& to);

}  // namespace emu::detail
