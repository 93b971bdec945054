// Training steps decided on the model's backend (issue 34): launched one after another without
// the host waiting for the device, their figures read together. What the host decides from a
// step (the skip's bookkeeping, the BF16 fallback) it decides when it reads, in step order.
#include <fmt/format.h>

#include <chrono>

#include "nn/autocast.h"
#include "nn/fusion.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace fp8lm {

void Trainer::launch_decided_step() {
  const bool fp8 = precision_.precision == Precision::Fp8;
  const bool counters = fp8 && cfg_.fp8_fallback;
  const int64_t rows = cfg_.sequences_per_step() * cfg_.model.seq_len;
  const size_t counter_bytes = counters ? model_->scaling().counter_bytes() : 0;
  if (!step_reads_.fits(model_->backend(), rows, counter_bytes, kMaxUnreadSteps)) settle();
  LaunchedStep launched{next_step_input(), true};
  const StepInput& in = launched.in;
  const GemmPrecision gemm_precision(gemm_precision_for(precision_.precision));
  const FusionScope fusion(cfg_.fusion);
  if (fp8) model_->scaling().remember();
  opt_->zero_grad();
  step_reads_.begin_step(model_->backend(), rows, counter_bytes, kMaxUnreadSteps);
  // The step's forward, backward and update as one graph where the backend has them
  // (Backend::begin_graph): the first steps, which size the buffers, run as they are queued.
  Backend& be = model_->backend();
  bool capturing = graphs_ && step_ >= kStepsBeforeGraphs && !block_stats_ && be.begin_graph();
  try {
    std::vector<float> unused;
    run_micro_batches(in, /*deferred=*/true, unused);
    const AdamW::DecidedStep d =
        opt_->step_decided_on_backend(in.lr, cfg_.grad_clip, step_reads_.losses(0), rows);
    // The counters as the step's casts left them, before a skip rolls them back (unless the
    // step rebuilt the store: then they are not this layout's, and the saturation rule waits).
    const bool same_counters = counters && model_->scaling().counter_bytes() == counter_bytes;
    step_reads_.record(d.norm, d.decision, same_counters ? model_->scaling().counters() : nullptr);
    if (fp8) launched.rolled_back_on_backend = model_->scaling().roll_back_if(&d.decision->skip);
    if (capturing) {
      capturing = false;
      be.launch_graph();
    }
  } catch (...) {
    if (capturing) be.abandon_graph();
    step_reads_.drop_newest();  // a step that failed (an Error) has nothing to read
    throw;
  }
  launched_.push_back(std::move(launched));
  ++step_;
  // A store the step rebuilt (a new recipe) is rolled back by the host: it reads at once.
  if (!launched_.back().rolled_back_on_backend) settle();
}

void Trainer::settle() {
  if (launched_.empty()) return;
  step_reads_.read();
  const auto now = std::chrono::steady_clock::now();
  // The steps ran back to back since the first was launched: each is given an equal share.
  const double took = std::chrono::duration<double>(now - launched_.front().in.start).count() /
                      static_cast<double>(launched_.size());
  std::vector<LaunchedStep> launched = std::exchange(launched_, {});
  const size_t n = launched.size();
  try {
    for (size_t i = 0; i < n; ++i) {
      const StepInput& in = launched[i].in;
      const auto loss = static_cast<float>(weighted_loss(in, read_micro_losses(i, in)));
      const float norm = step_reads_.norm(i);
      const bool skip = step_reads_.skipped(i);
      std::vector<Fp8Fallback> fell;
      if (skip) {
        // count_skipped goes back to the scaling state remembered: where the backend's
        // roll-back left it, or (a rebuilt store) where this step, the last, began.
        if (precision_.precision == Precision::Fp8 && launched[i].rolled_back_on_backend)
          model_->scaling().remember();
        count_skipped(in, loss, fell);
        opt_->count_skipped_step();
      } else {
        consecutive_skips_ = 0;
        if (!step_reads_.counters(i).empty()) {
          const ScalingStore& scaling = model_->scaling();
          fall_back_saturated(*model_, scaling.saturation(step_reads_.counters(i).data()), comm_,
                              in.step, fallback_, fell);
        }
      }
      finish_step(step_stats(in, loss, norm, skip, std::move(fell), took, {}));
    }
  } catch (...) {
    step_reads_.clear();  // the steps after a stopping one are not recorded
    throw;
  }
  step_reads_.clear();
}

}  // namespace fp8lm
