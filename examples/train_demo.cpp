// Trains the stride demo in FP8 through the public API alone (<fp8lm/fp8lm.h>), prints one
// GEMM's FP8 scaling state as TE users read it from fp8_meta, saves the model, and generates
// from it. Usage: train_demo [STEPS] [MODEL_FILE]
#include <fp8lm/fp8lm.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  try {
    fp8lm::TrainConfig cfg;  // the stride demo's model and schedule
    cfg.precision = fp8lm::Precision::Fp8;
    cfg.recipe.delayed.format = fp8lm::Format::Hybrid;
    cfg.recipe.delayed.amax_history_len = 16;
    if (argc > 1) cfg.steps = std::atoi(argv[1]);
    const std::string model_file = argc > 2 ? argv[2] : "train_demo.safetensors";

    fp8lm::Training run(cfg);
    std::printf("precision %s (%s)\n", run.precision().label().c_str(),
                run.precision().reason.c_str());
    while (!run.done()) {
      const fp8lm::StepStats s = run.step();
      if (s.step % 20 == 0 || s.step == s.total) {
        std::printf("step %lld/%lld loss %.4f\n", static_cast<long long>(s.step),
                    static_cast<long long>(s.total), s.loss);
      }
    }
    for (const fp8lm::Fp8SlotState& slot : run.fp8_state()) {
      if (slot.gemm == "layers.0.fc1" && (slot.slot == "input" || slot.slot == "grad_output")) {
        std::printf("%s %s: scale %g, newest amax %g, saturated %.4f%%\n", slot.gemm.c_str(),
                    slot.slot.c_str(), slot.scale, slot.amax_history.back(),
                    100 * slot.saturated_fraction);
      }
    }
    const fp8lm::TrainResult r = run.finish();
    std::printf("final loss %.4f, stride accuracy %.4f\n", r.final_loss, r.stride_accuracy);
    run.save_model(model_file);

    fp8lm::Model model = fp8lm::Model::load(model_file);
    const std::vector<int32_t> prompt = {3, 10, 17, 24, 31, 38, 45, 52};  // stride 7
    const std::vector<int32_t> next = model.generate(prompt, 8, 4);
    std::printf("generated after 3 10 17 ... 52:");
    for (int32_t t : next) std::printf(" %d", t);
    std::printf("\n");
  } catch (const fp8lm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
