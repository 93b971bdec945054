#include "train/evaluation.h"

#include <algorithm>

namespace fp8lm {

double stride_accuracy(GPT& model, const TrainConfig& cfg) {
  StrideTask heldout(cfg.model.vocab, cfg.max_stride, cfg.seed ^ 0x9e3779b97f4a7c15ull);
  const int64_t B = cfg.eval_prompts, P = cfg.prompt_len, n_new = cfg.model.seq_len - P;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> flat;
  for (int64_t b = 0; b < B; ++b) {
    const auto [a, k] = heldout.draw();
    prompts.push_back(heldout.sequence(a, k, P));
    flat.insert(flat.end(), prompts.back().begin(), prompts.back().end());
  }
  const std::vector<int32_t> out = model.generate(flat.data(), B, P, n_new);
  int64_t kept = 0;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t> gen(out.begin() + b * n_new, out.begin() + (b + 1) * n_new);
    const auto ok =
        StrideTask::continues_stride(prompts[static_cast<size_t>(b)], gen, cfg.model.vocab);
    kept += std::count(ok.begin(), ok.end(), true);
  }
  return static_cast<double>(kept) / static_cast<double>(B * n_new);
}

std::vector<Batch> stride_held_out_batches(const TrainConfig& cfg, int64_t batches) {
  StrideTask task(cfg.model.vocab, cfg.max_stride, cfg.seed ^ 0x5851f42d4c957f2dull);
  std::vector<Batch> out;
  for (int64_t i = 0; i < batches; ++i) out.push_back(task.next(cfg.batch_size, cfg.model.seq_len));
  return out;
}

namespace {
// Each batch's mean loss weighted by its sequences.
template <class BatchLoss>
double weighted_mean_loss(const std::vector<Batch>& batches, BatchLoss loss) {
  double sum = 0;
  int64_t rows = 0;
  for (const Batch& b : batches) {
    sum += loss(b) * static_cast<double>(b.B);
    rows += b.B;
  }
  return rows ? sum / static_cast<double>(rows) : 0.0;
}
}  // namespace

double mean_loss(GPT& model, const std::vector<Batch>& batches) {
  return weighted_mean_loss(batches, [&](const Batch& b) {
    return model.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  });
}

}  // namespace fp8lm
