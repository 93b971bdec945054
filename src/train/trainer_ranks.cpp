// The Trainer across data-parallel ranks: each rank's rows of a step's batch, the gradient
// buckets, ZeRO-1's collectives (dist/optimizer_sharding.h) and the amax and stop reductions.
#include <fmt/format.h>

#include <algorithm>

#include "dist/gradient_buckets.h"
#include "dist/optimizer_sharding.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace fp8lm {

Communicator::Traffic Trainer::traffic() const {
  Communicator::Traffic t = comm_.traffic();
  if (device_comm_) {
    t.seconds += device_comm_->traffic().seconds;
    t.bytes += device_comm_->traffic().bytes;
  }
  return t;
}

std::string Trainer::collectives() const {
  if (model_->backend().host_memory()) return comm_.describe();
  if (device_comm_) return fmt::format("{}; {}", comm_.describe(), device_comm_->describe());
  return fmt::format(
      "{}; gradients through host memory: {}", comm_.describe(),
      nccl_built() ? "ranks share a GPU (NCCL takes one rank per GPU)" : "built without NCCL");
}

bool Trainer::any_rank(bool asks) const {
  if (comm_.size() == 1) return asks;
  float v[] = {asks ? 1.0f : 0.0f};
  comm_.all_reduce_max(v, "stop request max-reduce");
  return v[0] > 0;
}

std::vector<Batch> Trainer::micro_batches(Batch step) const {
  const int64_t n = comm_.size(), r = comm_.rank(), B = cfg_.batch_size, T = step.T;
  std::vector<Batch> out;
  if (n == 1 && step.B == B) {
    out.push_back(std::move(step));
    return out;
  }
  for (int64_t k = 0; k * B < step.B; ++k) {
    // Rows [B·r/n, B·(r+1)/n) of micro-batch k: shares differ by at most one row when n does
    // not divide B.
    const int64_t lo = k * B + B * r / n, hi = k * B + B * (r + 1) / n;
    Batch& b = out.emplace_back(Batch{hi - lo, T, {}, {}});
    b.tokens.assign(step.tokens.begin() + lo * T, step.tokens.begin() + hi * T);
    b.targets.assign(step.targets.begin() + lo * T, step.targets.begin() + hi * T);
  }
  return out;
}

GradientBuckets& Trainer::gradient_buckets() {
  if (!buckets_) {
    DeviceCollectives* device = model_->backend().host_memory() ? nullptr : device_comm_.get();
    buckets_ = std::make_unique<GradientBuckets>(
        model_->parameters(), comm_, cfg_.bf16_grad_reduce,
        static_cast<size_t>(cfg_.grad_bucket_mb * (1 << 20)), device);
  }
  return *buckets_;
}

void Trainer::all_gather_weights(bool fp8) {
  const ParameterList ps = model_->parameters();
  std::vector<Linear*> as_fp8(ps.size(), nullptr);
  if (fp8 && cfg_.fp8_weights) {
    for (Linear* l : model_->linears()) {
      if (!l->fp8_weights() || l->fell_back_to_bf16()) continue;
      const auto it = std::find(ps.begin(), ps.end(), &l->weight());
      if (it != ps.end()) as_fp8[static_cast<size_t>(it - ps.begin())] = l;
    }
  }
  zero_->all_gather_weights(ps, as_fp8, cfg_.recipe,
                            fp8 ? "FP8 weight all-gather" : "weight all-gather");
}

void Trainer::gather_optimizer_state() {
  settle();
  if (!zero_sharded()) return;
  const ParameterList ps = opt_->parameters();
  const bool first = comm_.rank() == 0;
  if (first) opt_->hold_all_moments();
  for (const bool second : {false, true}) {
    zero_->gather_to_first(
        ps,
        [&](size_t i, Parameter&) -> BackendBuffer<float>& {
          return second ? opt_->second_moment_buffer(i) : opt_->first_moment_buffer(i);
        },
        "optimizer state gather");
  }
  if (!cfg_.fp8_weights) return;
  // The FP32 masters only their updating ranks keep (ZeRO-1's FP8 all-gather), for the model
  // file and train_state on rank 0.
  if (first) {
    for (Parameter* p : ps) {
      if (!p->value.empty()) continue;
      p->value.resize(static_cast<size_t>(p->numel()));
      regathered_masters_.push_back(p);
    }
  }
  zero_->gather_to_first(
      ps, [](size_t, Parameter& p) -> BackendBuffer<float>& { return p.value; },
      "optimizer state gather");
}

void Trainer::release_gathered_optimizer_state() {
  if (!zero_sharded()) return;
  opt_->release_moments_outside_shard();
  for (Parameter* p : regathered_masters_) p->value.clear();
  regathered_masters_.clear();
}

AmaxReducer Trainer::amax_reducer() {
  if (comm_.size() == 1) return {};
  return [this](std::span<float> amaxes) { comm_.all_reduce_max(amaxes, "FP8 amax max-reduce"); };
}

}  // namespace fp8lm
