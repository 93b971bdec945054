#pragma once
// ZeRO-1 (--zero 1): the optimizer's state split over the data-parallel ranks. Each rank owns
// a run of whole parameters, updates only those and keeps only their moments: the gradients
// are reduce-scattered to their owners, the updated weights all-gathered back (with
// --fp8-weights as FP8 codes: each owner casts its weights and sends the codes with the scales
// and amax of the cast, so no rank casts another's), and for a checkpoint the moments and FP32
// masters are gathered to rank 0. Buffers are flat host copies in parameter order.
#include <cstddef>
#include <functional>
#include <vector>

#include "core/bf16.h"
#include "dist/communicator.h"
#include "fp8/recipe.h"
#include "nn/linear.h"
#include "nn/parameter.h"

namespace fp8lm {

class OptimizerSharding {
 public:
  // Splits ps into one run of whole parameters per rank, rank r's beginning at the first
  // parameter with at least r/n of the values before it. Error when the values exceed what one
  // MPI collective counts. bf16_reduce: gradients travel in BF16 (--bf16-grad-reduce).
  OptimizerSharding(Communicator& ranks, const ParameterList& ps, bool bf16_reduce);

  // This rank's parameters [begin, end).
  size_t begin() const { return begin_[static_cast<size_t>(ranks_.rank())]; }
  size_t end() const { return begin_[static_cast<size_t>(ranks_.rank()) + 1]; }

  // Every rank's gradients summed into this rank's parameters' gradients (the others' are
  // left as they were).
  void reduce_scatter_gradients(const ParameterList& ps);
  // Each owner's weights to every rank. fp8[i] is parameter i's Linear when its weight travels
  // as FP8 codes (cast with recipe by its owner; the others then keep no FP32 master), else
  // null: its FP32 values. what names the collective in errors.
  void all_gather_weights(const ParameterList& ps, const std::vector<Linear*>& fp8,
                          const Fp8Recipe& recipe, const char* what);
  // The buffers of(i, parameter) picks (moments, masters): each owner's share gathered into
  // rank 0's, whose buffers must already be whole.
  using BufferOf = std::function<BackendBuffer<float>&(size_t, Parameter&)>;
  void gather_to_first(const ParameterList& ps, const BufferOf& of, const char* what);

 private:
  Communicator& ranks_;
  bool bf16_reduce_;
  std::vector<size_t> begin_;  // rank r owns parameters [begin_[r], begin_[r + 1])
  std::vector<int> values_;    // and this many values
  // Reused each step: the whole model's gradients (then the gathered weights' bytes), and this
  // rank's share.
  std::vector<float> flat_, shard_;
  std::vector<bf16_t> flat16_, shard16_;
};

}  // namespace fp8lm
