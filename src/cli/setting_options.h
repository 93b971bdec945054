#pragma once
// Train settings (train/settings.h) as a command's options, for every command that takes them
// (train, compare, advise): --NAME VALUE, and for a boolean a switch with its --no-NAME form. The
// flags' text is kept, so that a command applies --config first and the flags over it.
#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "train/settings.h"

namespace fp8lm::cli {

struct SettingOptions {
  std::map<std::string, std::string> values;  // setting name -> the flag's text
  std::set<std::string> negated;              // switches given as --no-NAME
};

// An option for each setting `keep` takes, in the help group `group` names for it.
void add_setting_options(CLI::App* cmd, const std::shared_ptr<SettingOptions>& options,
                         const std::function<bool(const Setting&)>& keep,
                         const std::function<std::string(const Setting&)>& group);

// The settings given on cmd's command line, as (setting, text): a switch alone is "true", its
// --no- form "false"; the old spelling "--bias false" still works, with a line saying so. Error
// when a switch is given both ways.
std::vector<std::pair<const Setting*, std::string>> given_settings(const SettingOptions& options,
                                                                   CLI::App* cmd);

}  // namespace fp8lm::cli
