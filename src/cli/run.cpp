// The fp8lm command line: parses, then hands over to a subcommand. Every failure is one line
// on stderr, "error: ...", and a non-zero exit.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_reference.h"
#include "cli/commands.h"
#include "core/closest_name.h"
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

// The deepest command the user chose: "fp8lm fp8 table" -> table.
const CLI::App& chosen_command(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return chosen_command(*sub);
  return app;
}

// "unknown option '--precison' (did you mean --precision?)", or for a word where a command
// was expected, the nearest command; empty when nothing was left unparsed.
std::string unknown_argument(const CLI::App& app) {
  const std::vector<std::string> unknown = unparsed_arguments(app);
  if (unknown.empty()) return "";
  const CLI::App& cmd = chosen_command(app);
  const std::string path = cmd.get_parent() ? fmt::format("fp8lm {}", cmd.get_name()) : "fp8lm";
  auto word = std::find_if(unknown.begin(), unknown.end(),
                           [](const std::string& w) { return w.starts_with("-"); });
  std::vector<std::string> names;
  std::string what = "option";
  std::string typed;
  if (word != unknown.end()) {
    typed = word->substr(0, word->find('='));
    for (const CLI::Option* o : cmd.get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    }
  } else {
    typed = unknown.front();
    what = cmd.get_subcommands({}).empty() ? "argument" : "command";
    for (const CLI::App* sub : cmd.get_subcommands({})) names.push_back(sub->get_name());
  }
  const std::string near = closest_name(typed, names);
  return fmt::format("unknown {} '{}'{} (see {} --help)", what, typed,
                     near.empty() ? "" : fmt::format(" (did you mean {}?)", near), path);
}

// An option given an empty value ("--data ''", a variable that was never set) names nothing:
// refused, rather than read as "not given" (the default) or as a file named "".
void require_values(const CLI::App& cmd) {
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->count() == 0 || o->get_expected_min() == 0) continue;  // not given, or a switch
    for (const std::string& value : o->results()) {
      if (!value.empty()) continue;
      const std::string name = o->get_lnames().empty() ? o->get_name() : "--" + o->get_lnames()[0];
      throw Error(fmt::format("{} was given an empty value; give a {}", name,
                              o->get_type_name().empty() ? "value" : o->get_type_name()));
    }
  }
  for (const CLI::App* sub : cmd.get_subcommands()) require_values(*sub);
}

}  // namespace

void set_parse_only(bool on) {
  g_parse_only = on;
}

bool parse_only() {
  return g_parse_only;
}

namespace {

std::string filesystem_failure(const std::filesystem::filesystem_error& e) {
  const std::string path = e.path1().empty() ? "" : e.path1().string() + ": ";
  const std::string other = e.path2().empty() ? "" : fmt::format(" (to {})", e.path2().string());
  return fmt::format("{}{}{}", path, e.code().message(), other);
}

// An error's line: on a rank other than 0 of an mpirun launch, it names the rank.
void print_error(const std::string& what) {
  const Launch launch = detect_launch();
  fmt::print(stderr, "error: {}{}\n",
             launch.rank > 0 ? fmt::format("rank {}: ", launch.rank) : std::string(), what);
}

bool g_output_failure_reported = false;

void print_output_failure(int err) {
  if (g_output_failure_reported) return;
  g_output_failure_reported = true;
  print_error(fmt::format("cannot write the output: {}", std::strerror(err)));
}

int run_command(int argc, char** argv) {
  // A file-size limit (ulimit -f) becomes a write error the run reports, not a silent kill.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fp8lm: FP8 mixed-precision training and inference for GPT-style models", "fp8lm"};
  app.set_version_flag("--version", "fp8lm " FP8LM_VERSION);
  app.require_subcommand(1);
  // Help shows each option's default (as its variable starts), and its type.
  app.option_defaults()->always_capture_default();
  add_fp8_command(app);
  add_doctor_command(app);
  add_train_command(app);
  add_compare_command(app);
  add_advise_command(app);
  add_generate_command(app);
  add_eval_command(app);
  add_inspect_command(app);
  add_tokenizer_command(app);
  add_data_command(app);
  add_hf_commands(app);
  app.parse_complete_callback([&app] { require_values(app); });
  // Hidden: the Markdown of every command's options (docs/reference/cli.md is its output).
  app.add_subcommand("cli-reference", "")->group("")->callback([&app] {
    fmt::print("{}", cli_reference(app));
  });
  try {
    // CLI11 reports a mistyped command as "a subcommand is required"; name it instead.
    const auto known = [&](const char* name) {
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (sub->check_name(name)) return true;
      }
      return false;
    };
    if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      const std::string near = closest_name(argv[1], names);
      fmt::print(stderr, "error: unknown command '{}'{} (see fp8lm --help)\n", argv[1],
                 near.empty() ? "" : fmt::format(" (did you mean {}?)", near));
      return 2;
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
  } catch (const CLI::ParseError& e) {
    // CLI11 checks required options before unknown ones; a mistyped flag is the likelier cause
    // of either error, so it is named first.
    const std::string unknown = unknown_argument(app);
    if (!unknown.empty()) {
      fmt::print(stderr, "error: {}\n", unknown);
    } else {
      fmt::print(stderr, "error: {} (see fp8lm --help)\n", e.what());
    }
    return 2;
  } catch (const fp8lm::Error& e) {
    print_error(e.what());
    return -1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A directory that cannot be made or written (read-only, a dangling link, /dev/full/x):
    // the user's condition, named by its path and the system's reason.
    print_error(filesystem_failure(e));
    return -1;
  } catch (const std::bad_alloc&) {
    print_error("out of memory: the model or data is too large for this machine's memory");
    return -1;
  } catch (const std::exception& e) {
    if (std::ferror(stdout)) {  // fmt's write to stdout failed, and says why
      const auto* failed = dynamic_cast<const std::system_error*>(&e);
      print_output_failure(failed ? failed->code().value() : EIO);
      return -1;
    }
    print_error(fmt::format("internal: {}", e.what()));
    return -1;
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  int code = run_command(argc, argv);
  // Output that did not reach its file (a full disk, a closed pipe, /dev/full) is a failure,
  // not a result: a script reading it would get nothing, or half of it.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    print_output_failure(errno ? errno : EIO);
    code = code > 0 ? code : -1;
  }
  // A rank that fails, or cannot parse its flags, ends them all: the others would wait for it
  // in their next collective (and rank 0 must not go on to write the run's directory).
  if (code >= 0 && code != 2) return code;
  abort_world_on_error(code < 0 ? 1 : code);
  return code < 0 ? 1 : code;
}

}  // namespace fp8lm::cli
