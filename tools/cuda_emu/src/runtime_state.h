#pragma once
// State the runtime API's parts share: the last error, and the registry of device memory.
#include <cstddef>
#include <cstdint>
#include <memory>
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

// The emulated device's memory size (16 GiB).
inline constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;

}  // namespace emu::detail
