#include "train/trainer.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/finite.h"
#include "dist/gradient_buckets.h"
#include "dist/optimizer_sharding.h"
#include "fp8lm/error.h"
#include "nn/fusion.h"
#include "nn/micro_batch.h"
#include "nn/precision_map.h"
#include "train/adamw.h"
#include "train/data.h"
#include "train/fp8_fallback.h"
#include "train/memory_check.h"

namespace fp8lm {

Precision gemm_precision_for(Precision p) {
  // Non-FP8 GEMMs run in BF16 under both bf16 and fp8 (as TE pairs fp8_autocast with BF16).
  return p == Precision::Fp32 ? Precision::Fp32 : Precision::Bf16;
}

namespace {

// The mean of the last kFinalLossSteps steps' losses, those of skipped steps left out (NaN if
// all were).
float final_loss(const std::vector<float>& losses) {
  const size_t tail = std::min<size_t>(kFinalLossSteps, losses.size());
  float sum = 0.0f;
  int n = 0;
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) {
    if (!std::isfinite(losses[i])) continue;
    sum += losses[i];
    ++n;
  }
  return n > 0 ? sum / static_cast<float>(n) : (tail > 0 ? NAN : 0.0f);
}
}  // namespace

InferenceScope::InferenceScope(Precision p, const Fp8Recipe& recipe)
    : gemm(gemm_precision_for(p)), autocast(p == Precision::Fp8, recipe) {}

Trainer::Trainer(const TrainConfig& cfg, Communicator& ranks) : cfg_(cfg), comm_(ranks) {
  cfg_.validate();
  if (comm_.size() > 1) {
    if (cfg_.batch_size < comm_.size()) {
      throw Error(
          fmt::format("--batch-size {} is less than the {} ranks: each rank needs a "
                      "sequence of every batch",
                      cfg_.batch_size, comm_.size()));
    }
  }
  check_training_fits(cfg_);
  if (cfg_.threads > 0) omp_set_num_threads(cfg_.threads);
  precision_ = resolve_cpu_precision(cfg_.precision, cpu_features());
  if (cfg_.data.empty()) {
    stride_ = std::make_unique<StrideTask>(cfg_.model.vocab, cfg_.max_stride, cfg_.seed);
  } else {
    text_ = open_text_source(cfg_.data, cfg_.model.seq_len, cfg_.seed, cfg_.model.vocab);
  }
  model_ = std::make_unique<GPT>(cfg_.model, cfg_.seed);
  kept_in_bf16_ = apply_precision_map(*model_, cfg_.precision_map);
  if (cfg_.zero != 0 && comm_.size() > 1)
    zero_ = std::make_unique<OptimizerSharding>(comm_, model_->parameters(), cfg_.bf16_grad_reduce);
  opt_ = std::make_unique<AdamW>(
      model_->parameters(), AdamWConfig{.weight_decay = cfg_.weight_decay},
      zero_ ? OptimizerShard{zero_->begin(), zero_->end()} : OptimizerShard{});
  model_->init_fp8(cfg_.recipe.delayed);
  for (Linear* l : model_->linears()) {
    l->set_fp8_weights(cfg_.fp8_weights);
    if (cfg_.fp8_weights) l->weight().keep_grad_in_bf16();
  }
  use_device(cfg_.device);
}

namespace {
// The optional ops (kernels/backend.h) a run with these settings calls.
std::vector<OptionalOp> ops_needed(const TrainConfig& c, const Backend& backend, bool fp8) {
  std::vector<OptionalOp> ops;
  if (!c.fusion) {
    ops.push_back(OptionalOp::UnfusedAttention);
    ops.push_back(OptionalOp::UnfusedLoss);
  }
  if (fp8 && c.recipe.block_scaled()) ops.push_back(OptionalOp::BlockCast);
  // BF16 gradients (--fp8-weights) are the host's; a device keeps FP32 ones.
  if (c.fp8_weights && backend.host_memory()) ops.push_back(OptionalOp::Bf16GradAccumulation);
  return ops;
}
}  // namespace

std::string Trainer::recipe_line() const {
  const bool native = cfg_.recipe.block_scaled() &&
                      model_->backend().block_scaled_gemms(block_scheme(cfg_.recipe.kind));
  return recipe_description(cfg_.recipe, native);
}

void Trainer::set_fusion(bool on) {
  settle();
  if (!on) model_->backend().require({OptionalOp::UnfusedAttention, OptionalOp::UnfusedLoss});
  cfg_.fusion = on;
}

void Trainer::use_device(const DeviceSpec& requested) {
  settle();
  const DeviceSpec spec = comm_.size() > 1
                              ? gpu_of_local_rank(requested, detect_launch().local_rank,
                                                  static_cast<int>(cuda_devices().devices.size()))
                              : requested;
  // Everything that can refuse comes before the trainer changes: an error leaves it as it was.
  const DeviceChoice device = resolve_device(spec);
  const PrecisionChoice precision = resolve_precision(cfg_.precision, device);
  if (device.cuda && cfg_.fp8_weights && precision.precision != Precision::Fp8) {
    throw Error("--fp8-weights needs --precision fp8");
  }
  Backend& backend = backend_for(device);
  backend.require(ops_needed(cfg_, backend, precision.precision == Precision::Fp8));
  if (comm_.size() > 1 && device.cuda && nccl_built() && device_comm_gpu_ != device.index) {
    buckets_.reset();
    device_comm_.reset();
    const auto gpus = cuda_devices().devices;
    const std::string pci = static_cast<size_t>(device.index) < gpus.size()
                                ? gpus[static_cast<size_t>(device.index)].pci_address
                                : "";
    if (!ranks_share_a_gpu(comm_, pci)) device_comm_ = make_device_collectives(comm_, device.index);
    device_comm_gpu_ = device.index;
  }
  if (&backend != &model_->backend()) move_to(backend);
  device_ = device;
  precision_ = precision;
}

void Trainer::move_to(Backend& backend) {
  std::unique_ptr<GPT> moved = model_->to(backend);
  // BF16 gradients (--fp8-weights) are the host optimizer's; a device keeps FP32 ones.
  if (cfg_.fp8_weights && backend.host_memory()) {
    for (Linear* l : moved->linears()) l->weight().keep_grad_in_bf16();
  }
  auto opt = std::make_unique<AdamW>(moved->parameters(),
                                     AdamWConfig{.weight_decay = cfg_.weight_decay}, opt_->shard());
  for (size_t i = 0; i < opt_->parameters().size(); ++i)
    if (opt_->holds_moments(i)) opt->set_moments(i, opt_->first_moment(i), opt_->second_moment(i));
  opt->set_steps(opt_->steps());
  model_ = std::move(moved);
  opt_ = std::move(opt);
  buckets_.reset();  // they point at the parameters that were
  refresh_fp8_weights();
}

InferenceModel::InferenceModel(GPT& model, const TrainConfig& cfg, const DeviceSpec& device)
    : device_(resolve_device(device)),
      precision_(resolve_precision(cfg.precision, device_)),
      copy_(&backend_for(device_) == &model.backend() ? nullptr : model.to(backend_for(device_))),
      model_(copy_ ? *copy_ : model),
      scope_(precision_.precision, cfg.recipe) {}

Trainer::~Trainer() = default;

StepStats Trainer::train_step() {
  launch_step();
  std::vector<StepStats> read = read_steps();
  return std::move(read.back());
}

void Trainer::launch_step() {
  if (decided_on_backend()) {
    launch_decided_step();
    return;
  }
  settle();  // the steps before, in order
  StepStats stats = host_decided_step();
  ++step_;
  finish_step(std::move(stats));
}

bool Trainer::decided_on_backend() const {
  // One process with the fused kernels: once its batch is uploaded a step needs nothing from
  // the host. Several ranks reduce the loss and norm through the host; --fp8-weights casts the
  // weights again after the optimizer only when it updated them.
  return cfg_.fusion && comm_.size() == 1 && !zero_sharded() && !cfg_.fp8_weights;
}

Trainer::StepInput Trainer::next_step_input() {
  const int64_t T = cfg_.model.seq_len, sequences = cfg_.sequences_per_step();
  StepInput in;
  in.start = std::chrono::steady_clock::now();
  in.step = step_ + 1;
  // Every rank draws the step's whole global batch (the stream one process with a batch of
  // batch_size x grad_accum reads) and keeps its rows of each micro-batch, so any number of
  // ranks and micro-batches trains on the same sequences in the same order.
  in.micro = micro_batches(stride_ ? stride_->next(sequences, T) : text_->next_train(sequences, T));
  in.lr = learning_rate(step_, cfg_.steps, cfg_.warmup, cfg_.lr, cfg_.lr * cfg_.min_lr_ratio);
  in.first_row = {0};
  for (const Batch& m : in.micro) in.first_row.push_back(in.first_row.back() + m.B * T);
  return in;
}

void Trainer::run_micro_batches(const StepInput& in, bool deferred,
                                std::vector<float>& micro_losses) {
  const int64_t T = cfg_.model.seq_len, sequences = cfg_.sequences_per_step();
  const bool fp8 = precision_.precision == Precision::Fp8;
  micro_losses.assign(in.micro.size(), 0.0f);
  for (size_t k = 0; k < in.micro.size(); ++k) {
    const Batch& m = in.micro[k];
    const MicroBatchScope first_or_later(in.micro.size() == 1 ? MicroBatch::Only
                                         : k == 0             ? MicroBatch::First
                                                              : MicroBatch::Later);
    {
      // Stochastic rounding's seed: the same for a step of a resumed run.
      const uint64_t step_seed =
          cfg_.seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(in.step)) ^
          (static_cast<uint64_t>(k) << 48) ^ (static_cast<uint64_t>(comm_.rank()) << 32);
      const Autocast autocast(fp8, cfg_.recipe, amax_reducer(), step_seed);
      if (deferred) {
        model_->forward(m.tokens.data(), m.targets.data(), m.B, T, sequences * T,
                        step_reads_.losses(in.first_row[k]));
      } else {
        micro_losses[k] = model_->forward(m.tokens.data(), m.targets.data(), m.B, T, sequences * T);
      }
    }
    // The last micro-batch's backward makes the gradients final: their reduction starts in it.
    if (comm_.size() > 1 && !zero_sharded() && k + 1 == in.micro.size()) {
      GradientBuckets& buckets = gradient_buckets();
      model_->backward([&](size_t first, size_t end) { buckets.ready(first, end); });
    } else {
      model_->backward();
    }
  }
}

StepStats Trainer::host_decided_step() {
  const Communicator::Traffic traffic_before = traffic();
  const StepInput in = next_step_input();
  const GemmPrecision gemm_precision(gemm_precision_for(precision_.precision));
  const FusionScope fusion(cfg_.fusion);
  const bool fp8 = precision_.precision == Precision::Fp8;
  if (fp8) model_->scaling().remember();
  opt_->zero_grad();
  // The fused loss leaves each micro-batch's row losses in the model's backend (StepReads),
  // read once after backward (with the gradient norm in one process); the unfused one (the
  // CPU's) reads its own.
  const bool deferred = cfg_.fusion;
  // One process: the norm joins the losses' read. Several: the losses are all-reduced before
  // the gradients' reduction finishes and the norm is taken.
  const bool norm_with_losses = deferred && comm_.size() == 1 && !zero_sharded();
  const bool fallback = fp8 && cfg_.fp8_fallback;
  if (deferred) step_reads_.begin_step(model_->backend(), in.first_row.back(), 0, 1);
  std::vector<float> micro_losses;
  run_micro_batches(in, deferred, micro_losses);
  float norm = 0.0f;
  if (deferred) {
    step_reads_.record(norm_with_losses ? opt_->grad_norm_on_device() : nullptr, nullptr, nullptr);
    step_reads_.read();
    norm = step_reads_.norm(0);
    micro_losses = read_micro_losses(0, in);
  }
  double loss_share[] = {weighted_loss(in, micro_losses)};
  if (comm_.size() > 1) {
    // The gradients are each rank's part of the global mean's already: summed.
    comm_.all_reduce_sum(loss_share, "loss all-reduce");
    if (zero_sharded()) {
      zero_->reduce_scatter_gradients(model_->parameters());
    } else {
      gradient_buckets().finish();
    }
  }
  const auto loss = static_cast<float>(loss_share[0]);  // one process, one batch: its own loss
  // The norm the clipping needs anyway is the check: NaN or Inf anywhere in the gradients makes
  // it non-finite, so no other pass looks at them.
  if (zero_sharded()) {  // each rank holds its share's gradients: the squares summed
    const double shard = opt_->global_grad_norm();
    double squares[] = {shard * shard};
    comm_.all_reduce_sum(squares, "gradient norm all-reduce");
    norm = static_cast<float>(std::sqrt(squares[0]));
  } else if (!norm_with_losses) {
    norm =
        cfg_.fusion ? opt_->global_grad_norm() : clip_grad_norm(opt_->parameters(), cfg_.grad_clip);
  }
  const bool clip_in_step = cfg_.fusion || zero_sharded();
  const bool skip = !std::isfinite(loss) || !std::isfinite(norm);
  std::vector<Fp8Fallback> fell;
  if (skip) {
    count_skipped(in, loss, fell);
  } else {
    // Fused: the clipping folded into the one AdamW pass; unfused: already applied.
    opt_->step(in.lr, clip_in_step ? clip_factor(norm, cfg_.grad_clip) : 1.0f);
    if (zero_sharded()) {
      all_gather_weights(cfg_.fp8_weights);  // FP8: casts and shares the FP8 weights itself
    } else {
      refresh_fp8_weights();
    }
    consecutive_skips_ = 0;
    if (fallback)
      fall_back_saturated(*model_, model_->scaling().saturation(), comm_, in.step, fallback_, fell);
  }
  // A GEMM fallen back to BF16 needs its FP32 master on every rank.
  if (!fell.empty() && zero_sharded() && cfg_.fp8_weights) all_gather_weights(false);
  if (deferred) step_reads_.clear();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - in.start).count();
  const Communicator::Traffic traffic = this->traffic();
  return step_stats(
      in, loss, norm, skip, std::move(fell), took,
      {traffic.seconds - traffic_before.seconds, traffic.bytes - traffic_before.bytes});
}

std::vector<float> Trainer::read_micro_losses(size_t step, const StepInput& in) const {
  std::vector<float> means(in.micro.size());
  for (size_t k = 0; k < in.micro.size(); ++k) {
    const Batch& m = in.micro[k];
    means[k] = step_reads_.mean_loss(step, in.first_row[k], m.targets.data(), m.B * m.T);
  }
  return means;
}

double Trainer::weighted_loss(const StepInput& in, const std::vector<float>& micro_losses) const {
  // Backward added each micro-batch's part of the step's mean gradient into the gradients.
  const auto sequences = static_cast<double>(cfg_.sequences_per_step());
  double loss = 0.0;
  for (size_t k = 0; k < in.micro.size(); ++k)
    loss += static_cast<double>(in.micro[k].B) / sequences * micro_losses[k];
  return loss;
}

void Trainer::count_skipped(const StepInput& in, float loss, std::vector<Fp8Fallback>& fell) {
  if (precision_.precision == Precision::Fp8) {
    if (cfg_.fp8_fallback)
      for (const Batch& m : in.micro)
        fall_back_non_finite(*model_, comm_, cfg_.recipe, m, in.step, fallback_, fell);
    model_->scaling().roll_back();  // this step's amaxes never happened
  }
  if (consecutive_skips_++ == 0)
    skip_reason_ = fmt::format("step {}: {}", in.step, first_non_finite(*model_, loss));
  ++skipped_steps_;
}

StepStats Trainer::step_stats(const StepInput& in, float loss, float norm, bool skip,
                              std::vector<Fp8Fallback> fell, double took,
                              const Communicator::Traffic& traffic) {
  const int64_t tokens = cfg_.sequences_per_step() * cfg_.model.seq_len;
  losses_.push_back(loss);
  seconds_ += took;
  return StepStats{in.step,
                   cfg_.steps,
                   loss,
                   in.lr,
                   norm,
                   seconds_,
                   static_cast<double>(in.step * tokens) / seconds_,
                   static_cast<double>(tokens) / took,
                   skip,
                   skipped_steps_,
                   std::move(fell),
                   traffic.seconds,
                   traffic.bytes,
                   took,
                   std::nullopt};
}

void Trainer::finish_step(StepStats stats) {
  finished_.push_back(std::move(stats));
  if (consecutive_skips_ >= cfg_.max_skipped_steps) {
    const StepStats& last = finished_.back();
    throw SkipLimitReached(
        fmt::format("step {}: {} steps in a row skipped, their loss or gradients not finite (from "
                    "{}); stopping, the run's checkpoints as they were",
                    last.step, consecutive_skips_, skip_reason_),
        std::exchange(finished_, {}));
  }
}

std::vector<StepStats> Trainer::read_steps() {
  settle();
  return std::exchange(finished_, {});
}

void Trainer::collect_block_stats(bool on) {
  block_stats_ = on;
  for (Linear* l : model_->linears()) l->collect_block_stats(on);
}

void Trainer::refresh_fp8_weights() {
  if (!cfg_.fp8_weights) return;
  // A master another rank keeps (ZeRO-1's FP8 all-gather) is that rank's to cast.
  for (Linear* l : model_->linears())
    if (!l->weight().value.empty()) l->requantize_weight(cfg_.recipe);
}

double Trainer::validation_loss(int64_t batches) {
  settle();
  const int64_t B = cfg_.batch_size, T = cfg_.model.seq_len;
  const std::vector<Batch> held_out =
      stride_ ? stride_held_out_batches(cfg_, batches) : text_->validation(B, T, batches);
  const std::vector<Fp8Meta> saved = model_->fp8_state();
  double loss;
  {
    const InferenceScope scope(precision_.precision, cfg_.recipe);
    loss = mean_loss(*model_, held_out);
  }
  model_->set_fp8_state(saved);
  for (Linear* l : model_->linears()) l->invalidate_weight_cast();
  return loss;
}

TrainProgress Trainer::progress() const {
  return {step_,
          seconds_,
          losses_,
          stride_ ? stride_->state() : text_->state(),
          skipped_steps_,
          consecutive_skips_,
          skip_reason_,
          fallback_.fallbacks,
          fallback_.saturated_steps};
}

void Trainer::restore_progress(TrainProgress p) {
  settle();
  step_ = p.step;
  seconds_ = p.seconds;
  losses_ = std::move(p.losses);
  skipped_steps_ = p.skipped_steps;
  consecutive_skips_ = p.consecutive_skips;
  skip_reason_ = std::move(p.skip_reason);
  // The GEMMs themselves were moved back to BF16 when the model file was applied
  // (apply_model_tensors): this is the record of it.
  fallback_.fallbacks = std::move(p.fp8_fallbacks);
  fallback_.saturated_steps = std::move(p.saturated_steps);
  if (stride_) {
    stride_->restore(p.data_state);
  } else {
    text_->restore(p.data_state);
  }
}

TrainResult Trainer::end_training() {
  settle();
  // The run's model whole on every rank, FP32 masters included, for whoever takes it.
  if (zero_sharded() && cfg_.fp8_weights) all_gather_weights(false);
  TrainResult result;
  result.precision = precision_;
  result.stride_task = stride_ != nullptr;
  result.steps = step_;
  result.seconds = seconds_;
  const int64_t T = cfg_.model.seq_len;
  result.tokens_per_s =
      seconds_ > 0 ? static_cast<double>(step_ * cfg_.sequences_per_step() * T) / seconds_ : 0.0;
  result.losses = losses_;
  result.skipped_steps = skipped_steps_;
  result.fp8_fallbacks = fallback_.fallbacks;
  result.final_loss = final_loss(losses_);
  // A run that ended on skipped steps ended on a model whose loss was not finite: its figures
  // from before are not the model's, whatever the mean of the finite ones says.
  if (consecutive_skips_ > 0) {
    result.final_loss = NAN;
    result.failure = fmt::format(
        "the last {} of {} steps were skipped, their loss or gradients not finite{}",
        consecutive_skips_, step_, skip_reason_.empty() ? "" : fmt::format(" ({})", skip_reason_));
  }
  for (Parameter* p : model_->parameters()) {
    if (result.failure.empty() && !all_finite(p->values()))
      result.failure = fmt::format("the model's weight {} is not finite", p->name);
  }
  return result;
}

void Trainer::evaluate(TrainResult& result) {
  if (!cfg_.evaluate) return;
  const int64_t B = cfg_.batch_size, T = cfg_.model.seq_len;
  const InferenceScope scope(precision_.precision, cfg_.recipe);
  if (stride_) {
    result.stride_accuracy = stride_accuracy(*model_, cfg_);
  } else {
    const auto val = text_->validation(B, T, 8);
    result.val_loss = static_cast<float>(mean_loss(*model_, val));
    if (!std::isfinite(result.val_loss) && result.failure.empty())
      result.failure = fmt::format("the validation loss is {}", result.val_loss);
    const std::vector<int32_t> prompt = text_->validation_prompt(std::min<int64_t>(16, T / 2));
    const auto P = static_cast<int64_t>(prompt.size());
    std::vector<int32_t> all = prompt;
    GenerateOptions stop;
    stop.stop_tokens = text_->stop_tokens();  // a document's end ends the sample
    const auto gen = model_->generate_sequences(prompt.data(), 1, P, T - P, stop)[0];
    all.insert(all.end(), gen.begin(), gen.end());
    result.sample = text_->decode(all);
  }
}

TrainResult Trainer::finish() {
  TrainResult result = end_training();
  evaluate(result);
  return result;
}

TrainResult train(const TrainConfig& cfg, const ProgressFn& progress,
                  std::unique_ptr<GPT>* model_out) {
  Trainer trainer(cfg);
  while (!trainer.done()) {
    const StepStats s = trainer.train_step();
    if (progress) progress(s);
  }
  TrainResult result = trainer.finish();
  if (model_out) *model_out = trainer.release_model();
  return result;
}

}  // namespace fp8lm
