#include "kernels/cpu/gemm.h"

#include <array>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace fp8lm::cpu {
namespace {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A primitive is built once per (types, transposes, shape, beta): creating one costs far
// more than a small GEMM. alpha is a run-time argument, so it does not split the cache.
struct MatmulKey {
  memory::data_type dt;
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  bool operator<(const MatmulKey& o) const {
    return std::tie(dt, ta, tb, M, N, K, beta) < std::tie(o.dt, o.ta, o.tb, o.M, o.N, o.K, o.beta);
  }
};

struct Matmul {
  dnnl::matmul prim;
  memory::desc a, b, c;
};

const Matmul& matmul_for(const MatmulKey& key) {
  static std::mutex mutex;
  static std::map<MatmulKey, Matmul> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const memory::dims a_strides = key.ta ? memory::dims{1, key.M} : memory::dims{key.K, 1};
  const memory::dims b_strides = key.tb ? memory::dims{1, key.K} : memory::dims{key.N, 1};
  Matmul mm;
  mm.a = memory::desc({key.M, key.K}, key.dt, a_strides);
  mm.b = memory::desc({key.K, key.N}, key.dt, b_strides);
  mm.c = memory::desc({key.M, key.N}, memory::data_type::f32, memory::dims{key.N, 1});
  dnnl::primitive_attr attr;
  attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(mm.a, mm.b, mm.c);
  mm.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu_engine()));
  return cache.emplace(key, std::move(mm)).first->second;
}

void run_matmul(memory::data_type dt, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                float alpha, const void* A, const void* B, float beta, float* C) {
  if (M == 0 || N == 0) return;
  const Matmul& mm = matmul_for({dt, ta == Trans::T, tb == Trans::T, M, N, K, beta});
  auto& engine = cpu_engine();
  memory scale_mem({{1}, memory::data_type::f32, memory::dims{1}}, engine, &alpha);
  memory a(mm.a, engine, const_cast<void*>(A));
  memory b(mm.b, engine, const_cast<void*>(B));
  memory c(mm.c, engine, C);
  dnnl::stream stream(engine);
  mm.prim.execute(stream, {{DNNL_ARG_SRC, a},
                           {DNNL_ARG_WEIGHTS, b},
                           {DNNL_ARG_DST, c},
                           {DNNL_ARG_ATTR_OUTPUT_SCALES, scale_mem}});
  stream.wait();
}

std::array<bf16_t, 256> make_fp8_bf16_table(Fp8Format f) {
  std::array<bf16_t, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = bf16_from_float(fp8_decode(static_cast<uint8_t>(c), f));
  return t;
}

}  // namespace

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              const float* B, float beta, float* C) {
  run_matmul(memory::data_type::f32, ta, tb, M, N, K, alpha, A, B, beta, C);
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
               const bf16_t* B, float beta, float* C) {
  run_matmul(memory::data_type::bf16, ta, tb, M, N, K, alpha, A, B, beta, C);
}

void gemm_fp8(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint8_t* A,
              Fp8Format fa, const uint8_t* B, Fp8Format fb, float beta, float* C) {
  // Decoded copies live per thread and grow to the largest operand seen.
  thread_local std::vector<bf16_t> a16, b16;
  a16.resize(static_cast<size_t>(M * K));
  b16.resize(static_cast<size_t>(K * N));
  fp8_to_bf16(a16.data(), A, M * K, fa);
  fp8_to_bf16(b16.data(), B, K * N, fb);
  gemm_bf16(ta, tb, M, N, K, alpha, a16.data(), b16.data(), beta, C);
}

void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_from_float(x[i]);
}

void fp8_to_bf16(bf16_t* y, const uint8_t* codes, int64_t n, Fp8Format f) {
  static const std::array<bf16_t, 256> e4m3 = make_fp8_bf16_table(Fp8Format::E4M3);
  static const std::array<bf16_t, 256> e5m2 = make_fp8_bf16_table(Fp8Format::E5M2);
  const bf16_t* table = (f == Fp8Format::E4M3 ? e4m3 : e5m2).data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = table[codes[i]];
}

}  // namespace fp8lm::cpu
