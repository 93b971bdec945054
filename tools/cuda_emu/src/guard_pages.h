#pragma once
// Device allocations with guards, as compute-sanitizer's memcheck checks them: each allocation
// ends against an inaccessible page and starts after one, the bytes between the request and
// those pages hold a guard pattern, and freed memory stays inaccessible for a while. A kernel
// that reads or writes past a page guard, or touches freed memory, faults; the fault handler
// turns that into a device error naming the allocation. A write into the guard bytes (inside
// the page, so no fault) is found by checking them after every launch and at cudaFree.
#include <cstddef>
#include <cstdint>

namespace emu::detail {

struct Mapping {
  uintptr_t map = 0;  // the whole mapping, guard pages included
  std::size_t map_bytes = 0;
  uintptr_t base = 0;     // what cudaMalloc returns: 256-byte aligned
  std::size_t bytes = 0;  // what was asked for
};

// A mapping for `bytes` (> 0) filled with `fill`; map = 0 if the memory is not there.
Mapping map_guarded(std::size_t bytes, int fill);

// Makes m inaccessible (its memory returned), kept reserved so that a later access faults as a
// use after free; the oldest retired mappings are unmapped past a budget of address space.
void retire(const Mapping& m);

// The offset from base of the first guard byte that is not the pattern (negative: before the
// allocation), restoring them all; false if all hold. near_only checks the 256 bytes before
// base and the tail (the cheap check after each launch); otherwise every guard byte.
bool overwritten_guard(const Mapping& m, bool near_only, std::ptrdiff_t* offset);

// Installs the SIGSEGV handler (once) that reports faults in guard pages and retired memory.
void install_fault_handler();

// For the fault handler (memory.cpp, which knows the live allocations): a description of addr
// if it lies in a live allocation's guard pages, written into out; false if not.
bool describe_guard_fault(uintptr_t addr, char* out, std::size_t out_bytes);

}  // namespace emu::detail
