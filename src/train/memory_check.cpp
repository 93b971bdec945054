#include "train/memory_check.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <string>

#include "fp8lm/error.h"

namespace fp8lm {

namespace {

std::optional<double> available_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kib = 0;
    in >> kib;
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return std::nullopt;
}

}  // namespace

int64_t training_memory_estimate(const TrainConfig& c) {
  const GPTConfig& m = c.model;
  // In double: a mistyped size (d_model 10^9) must give a huge estimate, not an overflow.
  double bytes = static_cast<double>(m.parameter_count()) * 18;
  if (c.device.kind != DeviceSpec::Cuda) {
    const double tokens = static_cast<double>(c.batch_size) * static_cast<double>(m.seq_len);
    // Per token and layer, what forward saves for backward: the block's inputs, norms and
    // attention output (about 10 x d_model), the MLP's hidden values before and after the
    // activation (2-3 x ffn) and a row of attention probabilities per head; then the logits
    // and their gradient.
    const double per_layer = 10.0 * static_cast<double>(m.d_model) +
                             3.0 * static_cast<double>(m.ffn) +
                             static_cast<double>(m.n_heads) * static_cast<double>(m.seq_len);
    bytes += tokens *
             (static_cast<double>(m.n_layers) * per_layer * 4 + static_cast<double>(m.vocab) * 8);
  }
  return bytes > 9e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

void check_training_fits(const TrainConfig& c) {
  const std::optional<double> available = available_bytes();
  if (!available) return;
  const auto need = static_cast<double>(training_memory_estimate(c));
  if (need > *available) {
    throw Error(fmt::format(
        "this model needs about {:.1f} GiB to train ({} parameters: weights, gradients, AdamW "
        "moments{}); the machine has {:.1f} GiB available",
        need / (1 << 30), c.model.parameter_count(),
        c.device.kind != DeviceSpec::Cuda ? ", activations" : "", *available / (1 << 30)));
  }
}

}  // namespace fp8lm
