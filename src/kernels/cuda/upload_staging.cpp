#include "kernels/cuda/upload_staging.h"

#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace fp8lm::cuda {

UploadStaging::~UploadStaging() {
  for (Buffer& b : ring_) {
    if (b.copied) {
      cudaEventSynchronize(b.copied);  // no copy may still read the buffer
      cudaEventDestroy(b.copied);
    }
    if (b.host) cudaFreeHost(b.host);
  }
}

UploadStaging::Buffer& UploadStaging::next_free(bool capturing) {
  // A buffer the capture under way copies from holds its bytes until the graph runs.
  if (capturing && ring_[next_].in_capture) ring_.insert(ring_.begin() + long(next_), Buffer{});
  Buffer& b = ring_[next_];
  next_ = (next_ + 1) % ring_.size();
  if (b.copied) {
    const cudaError_t state = cudaEventQuery(b.copied);
    if (state == cudaErrorNotReady) {
      FP8LM_CUDA_CHECK(cudaEventSynchronize(b.copied));
    } else {
      FP8LM_CUDA_CHECK(state);
    }
  } else {
    FP8LM_CUDA_CHECK(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
  }
  return b;
}

void UploadStaging::upload(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FP8LM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (bytes > kMaxStagedBytes && !capturing) {
    FP8LM_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
    return;
  }
  Buffer& b = next_free(capturing);
  if (b.bytes < bytes) {
    if (b.host) FP8LM_CUDA_CHECK(cudaFreeHost(b.host));
    b.host = nullptr;
    b.bytes = 0;
    // Grown in powers of two from 4 KB, so a run's uploads settle after a few steps.
    size_t grow = 4096;
    while (grow < bytes) grow *= 2;
    FP8LM_CUDA_CHECK(cudaMallocHost(&b.host, grow));
    b.bytes = grow;
  }
  std::memcpy(b.host, host, bytes);
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, stream));
  if (capturing) {
    b.in_capture = true;
  } else {
    FP8LM_CUDA_CHECK(cudaEventRecord(b.copied, stream));
  }
}

void UploadStaging::after_capture(cudaStream_t stream) {
  for (Buffer& b : ring_) {
    if (!b.in_capture) continue;
    b.in_capture = false;
    FP8LM_CUDA_CHECK(cudaEventRecord(b.copied, stream));
  }
}

}  // namespace fp8lm::cuda
