#pragma once
// Each subcommand registers its flags and a callback on the app; main only dispatches.
#include <CLI/CLI.hpp>
#include <memory>

namespace fp8lm::cli {

void add_fp8_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_advise_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_hf_commands(CLI::App& app);  // export, import, logits

// The whole command line: parses, dispatches, and turns every failure into one line on stderr
// and an exit status (main is only this).
int run(int argc, char** argv);

// For the CLI fuzz target: every command parses and checks its flags (train builds and
// validates its config), then returns before anything is read, written or trained.
void set_parse_only(bool on);
bool parse_only();

// The subcommand's action: run(*flags) once its command line is parsed, unless parse_only().
template <class Flags, class Run>
void on_call(CLI::App* cmd, std::shared_ptr<Flags> flags, Run run) {
  cmd->callback([flags, run] {
    if (!parse_only()) run(*flags);
  });
}

}  // namespace fp8lm::cli
