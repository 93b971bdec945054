#pragma once
// Data-parallel gradient reduction in buckets overlapped with backward, as PyTorch's DDP and
// Megatron-LM do it: parameters are grouped, from the last, into buckets of about a set size;
// as soon as backward has made a bucket's gradients final its all-reduce starts, and backward
// computes the layers before it while the bucket travels. After backward the trainer waits for
// what is still in flight and the sums are written back into the gradients.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "nn/parameter.h"

namespace fp8lm {

// Gradients of parameters [begin, end) into a flat buffer of the reduction's type, in order,
// and back: whatever each parameter keeps its gradient in (FP32, or BF16 under --fp8-weights),
// converted (FP32 to BF16 rounds to nearest even).
template <class T>
void pack_gradients(const ParameterList& ps, size_t begin, size_t end, T* flat);
template <class T>
void unpack_gradients(const ParameterList& ps, size_t begin, size_t end, const T* flat);

class GradientBuckets {
 public:
  // bucket_bytes: a bucket closes once it holds this many bytes of the reduction's type (0:
  // one bucket, reduced after backward). bf16: the gradients travel and are summed in BF16.
  // device: the GPU ranks' collectives (NCCL) when the parameters live on a GPU; the buckets
  // are then made and reduced in its memory. Otherwise (null) they go through host memory
  // over `ranks`.
  GradientBuckets(ParameterList params, Communicator& ranks, bool bf16, size_t bucket_bytes,
                  DeviceCollectives* device = nullptr);
  // GPT::backward's hook: parameters [first, end) are final. Starts each bucket now whole, in
  // the fixed order of the buckets (the same on every rank), and lets those in flight move.
  void ready(size_t first, size_t end);
  // After backward: starts the buckets not started yet, waits for every one, and writes the
  // sums back into the gradients.
  void finish();
  size_t buckets() const { return buckets_.size(); }

 private:
  void start(size_t bucket);
  ParameterList params_;
  Communicator& ranks_;
  bool bf16_;
  std::vector<size_t> offset_;  // where each parameter's values begin in the flat buffer
  struct Bucket {
    size_t begin, end;  // parameters
  };
  std::vector<Bucket> buckets_;  // from the last parameters: the order backward completes them
  size_t next_ = 0;              // the first bucket not started
  std::vector<bool> ready_;
  DeviceCollectives* device_;
  std::vector<float> flat32_;  // host buckets
  std::vector<bf16_t> flat16_;
  std::unique_ptr<BackendBuffer<float>> device32_;  // device buckets
  std::unique_ptr<BackendBuffer<bf16_t>> device16_;
};

}  // namespace fp8lm
