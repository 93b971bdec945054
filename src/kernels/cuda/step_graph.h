#pragma once
// A training step as one CUDA graph (issue 34). The step's host code runs as it always does,
// with the backend's stream capturing instead of running what it queues; the capture is then
// launched whole, so the device runs the step's hundreds of kernels back to back without
// waiting for the host to queue each one. Every step is captured afresh, so every counter and
// decision the host makes in a step (weight versions, the scaling store's slots, the step's
// read slot, the learning rate in a kernel's parameters) is the step's own, and the
// executable graph of the step before is updated to the new capture's parameters where the
// two have the same shape (cheap: no instantiation), as cudaGraphExecUpdate allows.
//
// Nothing a step captures may read device memory back or wait for the device (the emulator
// refuses it: tools/cuda_emu's stream capture), which a steady step does not
// (StepHostSynchronisations). Memory freed while a step is captured is freed after its launch
// (free_device): the captured work that may still use it has not run.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

// cudaFree, or, while a step is being captured, the same after the graph's launch.
void free_device(void* p);

class StepGraph {
 public:
  StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  ~StepGraph();

  // Starts capturing stream (relaxed: allocations stay allowed, e.g. a buffer that grows).
  void begin(cudaStream_t stream);
  bool capturing() const { return stream_ != nullptr; }
  // Ends the capture and launches it on the stream it captured; then frees what was freed
  // during the capture.
  void launch();
  // Ends a capture whose step failed: none of it runs.
  void abandon();

  // Process-wide, for tests: graphs launched, and how many needed a new executable graph.
  struct Counts {
    int64_t launched = 0, instantiated = 0;
  };
  static Counts counts();

 private:
  cudaGraph_t end();
  void free_deferred();
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace fp8lm::cuda
