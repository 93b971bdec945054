#pragma once
// Each subcommand registers its flags and a callback on the app; main only dispatches.
#include <CLI/CLI.hpp>

namespace fp8lm::cli {

void add_fp8_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_inspect_command(CLI::App& app);

}  // namespace fp8lm::cli
