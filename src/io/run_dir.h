#pragma once
// A run directory: config.json, metrics.jsonl (a line per step; every N steps a snapshot of
// every FP8 slot) and the same as TensorBoard event files in tb/, checkpoints/step-NNNNNN/ (the
// last K, `latest` naming the newest complete one), and at the end model.safetensors, summary.json
// and report.html.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/run_identity.h"
#include "io/safetensors.h"
#include "io/tensorboard_writer.h"
#include "train/run_loop.h"

namespace fp8lm {

// A run directory as the training loop's recorder (train/run_loop.h). Construction creates
// the directory, writes config.json (the trainer's config and the run settings) and drops metrics
// lines past the trainer's step (a resumed run rewrites what came after). Every write is checked: a
// failure (a full disk) stops the run with an Error, and metrics.jsonl never keeps a torn line. How
// a run is checkpointed: kept in config.json ("run"), so a resumed run goes on as it began.
struct RunSettings {
  int64_t checkpoint_every = 0;  // 0: at the end only
  int keep_checkpoints = 3;
  bool tensorboard = true;  // the metrics as TensorBoard event files too, in tb/
};
// The settings a run directory's config.json holds (the defaults where it holds none).
RunSettings read_run_settings(const std::string& dir);

// What a run writes into each of its files beside the model (io/run_identity.h): its id and
// its data's fingerprint (JSON); empty outside a run directory.
struct RunStamp {
  std::string run_id;
  std::string data;
};

class RunDirectory : public RunRecorder {
 public:
  RunDirectory(std::string dir, Trainer& trainer, RunSettings settings = {});
  ~RunDirectory() override;
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  void step(Trainer& trainer, const StepRecord& record) override;
  void checkpoint(Trainer& trainer) override;  // checkpoints/step-NNNNNN, then `latest`
  void stopped(Trainer& trainer) override;
  void trained(Trainer& trainer, const TrainResult& result) override;
  void finished(Trainer& trainer, const TrainResult& result) override;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  RunStamp stamp_;  // this run's id (kept from config.json on a resume) and data
  int keep_;
  int metrics_fd_ = -1;  // metrics.jsonl, appended a whole line per write
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // tb/: the same records
};

// A trainer's checkpoint (save_checkpoint of io/checkpoint.h with the trainer's model,
// optimizer and progress), and a trainer rebuilt from one.
void save_trainer(Trainer& trainer, const std::string& checkpoint_dir, const RunStamp& stamp = {});
std::unique_ptr<Trainer> resume_trainer(const std::string& checkpoint_dir);
// The model file of a trainer's model.
SafetensorsWriter trainer_model_file(Trainer& trainer, const RunStamp& stamp = {});

// What the run directory's config.json says of the run: its id, data fingerprint and settings.
RunRecord read_run_record(const std::string& run_dir);

// What a MODEL argument names: a model file itself; for a run directory its model.safetensors
// once written, else the model of its latest checkpoint (a run still training, or stopped), and
// then `note` says so.
std::string resolve_model_file(const std::string& run_or_model, std::string& note);

// The step a checkpoints/ directory's name stands for (step-NNNNNN: six to 18 digits); nullopt
// for any other name.
std::optional<int64_t> checkpoint_step(const std::string& name);
// The run's step-NNNNNN checkpoint directories, newest (highest step) first.
std::vector<std::string> checkpoint_names(const std::string& run_dir);

// The checkpoint directory `latest` names; Error when it is missing or names anything but one of
// the run's own checkpoints/step-* directories.
std::string latest_checkpoint(const std::string& run_dir);

// A run's trainer from the checkpoint `latest` names; when that is missing, damaged, outside the
// run or fails to load or verify, from the newest step-* checkpoint that loads. `fallback` says
// why `latest`'s was not used (empty when it was). Error listing every failure when none loads;
// Error at once for a checkpoint that is not the run's own (check_own_checkpoint): another
// run's state is not a fallback.
struct ResumedRun {
  std::unique_ptr<Trainer> trainer;
  std::string checkpoint;
  std::string fallback;
};
ResumedRun resume_newest_checkpoint(const std::string& run_dir);

void write_summary(const std::string& dir, const Trainer& trainer, const TrainResult& r);

}  // namespace fp8lm
