#pragma once
// Device scratch memory the kernels own (cuBLASLt workspace, partial sums): one
// buffer per (device, stream, use), grown on demand and kept for the life of the process. Per
// stream, because work queued on two streams may run at once and must not share bytes.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace fp8lm::cuda {

enum class ScratchUse : int { GemmWorkspace, ColumnPartials };

// At least `bytes` bytes (256-byte aligned, as from cudaMalloc) on the current device, for work
// queued on `stream`; contents undefined. Valid until a later call for the same (device, stream,
// use) asks for more: growing first waits for the stream, so queued work never loses its buffer.
void* stream_scratch(ScratchUse use, size_t bytes, cudaStream_t stream);

}  // namespace fp8lm::cuda
