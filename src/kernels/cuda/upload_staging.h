#pragma once
// Host-to-device copies that do not make the host wait (issue 34): a copy from pageable memory
// synchronises the stream first, so every token upload would stall the step. Small uploads go
// through a ring of pinned buffers instead: the caller's bytes are copied into the next buffer
// and an asynchronous copy queued from it; a buffer is reused once the copy queued from it has
// run (its event), which waits only if the device is a whole ring of uploads behind. Uploads
// larger than a buffer may be (weights, checkpoints: not in a training step) copy directly.
//
// While the stream captures a step (step_graph.h) the copy runs only when the graph does, so a
// buffer a capture copies from is not reused within it (the ring grows instead), every upload
// is staged whatever its size, and its event is recorded after the graph's launch
// (after_capture): an event recorded in a capture cannot be waited for.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace fp8lm::cuda {

class UploadStaging {
 public:
  UploadStaging() = default;
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;
  ~UploadStaging();

  // Copies bytes from host to dst (device memory) on stream; the host buffer may be reused at
  // once.
  void upload(void* dst, const void* host, size_t bytes, cudaStream_t stream);
  // After a capture's graph was launched on stream (or the capture abandoned).
  void after_capture(cudaStream_t stream);

  static constexpr size_t kMaxStagedBytes = size_t{4} << 20;

 private:
  struct Buffer {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // recorded after the last copy from this buffer
    bool in_capture = false;       // copied from by the capture under way
  };
  Buffer& next_free(bool capturing);
  std::vector<Buffer> ring_ = std::vector<Buffer>(8);
  size_t next_ = 0;
};

}  // namespace fp8lm::cuda
