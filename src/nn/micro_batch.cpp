#include "nn/micro_batch.h"

namespace fp8lm {

namespace {
MicroBatch& micro_batch_slot() {
  thread_local MicroBatch m = MicroBatch::Only;
  return m;
}
}  // namespace

MicroBatch current_micro_batch() {
  return micro_batch_slot();
}
MicroBatchScope::MicroBatchScope(MicroBatch m) : ScopedValue(micro_batch_slot(), m) {}

}  // namespace fp8lm
