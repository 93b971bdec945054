#include "nn/fusion.h"

namespace fp8lm {
namespace {
bool& enabled() {
  thread_local bool on = true;
  return on;
}
}  // namespace

bool fusion_enabled() {
  return enabled();
}

FusionScope::FusionScope(bool on) : ScopedValue(enabled(), on) {}

}  // namespace fp8lm
