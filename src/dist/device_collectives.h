#pragma once
// Collectives over GPU memory between the ranks of a data-parallel run whose ranks train on
// GPUs, by NCCL: the gradients are reduced where they are, on a stream of their own, without a
// trip through the host. The ranks meet over the host world (MPI) first: rank 0 makes NCCL's
// unique id and the others receive it there, as llm.c does.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/bf16.h"
#include "dist/communicator.h"

namespace fp8lm {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // Starts an all-reduce (sum) of n values in this rank's GPU memory, in place. It waits on the
  // GPU for the work queued so far (the gradients it reduces), and backward's later kernels run
  // while it travels. The buffer is the collective's until wait_all().
  virtual void start_all_reduce_sum(float* values, size_t n, std::string_view what) = 0;
  // BF16 values summed as NCCL sums them (rounded to BF16 at each step).
  virtual void start_all_reduce_sum(bf16_t* values, size_t n, std::string_view what) = 0;
  // Waits until every started collective has completed. An NCCL error, or a collective not done
  // after the host world's timeout, aborts the NCCL communicator and ends in an Error naming
  // the collective (and, through the host world, the ranks that did not join it).
  virtual void wait_all() = 0;
  // As Communicator::traffic(): seconds this rank waited in wait_all(), bytes it reduced.
  virtual Communicator::Traffic traffic() const = 0;
  // "nccl 2.28.9 on cuda:0"
  virtual std::string describe() const = 0;
};

// Whether this build has NCCL (a CUDA build that found nccl.h and libnccl; the emulator's
// stand-in under the emu preset), and its version.
bool nccl_built();
std::string nccl_version();

// Whether two ranks train on the same physical GPU (the same machine and PCI address): NCCL
// takes one rank per GPU, so such ranks reduce through host memory instead. A collective call.
bool ranks_share_a_gpu(Communicator& host, const std::string& pci_address);

// This rank's device collectives on GPU `device`, between the ranks of `host` (a collective
// call: every rank makes its own at the same point).
std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& host, int device);

}  // namespace fp8lm
