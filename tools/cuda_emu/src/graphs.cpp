// Stream capture and graphs. While a stream captures, the work queued on it is not run: each
// kernel, copy, memset, cuBLASLt call or sort is checked as when it is queued and kept as a node
// that runs it later, at every cudaGraphLaunch of a graph instantiated from the capture, on the
// launch's stream. So a capture that reads data the host changes afterwards, frees memory a node
// uses, or expects a captured result to be there before the launch, goes wrong here as on a GPU
// (and the memory checks name the node's kernel or call).
//
// What the runtime forbids while a stream captures is refused with its error, the capture
// invalidated (cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated and no graph):
//  - work on the legacy default stream while a blocking stream captures (the legacy stream would
//    wait for work that has not run): cudaErrorStreamCaptureImplicit;
//  - waiting for a capturing stream (cudaStreamSynchronize, cudaStreamQuery,
//  cudaDeviceSynchronize):
//    cudaErrorStreamCaptureUnsupported;
//  - in global mode (and thread-local mode on the capturing thread), calls that may synchronize
//    the device (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost, blocking copies):
//    cudaErrorStreamCaptureUnsupported;
//  - querying or waiting for an event recorded in a capture: cudaErrorCapturedEvent.
// Not emulated, refused as unsupported: captures that span streams (cudaStreamWaitEvent into or
// out of a capture), graph memory nodes (cudaMallocAsync, cudaFreeAsync while capturing), NCCL
// inside a capture, and launching a graph into a capture.
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "report.h"
#include "runtime_state.h"

struct CUgraph_st {
  std::vector<emu::detail::GraphNode> nodes;
};

struct CUgraphExec_st {
  std::vector<emu::detail::GraphNode> nodes;
  int device = 0;
};

namespace emu::detail {
namespace {

struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool blocking = true;  // the stream synchronizes with the legacy default stream
  bool invalidated = false;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
};

std::mutex g_mutex;
std::map<cudaStream_t, Capture> g_captures;
std::set<cudaGraph_t> g_graphs;
std::set<cudaGraphExec_t> g_execs;

// Invalidates every capture `conflicts` picks (g_mutex held), reporting why; returns whether any.
template <typename F>
bool invalidate_where(const char* call, const char* why, F conflicts) {
  bool any = false;
  for (auto& [stream, capture] : g_captures) {
    if (capture.invalidated || !conflicts(stream, capture)) continue;
    report("%s while stream %p captures: %s; the capture is invalidated", call,
           static_cast<void*>(stream), why);
    capture.invalidated = true;
    any = true;
  }
  return any;
}

}  // namespace

bool is_capturing(cudaStream_t s) {
  if (s == nullptr) return false;
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_captures.count(s) != 0;
}

std::optional<cudaError_t> capture_node(cudaStream_t s, NodeKind kind, NodeRun run) {
  if (s == nullptr) return std::nullopt;
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_captures.find(s);
  if (it == g_captures.end()) return std::nullopt;
  if (it->second.invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  it->second.graph->nodes.push_back({kind, std::move(run)});
  return cudaSuccess;
}

cudaError_t refuse_in_capture(const char* call, cudaStream_t s, const char* why) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_captures.find(s);
  if (s == nullptr || it == g_captures.end()) return cudaSuccess;
  if (!it->second.invalidated) {
    report("%s on stream %p while it captures: %s; the capture is invalidated", call,
           static_cast<void*>(s), why);
    it->second.invalidated = true;
  }
  return fail(cudaErrorStreamCaptureUnsupported);
}

cudaError_t check_legacy_use(const char* call, cudaStream_t s) {
  if (s != nullptr) return cudaSuccess;
  const std::lock_guard<std::mutex> lock(g_mutex);
  const bool any =
      invalidate_where(call, "the legacy default stream would wait for work that has not run",
                       [](cudaStream_t, const Capture& c) { return c.blocking; });
  return any ? fail(cudaErrorStreamCaptureImplicit) : cudaSuccess;
}

cudaError_t check_wait(const char* call, cudaStream_t s, bool every) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const bool any =
      invalidate_where(call, "it waits for work that has not run",
                       [&](cudaStream_t t, const Capture&) { return every || t == s; });
  return any ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t check_unsafe(const char* call) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const auto me = std::this_thread::get_id();
  const bool any =
      invalidate_where(call, "it may synchronize the device, which its capture mode forbids",
                       [&](cudaStream_t, const Capture& c) {
                         return c.mode == cudaStreamCaptureModeGlobal ||
                                (c.mode == cudaStreamCaptureModeThreadLocal && c.thread == me);
                       });
  return any ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

}  // namespace emu::detail

namespace emu {

cudaError_t run_on_stream(cudaStream_t stream, std::function<void()> work) {
  if (!detail::is_valid_stream(stream)) return detail::fail(cudaErrorInvalidResourceHandle);
  if (const std::optional<cudaError_t> captured =
          detail::capture_node(stream, detail::NodeKind::Sort, [work](cudaStream_t) { work(); }))
    return *captured;
  if (const cudaError_t e = detail::check_legacy_use("stream work", stream)) return e;
  detail::finish_all(detail::pending_on(stream));
  work();
  return cudaSuccess;
}

}  // namespace emu

using emu::detail::fail;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) {
    emu::detail::report("cudaStreamBeginCapture: the legacy default stream cannot capture");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (!emu::detail::is_current_device_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  emu::detail::finish_all(emu::detail::pending_on(stream));  // what ran before is not captured
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  if (emu::detail::g_captures.count(stream)) {
    emu::detail::report("cudaStreamBeginCapture(%p): the stream is already capturing",
                        static_cast<void*>(stream));
    return fail(cudaErrorIllegalState);
  }
  emu::detail::Capture& c = emu::detail::g_captures[stream];
  c.mode = mode;
  c.thread = std::this_thread::get_id();
  c.blocking = !emu::detail::is_non_blocking(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  const auto it = emu::detail::g_captures.find(stream);
  if (stream == nullptr || it == emu::detail::g_captures.end()) {
    emu::detail::report("cudaStreamEndCapture(%p): the stream is not capturing",
                        static_cast<void*>(stream));
    return fail(cudaErrorIllegalState);
  }
  if (it->second.mode != cudaStreamCaptureModeRelaxed &&
      it->second.thread != std::this_thread::get_id()) {
    emu::detail::report("cudaStreamEndCapture(%p): not the thread that began the capture",
                        static_cast<void*>(stream));
    return fail(cudaErrorStreamCaptureWrongThread);
  }
  emu::detail::Capture c = std::move(it->second);
  emu::detail::g_captures.erase(it);
  if (c.invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = c.graph.release();
  emu::detail::g_graphs.insert(*graph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue);
  if (!emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  const auto it = emu::detail::g_captures.find(stream);
  *status = it == emu::detail::g_captures.end() ? cudaStreamCaptureStatusNone
            : it->second.invalidated            ? cudaStreamCaptureStatusInvalidated
                                                : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec) return fail(cudaErrorInvalidValue);
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  if (!emu::detail::g_graphs.count(graph)) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes, emu::detail::current_device()};
  emu::detail::g_execs.insert(*exec);
  return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                cudaGraphExecUpdateResultInfo* info) {
  if (!info) return fail(cudaErrorInvalidValue);
  *info = {cudaGraphExecUpdateError, nullptr, nullptr};
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  if (!emu::detail::g_execs.count(exec) || !emu::detail::g_graphs.count(graph))
    return fail(cudaErrorInvalidValue);
  // A graph captured from one stream is a chain: the same topology is the same number of nodes;
  // each keeps its type. A kernel node may change its function and every parameter, a copy or
  // memset its addresses and sizes (1D), as the documentation allows.
  if (graph->nodes.size() != exec->nodes.size()) {
    info->result = cudaGraphExecUpdateErrorTopologyChanged;
    return fail(cudaErrorGraphExecUpdateFailure);
  }
  for (std::size_t i = 0; i < graph->nodes.size(); ++i) {
    if (graph->nodes[i].kind != exec->nodes[i].kind) {
      info->result = cudaGraphExecUpdateErrorNodeTypeChanged;
      return fail(cudaErrorGraphExecUpdateFailure);
    }
  }
  exec->nodes = graph->nodes;
  info->result = cudaGraphExecUpdateSuccess;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::vector<emu::detail::GraphNode> nodes;
  {
    const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
    if (!emu::detail::g_execs.count(exec)) return fail(cudaErrorInvalidValue);
    nodes = exec->nodes;
    if (exec->device != emu::detail::current_device()) {
      emu::detail::report("cudaGraphLaunch: the graph was instantiated on device %d, not %d",
                          exec->device, emu::detail::current_device());
      return fail(cudaErrorInvalidResourceHandle);
    }
  }
  if (!emu::detail::is_current_device_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = emu::detail::refuse_in_capture("cudaGraphLaunch", stream,
                                                           "child graphs are not emulated"))
    return e;
  if (const cudaError_t e = emu::detail::check_legacy_use("cudaGraphLaunch", stream)) return e;
  emu::detail::finish_all(emu::detail::pending_on(stream));
  for (const emu::detail::GraphNode& node : nodes) {
    // A node's failure is a device error of the launch, reported by the next synchronizing call.
    node.run(stream);
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  if (!emu::detail::g_execs.erase(exec)) return fail(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  if (!emu::detail::g_graphs.erase(graph)) return fail(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}
