#include "nn/autocast.h"

#include <algorithm>

#include "nn/scaling_store.h"

namespace fp8lm {

AutocastState& autocast_state() {
  thread_local AutocastState state;
  return state;
}

namespace {
// The list of metas a scope used, kept between scopes so a training step's scope reuses its
// storage rather than allocating.
std::vector<ScalingStore*>& spare_used() {
  thread_local std::vector<ScalingStore*> v;
  return v;
}
}  // namespace

Autocast::Autocast(bool enabled, const Fp8Recipe& recipe, AmaxReducer reduce, uint64_t step_seed)
    : saved_(std::move(autocast_state())) {
  recipe.delayed.validate();
  std::vector<ScalingStore*> used = std::move(spare_used());
  used.clear();
  autocast_state() = AutocastState{enabled, recipe, std::move(reduce), std::move(used), step_seed};
}

Autocast::~Autocast() {
  AutocastState& s = autocast_state();
  if (s.enabled && s.recipe.kind == ScalingKind::Delayed && !s.used.empty()) {
    for (ScalingStore* store : s.used)
      store->update(Direction::Forward, s.recipe.delayed, s.reduce);
  }
  spare_used() = std::move(s.used);
  s = std::move(saved_);
}

namespace {
Precision& gemm_precision_slot() {
  thread_local Precision p = Precision::Fp32;
  return p;
}
}  // namespace

GemmPrecision::GemmPrecision(Precision p)
    : ScopedValue(gemm_precision_slot(), p == Precision::Bf16 ? Precision::Bf16 : Precision::Fp32) {
}
Precision GemmPrecision::current() {
  return gemm_precision_slot();
}

void autocast_register(ScalingStore& store) {
  auto& used = autocast_state().used;
  if (std::find(used.begin(), used.end(), &store) == used.end()) used.push_back(&store);
}

}  // namespace fp8lm
