#pragma once
// How many times the host has waited for the device: the calls the CUDA documentation ("API
// synchronization behavior") says block the host until queued work is done. Counted on the
// calling host thread, so that a test can assert a step waits nowhere (issue 34):
//  - cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize;
//  - cudaMemcpy and cudaMemcpy2D between host and device memory (device to device does not
//    wait), and their Async forms where the host side is pageable (not from cudaMallocHost);
//  - cudaMalloc, cudaFree, cudaFreeHost (which synchronize the device).
// CUDA_EMU_TRACE_SYNCS=1 prints each one with the call stack that made it.
namespace emu {

unsigned long long host_synchronizations();

}  // namespace emu
