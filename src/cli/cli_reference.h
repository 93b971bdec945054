#pragma once
// docs/reference/cli.md, written from the command line's own definitions (every command, its
// options, their types, defaults and help), so that the reference cannot drift from the tool.
#include <CLI/CLI.hpp>
#include <string>

namespace fp8lm::cli {

std::string cli_reference(const CLI::App& app);

}  // namespace fp8lm::cli
