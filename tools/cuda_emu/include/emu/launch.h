#pragma once
// kernel<<<grid, block, smem, stream>>>(args), which rewrite_cu.py turns into
// emu::launch(kernel, emu::LaunchConfig(grid, block, smem, stream))(args). The launch runs at
// once on the calling host thread (every stream is synchronous), block after block, each
// block's threads as fibres (src/block_scheduler.cpp); on a capturing stream it is kept as a
// graph node instead, with a copy of its arguments (src/graphs.cpp).
#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu/runtime_types.h"
#include "emu/vector_types.h"

namespace emu {

struct LaunchConfig {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  LaunchConfig(dim3 g, dim3 b, std::size_t smem = 0, cudaStream_t s = nullptr)
      : grid(g), block(b), shared_bytes(smem), stream(s) {}
};

// Runs body(ctx) on every thread of the grid, after checking the configuration as the CUDA
// runtime does (an invalid one sets the last error and runs nothing).
void run_grid(const LaunchConfig& config, const void* kernel, void (*body)(void*), void* ctx);

// A kernel argument of pointer type must be null or point into (or just past) memory from
// cudaMalloc: a host pointer would fault on a GPU. False (reported, the launch refused) if not.
bool check_pointer_argument(const void* kernel, int index, const void* p);

// Records a launch that did not run, for cudaGetLastError.
void refuse_launch(cudaError_t error);

// Whether s captures (cudaStreamBeginCapture); then capture_launch checks the configuration as
// the runtime does and keeps run(stream) as the stream's next graph node.
bool stream_captures(cudaStream_t s);
void capture_launch(const LaunchConfig& config, const void* kernel,
                    std::function<void(cudaStream_t)> run);
// A graph's kernel node that could not run: a device error of the graph's launch.
void fail_graph_node();

template <typename... P>
class KernelLaunch {
 public:
  KernelLaunch(void (*kernel)(P...), const LaunchConfig& config)
      : kernel_(kernel), config_(config) {}

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    // Arguments are copied into the launch as a GPU copies them into parameter memory; each
    // thread then gets its own copy (a kernel may modify its by-value parameters).
    Params params(std::forward<A>(args)...);
    if (!stream_captures(config_.stream)) {
      run(params);
      return;
    }
    if (!pointers_ok(params, std::index_sequence_for<P...>{}))
      return refuse_launch(cudaErrorInvalidValue);
    auto kept = std::make_shared<const Params>(std::move(params));
    capture_launch(config_, reinterpret_cast<const void*>(kernel_),
                   [kernel = kernel_, config = config_, kept](cudaStream_t s) {
                     LaunchConfig on = config;
                     on.stream = s;
                     if (!KernelLaunch(kernel, on).run(*kept)) fail_graph_node();
                   });
  }

 private:
  using Params = std::tuple<std::decay_t<P>...>;

  // Checks the pointer arguments (again at each launch of a graph: memory may have been freed
  // since the capture) and runs the grid.
  bool run(const Params& params) const {
    if (!pointers_ok(params, std::index_sequence_for<P...>{})) {
      refuse_launch(cudaErrorInvalidValue);
      return false;
    }
    struct Ctx {
      void (*kernel)(P...);
      const Params* params;
    } ctx{kernel_, &params};
    run_grid(
        config_, reinterpret_cast<const void*>(kernel_),
        [](void* c) {
          const auto* x = static_cast<const Ctx*>(c);
          std::apply(x->kernel, *x->params);
        },
        &ctx);
    return true;
  }

  template <std::size_t... I>
  bool pointers_ok(const Params& params, std::index_sequence<I...>) const {
    return (pointer_ok(static_cast<int>(I), std::get<I>(params)) && ...);
  }
  template <typename T>
  bool pointer_ok(int index, const T& value) const {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>) {
      return check_pointer_argument(reinterpret_cast<const void*>(kernel_), index, value);
    } else {
      return true;
    }
  }

  void (*kernel_)(P...);
  LaunchConfig config_;
};

template <typename... P>
KernelLaunch<P...> launch(void (*kernel)(P...), const LaunchConfig& config) {
  return KernelLaunch<P...>(kernel, config);
}

}  // namespace emu
