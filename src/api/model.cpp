// The public Model: a model file loaded for generation and inspection.
#include "fp8lm/error.h"
#include "fp8lm/training.h"
#include "io/checkpoint.h"
#include "nn/fp8_slots.h"
#include "train/trainer.h"

namespace fp8lm {

class LoadedModelImpl {
 public:
  LoadedModel loaded;
  DeviceSpec device;
};

Model::Model(std::unique_ptr<LoadedModelImpl> impl) : impl_(std::move(impl)) {}
Model Model::load(const std::string& path, DeviceSpec device) {
  return Model(std::make_unique<LoadedModelImpl>(LoadedModelImpl{load_model(path), device}));
}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const TrainConfig& Model::config() const {
  return impl_->loaded.config;
}

std::vector<int32_t> Model::generate(const std::vector<int32_t>& prompts, int64_t P,
                                     int64_t n_new) {
  std::vector<int32_t> out;
  for (const auto& sequence : generate(prompts, P, n_new, GenerateOptions{}))
    out.insert(out.end(), sequence.begin(), sequence.end());
  return out;
}

std::vector<std::vector<int32_t>> Model::generate(const std::vector<int32_t>& prompts, int64_t P,
                                                  int64_t n_new, const GenerateOptions& options) {
  if (P < 1 || prompts.size() % static_cast<size_t>(P) != 0) {
    throw Error("generate: the prompts do not split into rows of the prompt length");
  }
  // The precision scopes last for this call only (they are the thread's current settings).
  InferenceModel m(*impl_->loaded.model, impl_->loaded.config, impl_->device);
  const auto B = static_cast<int64_t>(prompts.size()) / P;
  return m.generate_sequences(prompts.data(), B, P, n_new, options);
}

std::vector<Fp8SlotState> Model::fp8_state() {
  return fp8_slot_states(*impl_->loaded.model);
}

}  // namespace fp8lm
