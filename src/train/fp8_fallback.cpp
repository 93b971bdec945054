#include "train/fp8_fallback.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/finite.h"
#include "nn/autocast.h"

namespace fp8lm {
namespace {

void fall_back(Linear& l, Slot slot, std::string reason, int64_t step, Fp8FallbackState& state,
               std::vector<Fp8Fallback>& fell) {
  l.fall_back_to_bf16();
  const Fp8Fallback f{l.name(), std::string(slot_name(slot)), std::move(reason), step};
  state.fallbacks.push_back(f);
  fell.push_back(f);
}

}  // namespace

void fall_back_non_finite(GPT& model, Communicator& ranks, const Fp8Recipe& recipe,
                          const Batch& batch, int64_t step, Fp8FallbackState& state,
                          std::vector<Fp8Fallback>& fell) {
  // A rare path: it costs a forward per GEMM found.
  const std::vector<Linear*> linears = model.linears();
  for (size_t round = 0; round < linears.size(); ++round) {
    model.scaling().roll_back();  // the scales the failed step began with
    for (Linear* l : linears) l->watch_output(true);
    {
      const Autocast autocast(true, recipe);
      model.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
    }
    // Which GEMMs' outputs were not finite on any rank (each saw its own rows): every rank
    // then blames the same one, the first in the forward's order (linears() is that order).
    std::vector<float> broken(linears.size());
    for (size_t g = 0; g < linears.size(); ++g) {
      linears[g]->watch_output(false);
      broken[g] = linears[g]->non_finite_output_order() >= 0 ? 1.0f : 0.0f;
    }
    ranks.all_reduce_max(broken, "non-finite GEMM max-reduce");
    const auto it = std::find(broken.begin(), broken.end(), 1.0f);
    if (it == broken.end()) return;
    Linear* first = linears[static_cast<size_t>(it - broken.begin())];
    fall_back(*first, Slot::Output, "non-finite FP8 output", step, state, fell);
  }
}

void fall_back_saturated(GPT& model, std::vector<ScalingStore::Saturation> sat, Communicator& ranks,
                         int64_t step, Fp8FallbackState& state, std::vector<Fp8Fallback>& fell) {
  const std::vector<Linear*> linears = model.linears();
  if (ranks.size() > 1) {  // the worst rank's fraction, so that every rank decides alike
    std::vector<float> fractions;
    for (const auto& s : sat) fractions.push_back(static_cast<float>(s.fraction));
    ranks.all_reduce_max(fractions, "FP8 saturation max-reduce");
    for (size_t g = 0; g < sat.size(); ++g) sat[g].fraction = fractions[g];
  }
  state.saturated_steps.resize(linears.size(), 0);
  for (size_t g = 0; g < linears.size(); ++g) {
    if (linears[g]->fell_back_to_bf16()) continue;
    if (sat[g].fraction <= kFallbackSaturatedFraction) {
      state.saturated_steps[g] = 0;
    } else if (++state.saturated_steps[g] >= kFallbackSaturatedSteps) {
      fall_back(*linears[g], sat[g].slot,
                fmt::format("over {:g}% of its values saturated in each of {} steps",
                            100 * kFallbackSaturatedFraction, kFallbackSaturatedSteps),
                step, state, fell);
    }
  }
}

std::string first_non_finite(GPT& model, float loss) {
  const ParameterList ps = model.parameters();
  for (Parameter* p : ps)
    if (!all_finite(p->values())) return fmt::format("the weight {} is not finite", p->name);
  if (!std::isfinite(loss)) return fmt::format("the loss is {}", loss);
  for (auto it = ps.rbegin(); it != ps.rend(); ++it) {
    const Parameter& p = **it;
    std::vector<float> g = p.grad.to_host();
    if (p.bf16_grad()) {
      g.clear();
      for (bf16_t x : p.grad16.to_host()) g.push_back(bf16_to_float(x));
    }
    if (!all_finite(g)) return fmt::format("the gradient of {} is not finite", p.name);
  }
  return "the gradient norm is not finite";
}

}  // namespace fp8lm
