// The public Training: the engine's Trainer behind the API's own header.
#include "fp8lm/training.h"

#include "io/run_dir.h"
#include "nn/fp8_slots.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace fp8lm {

Training::Training(const TrainConfig& config) : trainer_(std::make_unique<Trainer>(config)) {}
Training::Training(std::unique_ptr<Trainer> trainer) : trainer_(std::move(trainer)) {}
Training Training::resume(const std::string& checkpoint_dir) {
  return Training(resume_trainer(checkpoint_dir));
}
Training::~Training() = default;
Training::Training(Training&&) noexcept = default;
Training& Training::operator=(Training&&) noexcept = default;

StepStats Training::step() {
  StepStats s = trainer_->train_step();
  s.val_loss = scheduled_validation(*trainer_, RunSchedule{}, s.step);
  return s;
}
bool Training::done() const {
  return trainer_->done();
}
TrainResult Training::finish() {
  return trainer_->finish();
}
void Training::save_checkpoint(const std::string& dir) {
  save_trainer(*trainer_, dir);
}
void Training::save_model(const std::string& path) {
  trainer_model_file(*trainer_).write(path);
}
const TrainConfig& Training::config() const {
  return trainer_->config();
}
const PrecisionChoice& Training::precision() const {
  return trainer_->precision();
}
std::vector<Fp8SlotState> Training::fp8_state() {
  return fp8_slot_states(trainer_->model());
}

}  // namespace fp8lm
