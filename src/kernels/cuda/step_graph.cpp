#include "kernels/cuda/step_graph.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda {
namespace {

std::mutex g_mutex;
int g_capturing = 0;            // steps being captured now
std::vector<void*> g_deferred;  // freed during a capture
std::atomic<int64_t> g_launched{0}, g_instantiated{0};

}  // namespace

void free_device(void* p) {
  if (p == nullptr) return;
  {
    const std::lock_guard lock(g_mutex);
    if (g_capturing > 0) {
      g_deferred.push_back(p);
      return;
    }
  }
  cudaFree(p);  // as a destructor's: errors of earlier work surface at the next checked call
}

StepGraph::~StepGraph() {
  if (capturing()) abandon();
  if (exec_) cudaGraphExecDestroy(exec_);
}

void StepGraph::begin(cudaStream_t stream) {
  FP8LM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  stream_ = stream;
  const std::lock_guard lock(g_mutex);
  ++g_capturing;
}

cudaGraph_t StepGraph::end() {
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  {
    const std::lock_guard lock(g_mutex);
    --g_capturing;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    stream_ = nullptr;
    free_deferred();
    FP8LM_CUDA_CHECK(err);  // the step queued something a graph cannot hold: an Error
  }
  return graph;
}

void StepGraph::launch() {
  cudaGraph_t graph = end();
  const cudaStream_t stream = std::exchange(stream_, nullptr);
  if (exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec_, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();  // another shape (a step that recast a weight, say): a new one
      cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
  }
  const bool fresh = exec_ == nullptr;
  const cudaError_t made = fresh ? cudaGraphInstantiate(&exec_, graph, 0) : cudaSuccess;
  if (fresh && made == cudaSuccess) ++g_instantiated;
  cudaGraphDestroy(graph);
  FP8LM_CUDA_CHECK(made);
  FP8LM_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  ++g_launched;
  free_deferred();
}

void StepGraph::abandon() {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  {
    const std::lock_guard lock(g_mutex);
    --g_capturing;
  }
  stream_ = nullptr;
  free_deferred();
}

void StepGraph::free_deferred() {
  std::vector<void*> freed;
  {
    const std::lock_guard lock(g_mutex);
    if (g_capturing > 0) return;
    freed.swap(g_deferred);
  }
  for (void* p : freed) cudaFree(p);  // after the launch: cudaFree waits for the graph
}

StepGraph::Counts StepGraph::counts() {
  return {g_launched.load(), g_instantiated.load()};
}

}  // namespace fp8lm::cuda
