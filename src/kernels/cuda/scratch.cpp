#include "kernels/cuda/scratch.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/device_buffer.h"

namespace fp8lm::cuda {

void* stream_scratch(ScratchUse use, size_t bytes, cudaStream_t stream) {
  using Key = std::tuple<int, uintptr_t, int>;
  static std::mutex mutex;
  // Never destroyed: freeing device memory from a static destructor can run after the CUDA
  // runtime has shut down.
  static auto* buffers = new std::map<Key, DeviceBuffer<unsigned char>>();
  int device = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  DeviceBuffer<unsigned char>& buffer =
      (*buffers)[Key{device, reinterpret_cast<uintptr_t>(stream), static_cast<int>(use)}];
  if (bytes > buffer.size()) {
    // The old buffer may still be in use by kernels queued on this stream.
    if (buffer.size() > 0) FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
    buffer.resize(bytes);
  }
  return buffer.data();
}

}  // namespace fp8lm::cuda
