// The fp8lm command line: parses, then hands over to a subcommand. Every failure is one line
// on stderr, "error: ...", and a non-zero exit.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "dist/communicator.h"
#include "fp8lm/error.h"

namespace fp8lm::cli {

namespace {

bool g_parse_only = false;

// Arguments that no option or positional of the chosen command (and its subcommands) took.
std::vector<std::string> unparsed_arguments(const CLI::App& app) {
  std::vector<std::string> out = app.remaining();
  for (const CLI::App* sub : app.get_subcommands()) {
    const std::vector<std::string> more = unparsed_arguments(*sub);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

}  // namespace

void set_parse_only(bool on) {
  g_parse_only = on;
}

bool parse_only() {
  return g_parse_only;
}

namespace {

// An error's line: on a rank other than 0 of an mpirun launch, it names the rank.
void print_error(const std::string& what) {
  const Launch launch = detect_launch();
  fmt::print(stderr, "error: {}{}\n",
             launch.rank > 0 ? fmt::format("rank {}: ", launch.rank) : std::string(), what);
}

int run_command(int argc, char** argv) {
  // A file-size limit (ulimit -f) becomes a write error the run reports, not a silent kill.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fp8lm: FP8 mixed-precision training and inference for GPT-style models", "fp8lm"};
  app.set_version_flag("--version", "fp8lm " FP8LM_VERSION);
  app.require_subcommand(1);
  add_fp8_command(app);
  add_doctor_command(app);
  add_train_command(app);
  add_generate_command(app);
  add_eval_command(app);
  add_inspect_command(app);
  add_tokenizer_command(app);
  add_data_command(app);
  add_hf_commands(app);
  try {
    // CLI11 reports a mistyped command as "a subcommand is required"; name it instead.
    const auto known = [&](const char* name) {
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (sub->check_name(name)) return true;
      }
      return false;
    };
    if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
      throw fp8lm::Error(fmt::format("unknown command '{}' (see fp8lm --help)", argv[1]));
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's own exit status (it has printed its message)
  } catch (const CLI::RequiredError& e) {
    // CLI11 checks required options before unknown ones; a mistyped flag is the likelier cause.
    const std::vector<std::string> unknown = unparsed_arguments(app);
    if (!unknown.empty()) {
      fmt::print(stderr, "error: unknown option '{}' (see fp8lm --help)\n", unknown.front());
    } else {
      fmt::print(stderr, "error: {} (see fp8lm --help)\n", e.what());
    }
    return 2;
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "error: {} (see fp8lm --help)\n", e.what());
    return 2;
  } catch (const fp8lm::Error& e) {
    print_error(e.what());
    return -1;
  } catch (const std::exception& e) {
    print_error(fmt::format("internal: {}", e.what()));
    return -1;
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  const int code = run_command(argc, argv);
  if (code >= 0) return code;
  // A rank that fails ends them all: the others would wait for it in their next collective.
  abort_world_on_error(1);
  return 1;
}

}  // namespace fp8lm::cli
