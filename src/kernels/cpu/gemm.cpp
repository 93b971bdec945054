#include "kernels/cpu/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "fp8lm/error.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/bf16_probe.h"
#include "kernels/cpu/casts.h"

namespace fp8lm::cpu {
namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A primitive is built once per (types, transposes, shape, beta, how alpha is applied): creating
// one costs far more than a small GEMM. alpha is a run-time argument, so it does not split the
// cache.
struct MatmulKey {
  memory::data_type dt;
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  bool scaled;  // alpha as oneDNN's run-time output scale; else brgemm's post-op (on_brgemm)
  bool operator<(const MatmulKey& o) const {
    return std::tie(dt, ta, tb, M, N, K, beta, scaled) <
           std::tie(o.dt, o.ta, o.tb, o.M, o.N, o.K, o.beta, o.scaled);
  }
};

// AMX tiles for fp8lm's dispatch (FP8LM_MAX_ISA) and for oneDNN's (DNNL_MAX_CPU_ISA): the bits
// below were measured on its AMX kernels only.
bool onednn_has_amx() {
  static const bool amx = [] {
    const auto want = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_amx);
    return cpu_features().amx_bf16 &&
           (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
  }();
  return amx;
}

std::atomic<bool>& brgemm_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

// Whether a product runs on oneDNN's AMX brgemm, alpha a post-op, rather than gemm:jit with
// alpha as its run-time output scale. oneDNN 2.6 takes a BF16 matmul with that scale to
// gemm:jit, and one without to its AMX brgemm kernels, which are faster at 32 <= K <= 512
// (0.45-0.9 of gemm:jit's time at the models' shapes on 2 threads) and give the same bits
// there (each element's K products in one chain of tile dot products, in order).
// Elsewhere the bits differ: beyond K = 512 the two split K differently (and brgemm is no
// faster); at K < 17, or M or N below 64 in some shapes, gemm:jit takes other kernels; brgemm
// adds a sum post-op's C (beta != 0) otherwise. Measured over every transpose at 1-3 threads;
// GemmBf16.BrgemmAndGemmJitGiveTheSameBits holds it. There alpha multiplies the finished sum in
// brgemm's epilogue, a binary post-op with a run-time 1x1 tensor: round(acc * alpha), as
// run_matmul's pass does after gemm:jit.
bool on_brgemm(memory::data_type dt, int64_t M, int64_t N, int64_t K, float beta) {
  return dt == memory::data_type::bf16 && K >= 32 && K <= 512 && M >= 64 && N >= 64 &&
         beta == 0.0f && onednn_has_amx() && brgemm_allowed();
}

MatmulKey matmul_key(memory::data_type dt, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                     float beta) {
  return {dt, ta == Trans::T, tb == Trans::T, M, N, K, beta, !on_brgemm(dt, M, N, K, beta)};
}

// The primitive with the memory objects and stream it runs with, made once: a call only
// points them at its buffers, so a steady-state GEMM allocates nothing (oneDNN's C++
// wrappers would allocate handles and an argument map per call).
struct Matmul {
  dnnl::matmul prim;
  memory a, b, c, scale, scratchpad;
  float alpha = 1.0f;                           // the scale memory's storage
  int scale_arg = DNNL_ARG_ATTR_OUTPUT_SCALES;  // or the post-op's operand (MatmulKey::scaled)
};

// oneDNN's own scratch (packed panels and the like) comes from this per-thread arena instead
// of a fresh allocation inside every call: it grows to the largest primitive's need.
std::vector<std::byte>& scratchpad_arena() {
  thread_local std::vector<std::byte> arena;
  return arena;
}

// alpha's memory: one value as the output scale, or a 1x1 tensor broadcast over the product as
// brgemm's post-op operand.
memory::desc alpha_desc(const MatmulKey& key) {
  if (key.scaled) return {{1}, memory::data_type::f32, memory::dims{1}};
  return {{1, 1}, memory::data_type::f32, memory::dims{1, 1}};
}

dnnl::matmul::primitive_desc matmul_desc(const MatmulKey& key) {
  const memory::dims a_strides = key.ta ? memory::dims{1, key.M} : memory::dims{key.K, 1};
  const memory::dims b_strides = key.tb ? memory::dims{1, key.K} : memory::dims{key.N, 1};
  const memory::desc a({key.M, key.K}, key.dt, a_strides);
  const memory::desc b({key.K, key.N}, key.dt, b_strides);
  const memory::desc c({key.M, key.N}, memory::data_type::f32, memory::dims{key.N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  if (key.scaled) {
    attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  } else {
    ops.append_binary(dnnl::algorithm::binary_mul, alpha_desc(key));
  }
  if (key.beta != 0.0f) ops.append_sum(key.beta);
  attr.set_post_ops(ops);
  return {dnnl::matmul::desc(a, b, c), attr, cpu_engine()};
}

Matmul& matmul_for(const MatmulKey& key) {
  // Per thread, so that the cached memory objects are never shared between concurrent calls.
  thread_local std::map<MatmulKey, std::unique_ptr<Matmul>> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto& engine = cpu_engine();
  auto mm = std::make_unique<Matmul>();
  const dnnl::matmul::primitive_desc pd = matmul_desc(key);
  mm->prim = dnnl::matmul(pd);
  mm->scratchpad = memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE);
  mm->a = memory(pd.src_desc(), engine, DNNL_MEMORY_NONE);
  mm->b = memory(pd.weights_desc(), engine, DNNL_MEMORY_NONE);
  mm->c = memory(pd.dst_desc(), engine, DNNL_MEMORY_NONE);
  mm->scale = memory(alpha_desc(key), engine, &mm->alpha);
  if (!key.scaled) mm->scale_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
  return *cache.emplace(key, std::move(mm)).first->second;
}

bool& in_execute() {
  thread_local bool inside = false;
  return inside;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// Per-thread workspaces (slots 0 and 1: operands; 2: a BF16 product before its alpha): they grow
// to the largest seen and are then reused, so a steady-state training step allocates nothing
// here.
template <class T>
std::array<std::vector<T>, 3>& workspaces() {
  thread_local std::array<std::vector<T>, 3> ws;
  return ws;
}

template <class T>
T* workspace(int slot, int64_t n) {
  std::vector<T>& w = workspaces<T>()[slot];
  if (w.size() < static_cast<size_t>(n)) {
    w.clear();
    w.shrink_to_fit();  // free first: the old contents are dead, and peak memory stays lower
    w.resize(static_cast<size_t>(n));
  }
  return w.data();
}

void execute_matmul(const MatmulKey& key, float alpha, const void* A, const void* B, float* C) {
  Matmul& mm = matmul_for(key);
  mm.alpha = alpha;
  mm.a.set_data_handle(const_cast<void*>(A));
  mm.b.set_data_handle(const_cast<void*>(B));
  mm.c.set_data_handle(C);
  std::vector<std::byte>& arena = scratchpad_arena();
  const size_t need = mm.scratchpad.get_desc().get_size();
  if (arena.size() < need) arena.resize(need);
  mm.scratchpad.set_data_handle(arena.data());
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.a.get()},
                                  {DNNL_ARG_WEIGHTS, mm.b.get()},
                                  {DNNL_ARG_DST, mm.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, mm.scratchpad.get()},
                                  {mm.scale_arg, mm.scale.get()}};
  dnnl::stream& stream = cpu_stream();
  in_execute() = true;
  dnnl::error::wrap_c_api(dnnl_primitive_execute(mm.prim.get(), stream.get(), 5, args),
                          "matmul execute");
  stream.wait();
  in_execute() = false;
}

// C = alpha * A·B + beta * C (+ bias, one per column, where given: the same bits as
// cpu::add_bias after the product). oneDNN's BF16 gemm:jit applies an alpha other than 1 in a
// scalar loop after the product, one element at a time (on the AMX VM 40% of an FP8 recipe's
// step, whose alpha is the operands' scale_inv product): there the product runs with alpha 1
// and alpha scales the finished sum here, vectorized: round(acc * alpha), then + round(beta *
// C), as cuBLASLt scales an FP8 GEMM's accumulator (oneDNN's own alpha path rounds otherwise),
// and the bias joins that pass instead of a pass of its own. On brgemm (beta 0) its epilogue
// does the same multiply.
void run_matmul(memory::data_type dt, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                float alpha, const void* A, const void* B, float beta, float* C,
                const float* bias) {
  const MatmulKey key = matmul_key(dt, ta, tb, M, N, K, beta);
  if (alpha == 1.0f || dt != memory::data_type::bf16 || !key.scaled) {
    execute_matmul(key, alpha, A, B, C);
    if (bias) add_bias(C, bias, M, N);
    return;
  }
  // The product alone (beta 0): key itself where C is not accumulated.
  float* product = beta == 0.0f ? C : workspace<float>(2, M * N);
  execute_matmul(beta == 0.0f ? key : matmul_key(dt, ta, tb, M, N, K, 0.0f), 1.0f, A, B, product);
  // The conditions are the same for every element: the compiler unswitches the loop.
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
  for (int64_t r = 0; r < M; ++r) {
    const float* p = product + r * N;
    float* c = C + r * N;
    for (int64_t j = 0; j < N; ++j) {
      float v = p[j] * alpha;
      if (beta != 0.0f) v = v + beta * c[j];
      if (bias) v = v + bias[j];
      c[j] = v;
    }
  }
}

GemmStats& stats() {
  static GemmStats s;
  return s;
}

// Times one product into the stats; empty products cost nothing and count nothing.
template <class F>
void timed(int64_t M, int64_t N, int64_t K, F run) {
  if (M == 0 || N == 0) return;
  const auto t0 = Clock::now();
  run();
  GemmStats& s = stats();
  s.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  s.flops += 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
}

std::optional<LowPrecisionEngine>& chosen_engine() {
  static std::optional<LowPrecisionEngine> e;
  return e;
}

void bf16_native(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
                 const bf16_t* B, float beta, float* C, const float* bias) {
  run_matmul(memory::data_type::bf16, ta, tb, M, N, K, alpha, A, B, beta, C, bias);
}

void bf16_widened(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
                  const bf16_t* B, float beta, float* C, const float* bias) {
  float* a = workspace<float>(0, M * K);
  float* b = workspace<float>(1, K * N);
  bf16_to_f32(a, A, M * K);
  bf16_to_f32(b, B, K * N);
  run_matmul(memory::data_type::f32, ta, tb, M, N, K, alpha, a, b, beta, C, bias);
}

// An FP8 operand as BF16 values: the decoded values that came with it, or its codes decoded
// into workspace `slot`.
const bf16_t* bf16_operand(int slot, const uint8_t* codes, const bf16_t* decoded, int64_t n,
                           DType f) {
  if (decoded) return decoded;
  stats().fp8_values_decoded += n;
  bf16_t* w = workspace<bf16_t>(slot, n);
  fp8_to_bf16(w, codes, n, f);
  return w;
}

// The same widened to FP32 (exact), in workspace `slot`.
const float* f32_operand(int slot, const uint8_t* codes, const bf16_t* decoded, int64_t n,
                         DType f) {
  float* w = workspace<float>(slot, n);
  if (decoded) {
    bf16_to_f32(w, decoded, n);
  } else {
    stats().fp8_values_decoded += n;
    fp8_to_f32(w, codes, n, f);
  }
  return w;
}

LowPrecisionEngine measure_engine() {
  if (const char* env = std::getenv("FP8LM_GEMM_ENGINE")) {
    const std::string v = env;
    if (v == "native") return LowPrecisionEngine::NativeBf16;
    if (v == "widen") return LowPrecisionEngine::WidenToFp32;
    throw Error("FP8LM_GEMM_ENGINE must be native or widen, got '" + v + "'");
  }
  if (cpu_features().amx_bf16) return LowPrecisionEngine::NativeBf16;  // tiles: 8x FP32 FMA
  const Bf16Throughput& t = bf16_throughput();
  return t.dpbf16_gflops > 1.2 * t.fma_gflops ? LowPrecisionEngine::NativeBf16
                                              : LowPrecisionEngine::WidenToFp32;
}

}  // namespace

std::string_view engine_name(LowPrecisionEngine e) {
  return e == LowPrecisionEngine::NativeBf16 ? "onednn-bf16" : "widen-to-fp32";
}

std::string gemm_implementation(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float beta) {
  const memory::data_type dt = low_precision_engine() == LowPrecisionEngine::NativeBf16
                                   ? memory::data_type::bf16
                                   : memory::data_type::f32;
  return matmul_desc(matmul_key(dt, ta, tb, M, N, K, beta)).impl_info_str();
}

std::string engine_implementation() {
  const std::string large = gemm_implementation(Trans::N, Trans::T, 2048, 2048, 2048, 0.0f);
  const std::string short_k = gemm_implementation(Trans::N, Trans::T, 2048, 2048, 512, 0.0f);
  return short_k == large ? large : fmt::format("{}; at 32 <= K <= 512: {}", large, short_k);
}

LowPrecisionEngine low_precision_engine() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!chosen_engine()) chosen_engine() = measure_engine();
  });
  return *chosen_engine();
}

void allow_bf16_brgemm(bool allowed) {
  brgemm_allowed() = allowed;
}

void set_low_precision_engine(LowPrecisionEngine e) {
  low_precision_engine();  // settle the one-time choice first so it cannot override this
  chosen_engine() = e;
}

bool inside_onednn_execute() {
  return in_execute();
}

size_t gemm_workspace_bytes() {
  size_t total = 0;
  for (const auto& w : workspaces<float>()) total += w.capacity() * sizeof(float);
  for (const auto& w : workspaces<bf16_t>()) total += w.capacity() * sizeof(bf16_t);
  total += scratchpad_arena().capacity();
  return total;
}

GemmStats gemm_stats() {
  return stats();
}
void reset_gemm_stats() {
  stats() = {};
}

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              const float* B, float beta, float* C, const float* bias) {
  timed(M, N, K,
        [&] { run_matmul(memory::data_type::f32, ta, tb, M, N, K, alpha, A, B, beta, C, bias); });
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
               const bf16_t* B, float beta, float* C, const float* bias) {
  const LowPrecisionEngine e = low_precision_engine();
  timed(M, N, K, [&] {
    if (e == LowPrecisionEngine::NativeBf16)
      return bf16_native(ta, tb, M, N, K, alpha, A, B, beta, C, bias);
    bf16_widened(ta, tb, M, N, K, alpha, A, B, beta, C, bias);
  });
}

void gemm_fp8(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint8_t* A,
              DType fa, const uint8_t* B, DType fb, float beta, float* C, const bf16_t* A16,
              const bf16_t* B16, const float* bias) {
  const LowPrecisionEngine e = low_precision_engine();
  timed(M, N, K, [&] {
    if (e == LowPrecisionEngine::NativeBf16) {
      return bf16_native(ta, tb, M, N, K, alpha, bf16_operand(0, A, A16, M * K, fa),
                         bf16_operand(1, B, B16, K * N, fb), beta, C, bias);
    }
    run_matmul(memory::data_type::f32, ta, tb, M, N, K, alpha, f32_operand(0, A, A16, M * K, fa),
               f32_operand(1, B, B16, K * N, fb), beta, C, bias);
  });
}

}  // namespace fp8lm::cpu
