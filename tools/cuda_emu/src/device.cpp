// The emulated devices: sm_90-like GPUs (compute capability 9.0, so the FP8 paths run), one
// unless CUDA_EMU_DEVICES asks for more, their streams and events. Kernels and copies complete
// before their call returns, so streams only need to exist (on their device) and events only
// need a time, and the work left in flight on their stream (runtime_state.h: PendingWork).
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "report.h"
#include "runtime_state.h"

struct CUstream_st {
  unsigned flags = 0;
  int device = 0;
};

struct CUevent_st {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
  unsigned flags = 0;
  bool captured = false;           // last recorded on a capturing stream (cudaErrorCapturedEvent)
  emu::detail::PendingList after;  // in flight on its stream when it was recorded
};

namespace emu::detail {
namespace {

std::mutex g_mutex;
std::set<cudaStream_t> g_streams;
std::set<cudaEvent_t> g_events;
thread_local int g_device = 0;

bool is_valid_event(cudaEvent_t e) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_events.count(e) != 0;
}

cudaDeviceProp make_properties() {
  cudaDeviceProp p{};
  std::strncpy(p.name, "fp8lm CUDA emulator (sm_90)", sizeof p.name - 1);
  p.totalGlobalMem = kDeviceMemory;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 0x7fffffff;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.clockRate = 1980000;
  p.major = 9;
  p.minor = 0;
  p.multiProcessorCount = 132;
  p.maxThreadsPerMultiProcessor = 2048;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.memoryBusWidth = 5120;
  // Each process emulates a GPU of its own (its memory is the process's): its PCI address
  // differs from every other process's, as two physical GPUs' do.
  p.pciDomainID = static_cast<int>(getpid());
  p.pciBusID = 1;
  p.pciDeviceID = 0;
  return p;
}

bool is_device(int device) {
  return device >= 0 && device < device_count();
}

}  // namespace

const cudaDeviceProp& properties() {
  static const cudaDeviceProp p = make_properties();
  return p;
}

int current_device() {
  return g_device;
}

int device_count() {
  const char* v = std::getenv("CUDA_EMU_DEVICES");
  const long n = v ? std::strtol(v, nullptr, 10) : 1;
  return n < 1 ? 1 : n > kMaxDevices ? kMaxDevices : static_cast<int>(n);
}

bool is_valid_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_streams.count(s)) return true;
  report("stream %p is not the default stream or a live cudaStreamCreate stream",
         static_cast<void*>(s));
  return false;
}

bool is_non_blocking(cudaStream_t s) {
  return s != nullptr && (s->flags & cudaStreamNonBlocking) != 0;
}

bool is_current_device_stream(cudaStream_t s) {
  if (!is_valid_stream(s)) return false;
  if (s == nullptr || s->device == g_device) return true;
  report("stream %p belongs to device %d, but device %d is current", static_cast<void*>(s),
         s->device, g_device);
  return false;
}

}  // namespace emu::detail

using emu::detail::fail;

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  return cudaRuntimeGetVersion(version);
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = emu::detail::device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = emu::detail::g_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!emu::detail::is_device(device)) return fail(cudaErrorInvalidDevice);
  emu::detail::g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (!emu::detail::is_device(device)) return fail(cudaErrorInvalidDevice);
  *prop = emu::detail::properties();
  prop->pciDeviceID = device;  // each device at its own PCI address
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (!emu::detail::is_device(device)) return fail(cudaErrorInvalidDevice);
  const cudaDeviceProp& p = emu::detail::properties();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = p.maxThreadsDim[0];
      break;
    case cudaDevAttrMaxGridDimX:
      *value = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    default:
      emu::detail::report("cudaDeviceGetAttribute: attribute %d is not emulated",
                          static_cast<int>(attr));
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = emu::detail::check_wait("cudaDeviceSynchronize", nullptr, true))
    return e;
  emu::detail::note_host_sync("cudaDeviceSynchronize");
  emu::detail::finish_all(emu::detail::pending_on(nullptr, /*every=*/true));
  return emu::detail::take_launch_failure();
}

cudaError_t cudaDeviceReset() {
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream) return fail(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags, emu::detail::g_device};
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  emu::detail::g_streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
    if (!stream || !emu::detail::g_streams.erase(stream)) {
      emu::detail::report("cudaStreamDestroy(%p): not a live stream", static_cast<void*>(stream));
      return fail(cudaErrorInvalidResourceHandle);
    }
  }
  if (emu::detail::is_capturing(stream)) {
    emu::detail::report("cudaStreamDestroy(%p): the stream is capturing",
                        static_cast<void*>(stream));
    return fail(cudaErrorIllegalState);
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = emu::detail::check_wait("cudaStreamSynchronize", stream)) return e;
  if (const cudaError_t e = emu::detail::check_legacy_use("cudaStreamSynchronize", stream))
    return e;
  emu::detail::note_host_sync("cudaStreamSynchronize");
  emu::detail::finish_all(emu::detail::pending_on(stream));
  return emu::detail::take_launch_failure();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = emu::detail::check_wait("cudaStreamQuery", stream)) return e;
  if (!emu::detail::pending_on(stream).empty()) return cudaErrorNotReady;
  return emu::detail::take_launch_failure();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!emu::detail::is_valid_stream(stream) || !emu::detail::is_valid_event(event))
    return fail(cudaErrorInvalidResourceHandle);
  if (event->captured || emu::detail::is_capturing(stream)) {
    emu::detail::report("cudaStreamWaitEvent: captures that span streams are not emulated");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  // The stream's later work runs when it is queued: what the event follows finishes now.
  emu::detail::finish_all(event->after);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event) return fail(cudaErrorInvalidValue);
  *event = new CUevent_st{{}, false, flags};
  const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
  emu::detail::g_events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    const std::lock_guard<std::mutex> lock(emu::detail::g_mutex);
    if (!event || !emu::detail::g_events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!emu::detail::is_valid_event(event) || !emu::detail::is_valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  // In a capture the event marks a point of the graph, not a time: it cannot be queried or
  // waited for until it is recorded again outside one.
  event->captured = emu::detail::is_capturing(stream);
  if (event->captured) return cudaSuccess;
  event->when = std::chrono::steady_clock::now();
  event->recorded = true;
  event->after = emu::detail::pending_on(stream);
  return cudaSuccess;
}

namespace {
// An event last recorded in a capture cannot be waited for or timed.
bool refuse_captured(const char* call, cudaEvent_t event) {
  if (!event->captured) return false;
  emu::detail::report("%s: the event was last recorded in a stream capture", call);
  fail(cudaErrorCapturedEvent);
  return true;
}
}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!emu::detail::is_valid_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (refuse_captured("cudaEventSynchronize", event)) return cudaErrorCapturedEvent;
  emu::detail::note_host_sync("cudaEventSynchronize");
  emu::detail::finish_all(event->after);
  return emu::detail::take_launch_failure();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!emu::detail::is_valid_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (refuse_captured("cudaEventQuery", event)) return cudaErrorCapturedEvent;
  if (!emu::detail::all_finished(event->after)) return cudaErrorNotReady;
  return emu::detail::take_launch_failure();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!emu::detail::is_valid_event(start) || !emu::detail::is_valid_event(end))
    return fail(cudaErrorInvalidResourceHandle);
  if (refuse_captured("cudaEventElapsedTime", start) ||
      refuse_captured("cudaEventElapsedTime", end))
    return cudaErrorCapturedEvent;
  if (!start->recorded || !end->recorded || (start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
