#include "cli/cli_reference.h"

#include <fmt/format.h>

#include <string>

namespace fp8lm::cli {
namespace {

// A table cell: no line breaks, and a | does not end the cell.
std::string cell(std::string s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '|') {
      out += "\\|";
    } else {
      out += ch == '\n' ? ' ' : ch;
    }
  }
  return out;
}

void describe(const CLI::App& cmd, const std::string& path, std::string& out) {
  const auto subs = cmd.get_subcommands({});
  const auto options = cmd.get_options([](const CLI::Option* o) {
    return !o->get_group().empty() && o->get_name() != "--help" && o->get_name() != "-h,--help";
  });
  if (!options.empty() || subs.empty()) {
    out += fmt::format("## {}\n\n{}\n\n", path, cmd.get_description());
    std::string group;
    for (const CLI::Option* o : options) {
      if (o->get_group() != group) {
        group = o->get_group();
        out += fmt::format("{}| option | type | default | what it does |\n|---|---|---|---|\n",
                           group == "Options" ? "" : fmt::format("{}:\n\n", group));
      }
      const std::string name = o->get_positional() ? o->get_name() : o->get_name(false, true);
      const std::string type = o->get_type_name().empty() ? "switch" : o->get_type_name();
      out += fmt::format("| `{}` | {} | {} | {} |\n", cell(name), cell(type),
                         o->get_required() ? "required" : cell(o->get_default_str()),
                         cell(o->get_description()));
      if (o == options.back()) out += "\n";
    }
  }
  for (const CLI::App* sub : subs) describe(*sub, path + " " + sub->get_name(), out);
}

}  // namespace

std::string cli_reference(const CLI::App& app) {
  std::string out =
      "# fp8lm command-line reference\n\n"
      "Generated from the program's own option table by `cmake --build build/release --target "
      "cli-reference`; a test fails when it is stale. Every `train` setting is also a key of "
      "`--config` files and of a run's `config.json`: the flag's name with `_` for `-` "
      "(`--d-model` is `d_model`). A switch `--NAME` has the form `--no-NAME` to turn it off.\n\n";
  for (const CLI::App* sub : app.get_subcommands({}))
    describe(*sub, "fp8lm " + sub->get_name(), out);
  return out;
}

}  // namespace fp8lm::cli
