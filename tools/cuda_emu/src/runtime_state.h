#pragma once
// State the runtime API's parts share: the last error, and the registry of device memory.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cuda_runtime_api.h"

namespace emu::detail {

// Records err as the last error (cudaGetLastError) and returns it, for `return fail(...)`.
cudaError_t fail(cudaError_t err);

// A kernel failed (a device error or deadlock): the next synchronizing call and
// cudaGetLastError report cudaErrorLaunchFailure.
void note_launch_failure();

// Success, or the pending launch failure (then cleared): what synchronizing calls return.
cudaError_t take_launch_failure();

// Whether [p, p + bytes) lies inside one cudaMalloc allocation (bytes = 0: p inside it or at
// its end).
bool is_device_range(const void* p, std::size_t bytes);

// Whether p points into any cudaMalloc allocation.
bool is_device_pointer(const void* p);

// The device whose memory p is (inside an allocation or at its end), or -1 if none.
int device_of(const void* p);

// The calling host thread's current device (cudaSetDevice), and how many there are:
// CUDA_EMU_DEVICES (1 to kMaxDevices, default 1), so that code holding two devices can be
// tested on one machine.
int current_device();
int device_count();
inline constexpr int kMaxDevices = 8;

// Checks the guard bytes around every live allocation after a launch: a kernel that wrote
// past either end of its buffer is reported (the guard restored) and the launch fails.
bool guards_intact(const void* kernel);

// Bytes allocated now, for cudaMemGetInfo.
std::size_t allocated_bytes();

// Counts a call that makes the host wait for the device (emu/host_syncs.h).
void note_host_sync(const char* call);

// cudaMallocHost's blocks (bytes 0: freed), and whether [p, p + bytes) lies in one: pinned
// memory, which asynchronous copies take without waiting.
void note_pinned(const void* p, std::size_t bytes);
bool is_pinned(const void* p, std::size_t bytes);

// Whether s is the default stream or one from cudaStreamCreate.
bool is_valid_stream(cudaStream_t s);

// Whether s was made with cudaStreamNonBlocking (it does not synchronize with the legacy
// default stream).
bool is_non_blocking(cudaStream_t s);

// Whether s may take work now: valid, and the current device's (the default stream always is).
bool is_current_device_stream(cudaStream_t s);

// Work a stream runs beside the host: the NCCL stand-in's collectives, started when called and
// finished later, as NCCL's run on the GPU while the host goes on. Until it finishes, an event
// recorded after it on its stream is not complete (cudaEventQuery: not ready), and whatever
// waits for the stream or such an event, or queues more work on the stream, finishes it first.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  virtual bool finished() = 0;  // without waiting
  virtual void finish() = 0;    // waits for it
};
using PendingList = std::vector<std::shared_ptr<PendingWork>>;
void queue_pending(cudaStream_t s, std::shared_ptr<PendingWork> work);
// The unfinished work queued on s; on every stream when `every`.
PendingList pending_on(cudaStream_t s, bool every = false);
bool all_finished(const PendingList& work);
void finish_all(const PendingList& work);

// Stream capture (src/graphs.cpp). Work queued on a capturing stream becomes a node, run at each
// launch of a graph made from the capture, on the launch's stream; a node reports its own
// failure (note_launch_failure), as a kernel of the launch.
enum class NodeKind { Kernel, Copy, Memset, Gemm, Sort };
using NodeRun = std::function<void(cudaStream_t)>;
struct GraphNode {
  NodeKind kind;
  NodeRun run;
};
bool is_capturing(cudaStream_t s);
// If s captures: run kept as its next node, and what the call returns (cudaSuccess, or
// cudaErrorStreamCaptureInvalidated after a misuse). Otherwise nothing: the caller runs it now.
std::optional<cudaError_t> capture_node(cudaStream_t s, NodeKind kind, NodeRun run);
// What may not happen during a capture, checked as a call starts: cudaSuccess, or the error it
// returns (reported, the conflicting captures invalidated).
//  - check_legacy_use: work on the legacy default stream (s null) while a blocking stream
//    captures;
//  - check_wait: waiting for stream s, or for every stream, while it captures;
//  - check_unsafe: a call that may synchronize the device, during a global-mode capture (or a
//    thread-local one on this thread);
//  - refuse_in_capture: something the emulator does not capture (`why`), queued on s while s
//    captures.
cudaError_t check_legacy_use(const char* call, cudaStream_t s);
cudaError_t check_wait(const char* call, cudaStream_t s, bool every = false);
cudaError_t check_unsafe(const char* call);
cudaError_t refuse_in_capture(const char* call, cudaStream_t s, const char* why);

// The emulated device's memory size (16 GiB).
inline constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;

}  // namespace emu::detail
