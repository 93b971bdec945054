// Used when fp8lm is built without the CUDA backend: a GPU model cannot be made.
#include "fp8lm/error.h"
#include "gpu/cuda_gpt.h"

namespace fp8lm {

struct CudaGPT::Impl {};

CudaGPT::CudaGPT(GPT&, const CudaGptOptions&) {
  throw Error("fp8lm was built without the CUDA backend");
}
CudaGPT::~CudaGPT() = default;
CudaGPT::StepResult CudaGPT::train_step(const int32_t*, const int32_t*, int64_t, int64_t, float,
                                        float, int64_t) {
  return {};
}
float CudaGPT::loss(const int32_t*, const int32_t*, int64_t, int64_t) {
  return 0;
}
std::vector<int32_t> CudaGPT::generate(const int32_t*, int64_t, int64_t, int64_t) {
  return {};
}
void CudaGPT::upload() {}
void CudaGPT::download() {}
void CudaGPT::upload_moments(const std::vector<std::vector<float>>&,
                             const std::vector<std::vector<float>>&) {}
void CudaGPT::download_moments(std::vector<std::vector<float>>&,
                               std::vector<std::vector<float>>&) const {}
void CudaGPT::download_fp8_state() {}

}  // namespace fp8lm
